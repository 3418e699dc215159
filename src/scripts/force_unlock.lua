-- force_unlock: delete the lock whoever holds it, but only if it is one of our locks.
--   KEYS[1]  lock key
--   ARGV[1]  optional: the lock's release channel, published to on release
--   ARGV[2]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns 1 deleted, -1 not held.
-- Error WRONGTYPE / NOTLOCK when the key holds data that is not ours; nothing is deleted.
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type == 'none' then
  return -1
end
if lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
end
local cur = redis.call('GET', KEYS[1])
if string.sub(cur, 1, 4) ~= 'tl1:' then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
redis.call('DEL', KEYS[1])
if ARGV[1] then
  -- The announcement never fails the release that has already happened: a user without
  -- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
  -- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
  -- retries, which the holder's remaining time bounds.
  if ARGV[2] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[1], 'released')) == 'table' then
    redis.pcall('PUBLISH', ARGV[1], 'released')
  end
end
return 1
