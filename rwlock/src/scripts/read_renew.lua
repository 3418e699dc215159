-- rw_read_renew: move one live reader's lease to lease ms from now (server time).
--   KEYS[1]  readers key  <prefix>{name}:r
--   ARGV[1]  the reader's nonce
--   ARGV[2]  new lease length in ms (> 0)
-- Returns {1, expiry ms, remaining ms} renewed (remaining: the time the lease has left by the
-- server's clock, never past the set's own expiry), {-1} not held (expired or released: a reader whose lease has
-- passed is gone, like an expired key, and cannot come back).
-- Error WRONGTYPE when the key holds data that is not ours; nothing is written.
local rt = redis.call('TYPE', KEYS[1])['ok']
if rt == 'none' then
  return {-1}
end
if rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {-1}
end
local lease = tonumber(ARGV[2])
local expiry = now + lease
redis.call('ZADD', KEYS[1], string.format('%d', expiry), ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
local left = expiry - now
local set = redis.call('PTTL', KEYS[1])
if set >= 0 and set < left then
  left = set
end
return {1, expiry, left}
