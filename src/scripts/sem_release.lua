-- sem_release: give one holder's permits back and announce it.
--   KEYS[1]  holders    <prefix>{name}:sem        zset
--   KEYS[2]  holdings   <prefix>{name}:sem:h      hash
--   ARGV[1]  the holder's nonce
--   ARGV[2]  the semaphore's release channel
--   ARGV[3]  'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns 1 released, -1 not held (released already, or its lease passed). Safe to repeat: a
-- repeat finds nothing of ours and announces nothing.
-- Error WRONGTYPE when a key holds data that is not ours; nothing is written.
local function check(key, want, what)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. what .. ' key holds a ' .. t)
  end
  return t
end
local z_type = check(KEYS[1], 'zset', 'holders')
if type(z_type) == 'table' then return z_type end
local h_type = check(KEYS[2], 'hash', 'holdings')
if type(h_type) == 'table' then return h_type end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local live = score and tonumber(score) >= now
redis.call('ZREM', KEYS[1], ARGV[1])
local had = redis.call('HDEL', KEYS[2], ARGV[1]) == 1
if not (live and had) then
  return -1
end
if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
  redis.pcall('PUBLISH', ARGV[2], 'released')
end
return 1
