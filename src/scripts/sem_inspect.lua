-- sem_inspect: a read-only snapshot of a semaphore.
--   KEYS[1]  holders    <prefix>{name}:sem        zset
--   KEYS[2]  holdings   <prefix>{name}:sem:h      hash
--   KEYS[3]  fence      <prefix>{name}:sem:fence  string
--   KEYS[4]  limit      <prefix>{name}:sem:n      string
-- Returns {holders type, holdings type, last fence or false, limit type, limit or false,
-- {nonce, permits, fence, ms left}...}
-- with the live holders only (a holder whose lease has passed is not listed) in order of
-- lease end. Writes nothing; never an error (a key holding something else shows in its type).
local zt = redis.call('TYPE', KEYS[1])['ok']
local ht = redis.call('TYPE', KEYS[2])['ok']
local ft = redis.call('TYPE', KEYS[3])['ok']
local last = false
if ft == 'string' then
  last = redis.call('GET', KEYS[3])
end
local lt = redis.call('TYPE', KEYS[4])['ok']
local limit = false
if lt == 'string' then
  limit = redis.call('GET', KEYS[4])
end
local now = now_ms() -- from prelude.lua, prepended
local out = {zt, ht, last, lt, limit}
if zt == 'zset' and ht == 'hash' then
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%d', now), '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    local info = redis.call('HGET', KEYS[2], live[i])
    local permits, fence = false, false
    if info then
      permits, fence = string.match(info, '^(%d+):(%d+)$')
    end
    if permits then
      table.insert(out, {live[i], tonumber(permits), fence, tonumber(live[i + 1]) - now})
    end
  end
end
return out
