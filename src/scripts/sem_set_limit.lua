-- sem_set_limit: change the limit stored with a semaphore (an operator's call). Holders keep
-- their permits and renew them as before (none is evicted); from now on callers are admitted
-- against the new limit, and a caller that counts against another limit is refused.
--   KEYS[1]  fence      <prefix>{name}:sem:fence  string
--   KEYS[2]  limit      <prefix>{name}:sem:n      string
--   ARGV[1]  the new limit (>= 1)
--   ARGV[2]  how long to keep it at least, in ms (the fence retention): it is kept as long as
--            the fence state, and at least this long
-- Returns the previous limit, 0 when none was stored.
-- Error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
-- Uses check_types from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'string', 'fence'}, {KEYS[2], 'string', 'limit'}})
if types.err then return types end
local previous = 0
if types[2] == 'string' then
  local raw = redis.call('GET', KEYS[2])
  if not string.match(raw, '^%d+$') or tonumber(raw) > 4294967295 then
    return redis.error_reply('NOTLOCK limit key holds a value that is not a semaphore limit')
  end
  previous = tonumber(raw)
end
local keep = tonumber(ARGV[2])
for i = 1, 2 do
  local left = redis.call('PTTL', KEYS[i])
  if left > keep then
    keep = left
  end
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', keep)
return previous
