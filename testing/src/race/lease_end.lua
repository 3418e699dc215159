-- race_lease_end: where one lease stands on the server, for the race's deadline audit. Reads
-- only.
--   KEYS[1]  the key that holds the lease
--   ARGV[1]  'value': KEYS[1] is a string whose value is the lease (it ends with the key's TTL);
--            'member': KEYS[1] is a sorted set, the lease one of its members, its score the
--            lease's last millisecond (server time)
--   ARGV[2]  the value, or the member
-- Returns {found, end ms, now us}
--   found    1 if the lease is there, 0 if not
--   end ms   the first server millisecond at which the lease is gone, at the latest; -1 when it
--            never ends (a string without a TTL); 0 when not found
--   now us   the server's time (TIME) in microseconds
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local key_type = redis.call('TYPE', KEYS[1])['ok']
if ARGV[1] == 'value' then
  if key_type ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[2] then
    return {0, 0, now_us}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    return {1, -1, now_us}
  end
  -- A key lives through its expiry's millisecond; inside a script the server judges that by a
  -- clock no later than TIME, so now + PTTL + 1 is the latest end.
  return {1, now_ms + pttl + 1, now_us}
end
if key_type ~= 'zset' then
  return {0, 0, now_us}
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not score then
  return {0, 0, now_us}
end
local ends = math.floor(tonumber(score)) + 1
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and now_ms + pttl + 1 < ends then
  ends = now_ms + pttl + 1
end
return {1, ends, now_us}
