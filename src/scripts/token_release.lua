-- token_release: delete a token lock only if it holds exactly this token: the compare-and-delete
-- of redis-py, node redlock, redis-semaphore and redsync, announced to this crate's waiters.
--   KEYS[1]  lock key, exactly as named
--   ARGV[1]  the token
--   ARGV[2]  optional: the lock's release channel, published to on release
--   ARGV[3]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns 1 released, 0 held by another token (nothing deleted), -1 not held (absent: expired,
-- released already, or never taken). Safe to repeat: a repeat finds -1 or another token.
-- Error WRONGTYPE when the key holds another type than a string; nothing is deleted.
local types = check_types({{KEYS[1], 'string', 'lock'}})
if types.err then return types end
local cur = redis.call('GET', KEYS[1])
if not cur then
  return -1
end
if cur ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] then
  -- The announcement never fails the release that has already happened (see expire_unlock).
  if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
    redis.pcall('PUBLISH', ARGV[2], 'released')
  end
end
return 1
