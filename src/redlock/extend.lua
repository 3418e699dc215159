-- redlock_extend: move the key's TTL only if it still holds exactly this value.
--   KEYS[1]  <prefix>{name}:redlock
--   ARGV[1]  the lease value
--   ARGV[2]  new TTL in ms
-- Returns {1, pttl} extended, pttl = the key's time left in ms as the server sees it (PTTL);
-- {0} not ours (absent, expired or another value).
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 1 then
  return {1, redis.call('PTTL', KEYS[1])}
end
return {0}
