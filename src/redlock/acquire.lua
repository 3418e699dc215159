-- redlock_acquire: take the key for this acquisition unless another one holds it.
--   KEYS[1]  <prefix>{name}:redlock
--   ARGV[1]  the lease value (random, one per acquisition, the same for each of its rounds)
--   ARGV[2]  TTL in ms (> 0)
-- Returns {1, pttl} taken now (SET NX PX), or held already with this value (a repeat whose
-- reply was lost: the key the first send set, with the time it has left); pttl = the key's time
-- left in ms as the server sees it (PTTL). {0} held by another value (or another type).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('PTTL', KEYS[1])}
end
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('PTTL', KEYS[1])}
end
return {0}
