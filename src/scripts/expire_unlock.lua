-- expire_unlock: delete the lock only if it holds exactly this lease.
--   KEYS[1]  lock key
--   ARGV[1]  the lease value expire_lock returned
--   ARGV[2]  optional: the lock's release channel, published to on release
--   ARGV[3]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns 1 released, 0 held by another lease, -1 not held (absent or expired).
-- Error WRONGTYPE / NOTLOCK when the key holds data that is not ours; nothing is deleted.
-- get_string: from prelude.lua, prepended. The key is read once: its GET is also the type
-- check.
local cur, lock_err = get_string(KEYS[1], 'lock')
if lock_err then return lock_err end
if cur == false then
  return -1
end
if string.sub(cur, 1, 4) ~= 'tl1:' then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
if cur == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    -- The announcement never fails the release that has already happened: a user without
    -- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
    -- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
    -- retries, which the holder's remaining time bounds.
    if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
      redis.pcall('PUBLISH', ARGV[2], 'released')
    end
  end
  return 1
end
return 0
