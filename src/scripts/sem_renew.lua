-- sem_renew: move one live holder's lease to ARGV[2] ms from now (server time).
--   KEYS[1]  holders    <prefix>{name}:sem        zset
--   KEYS[2]  holdings   <prefix>{name}:sem:h      hash
--   KEYS[3]  fence      <prefix>{name}:sem:fence  string
--   KEYS[4]  limit      <prefix>{name}:sem:n      string (kept as long as the fence state)
--   ARGV[1]  the holder's nonce
--   ARGV[2]  new lease length in ms (> 0)
--   ARGV[3]  how long the fence state outlives the lease, in ms
-- Returns {1, expiry ms, remaining ms} renewed (remaining = the lease's time left as the server
-- sees it: its score − TIME), {-1} not held (released, or its lease passed: a holder whose
-- lease has passed is gone, like an expired key, and cannot come back). Safe to repeat.
-- Error WRONGTYPE when a key holds data that is not ours; nothing is written.
-- Uses check_types and now_ms from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'zset', 'holders'}, {KEYS[2], 'hash', 'holdings'},
  {KEYS[3], 'string', 'fence'}, {KEYS[4], 'string', 'limit'}})
if types.err then return types end
local fence_type = types[3]
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) < now or not redis.call('HGET', KEYS[2], ARGV[1]) then
  return {-1}
end
local ttl = tonumber(ARGV[2])
local expiry = now + ttl
redis.call('ZADD', KEYS[1], string.format('%d', expiry), ARGV[1])
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
local keep = ttl + tonumber(ARGV[3])
if fence_type == 'string' and redis.call('PTTL', KEYS[3]) < keep then
  redis.call('PEXPIRE', KEYS[3], keep)
end
if types[4] == 'string' and redis.call('PTTL', KEYS[4]) < keep then
  redis.call('PEXPIRE', KEYS[4], keep)
end
return {1, expiry, expiry - now}
