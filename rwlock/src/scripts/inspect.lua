-- rw_inspect: one consistent, read-only snapshot of a reader/writer lock.
--   KEYS[1]  writer key, KEYS[2] readers key, KEYS[3] intent key, KEYS[4] fence key
-- Returns {now ms,
--          writer type, writer value or nil, writer pttl,
--          readers type, {nonce, expiry ms, ...} of the live readers (earliest expiry first),
--          intent type, intent value or nil, intent pttl,
--          fence type, fence value or nil,
--          queue type, {nonce, entry or nil, ...} of the queued fair writers in arrival order}
--   KEYS[5], KEYS[6]  optional: the fair writers' queue and waiters hash (the last two items are
--                     then given; entry is the waiters hash's "<ends ms>:<lease ms>:<channel>")
-- A key of another type is reported by its type and never read.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function str(key)
  local kt = redis.call('TYPE', key)['ok']
  if kt == 'string' then
    return kt, redis.call('GET', key)
  end
  return kt, false
end
local wt, w = str(KEYS[1])
local rt = redis.call('TYPE', KEYS[2])['ok']
local readers = {}
if rt == 'zset' then
  readers = redis.call('ZRANGEBYSCORE', KEYS[2], string.format('%d', now), '+inf', 'WITHSCORES')
end
local it, i = str(KEYS[3])
local ft, f = str(KEYS[4])
local out = {now, wt, w, redis.call('PTTL', KEYS[1]), rt, readers, it, i,
             redis.call('PTTL', KEYS[3]), ft, f}
if KEYS[6] then
  local qt = redis.call('TYPE', KEYS[5])['ok']
  local queue = {}
  if qt == 'zset' then
    local hashed = redis.call('TYPE', KEYS[6])['ok'] == 'hash'
    for _, nonce in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
      queue[#queue + 1] = nonce
      queue[#queue + 1] = hashed and redis.call('HGET', KEYS[6], nonce) or false
    end
  end
  out[#out + 1] = qt
  out[#out + 1] = queue
end
return out
