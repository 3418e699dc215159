-- inspect: one consistent snapshot of a lock, read-only.
--   KEYS[1]  lock key
--   KEYS[2]  fence key
-- Returns {lock key type, lock value or nil, lock pttl, fence value or nil}; values are returned
-- only for string keys (a key of another type is reported by its type, never read).
local lock_type = redis.call('TYPE', KEYS[1])['ok']
local cur = false
if lock_type == 'string' then
  cur = redis.call('GET', KEYS[1])
end
local fence = false
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then
  fence = redis.call('GET', KEYS[2])
end
return {lock_type, cur, redis.call('PTTL', KEYS[1]), fence}
