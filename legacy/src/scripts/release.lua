-- legacy_release: delete a legacy-format lock only if it is still exactly this grant's.
--   KEYS[1]  lock key
--   KEYS[2]  fence key
--   ARGV[1]  the timestamp this client wrote (decimal, as acquire returned it)
--   ARGV[2]  the fencing token this client was given
-- Returns
--    1  released
--    0  another Watch/Scripted grant holds it (a TTL, and another value or token); untouched
--   -1  not held (no key)
--   -2  an old SETNX/GETSET client wrote it after us (the key lost its TTL); untouched
--   error WRONGTYPE when a key holds another type
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type == 'none' then
  return -1
end
if lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
end
local fence_type = redis.call('TYPE', KEYS[2])['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE fence key holds a ' .. fence_type)
end
if redis.call('PTTL', KEYS[1]) < 0 then
  return -2
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
