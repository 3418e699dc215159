-- redlock_release: delete the key only if it holds exactly this value.
--   KEYS[1]  <prefix>{name}:redlock
--   ARGV[1]  the lease value (random, one per acquisition)
-- Returns 1 deleted, 0 not ours (absent, expired or another value).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
