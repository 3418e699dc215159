-- rw_read_acquire: admit one reader, unless a writer holds the lock (or, under writer
-- preference, a writer is waiting for it).
--   KEYS[1]  writer key   <prefix>{name}:w       string lease, PX
--   KEYS[2]  readers key  <prefix>{name}:r       zset reader nonce -> lease expiry (ms, server time)
--   KEYS[3]  intent key   <prefix>{name}:wi      string nonce of the waiting writer, PX (short)
--   ARGV[1]  reader nonce: fresh, unguessable hex, one per acquisition
--   ARGV[2]  lease length in ms (> 0)
--   ARGV[3]  '1': a writer's intent blocks new readers (writer preference); '0': it does not
-- Returns
--   {1, expiry ms, live readers, remaining ms}
--                                  admitted (also when this nonce is already a live reader: a
--                                  retried call whose first reply was lost, answered with the
--                                  lease its first call made); remaining: the time that lease
--                                  has left by the server's clock (expiry − now, never past the
--                                  set's own expiry), which the client's deadline is dated from
--   {0, 'writer', pttl}            a writer holds the lock for pttl more ms
--   {0, 'intent', pttl}            a writer is waiting; its intent expires in pttl ms
--   error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
local wt = redis.call('TYPE', KEYS[1])['ok']
if wt ~= 'none' and wt ~= 'string' then
  return redis.error_reply('WRONGTYPE writer key holds a ' .. wt)
end
local rt = redis.call('TYPE', KEYS[2])['ok']
if rt ~= 'none' and rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local it = redis.call('TYPE', KEYS[3])['ok']
if it ~= 'none' and it ~= 'string' then
  return redis.error_reply('WRONGTYPE intent key holds a ' .. it)
end
local writer = false
if wt == 'string' then
  writer = redis.call('GET', KEYS[1])
  if string.sub(writer, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK writer key holds a value that is not a tairlock lease')
  end
end
local intent = false
if it == 'string' then
  intent = redis.call('GET', KEYS[3])
  if not string.match(intent, '^%x+$') then
    return redis.error_reply('NOTLOCK intent key holds a value that is not a writer intent')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The time a reader's lease with this expiry has left: never past the set's own expiry.
local function left(expiry)
  local ms = expiry - now
  local set = redis.call('PTTL', KEYS[2])
  if set >= 0 and set < ms then
    ms = set
  end
  return ms
end
-- Reap readers whose lease has passed: a crashed reader blocks nobody beyond its lease.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now))
local mine = redis.call('ZSCORE', KEYS[2], ARGV[1])
if mine then
  return {1, tonumber(mine), redis.call('ZCARD', KEYS[2]), left(tonumber(mine))}
end
if writer then
  return {0, 'writer', redis.call('PTTL', KEYS[1])}
end
if intent and ARGV[3] == '1' then
  return {0, 'intent', redis.call('PTTL', KEYS[3])}
end
local lease = tonumber(ARGV[2])
local expiry = now + lease
redis.call('ZADD', KEYS[2], string.format('%d', expiry), ARGV[1])
-- The set outlives its longest lease and no more.
if redis.call('PTTL', KEYS[2]) < lease then
  redis.call('PEXPIRE', KEYS[2], lease)
end
return {1, expiry, redis.call('ZCARD', KEYS[2]), left(expiry)}
