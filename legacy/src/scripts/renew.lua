-- legacy_renew: extend a legacy-format lock this grant still holds exactly; same token.
--   KEYS[1]  lock key
--   KEYS[2]  fence key
--   ARGV[1]  the timestamp this client holds (decimal)
--   ARGV[2]  its fencing token
--   ARGV[3]  milliseconds per unit
--   ARGV[4]  new lease in units, from now by server time
--   ARGV[5]  fence retention in ms
-- Returns {1, value, pttl} renewed (the new timestamp replaces ARGV[1]; pttl: the key's time to
-- live after the write, which the client's deadline is dated from); {0} held by another grant;
-- {-1} not held; {-2} rewritten by an old client. Error WRONGTYPE on another type.
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type == 'none' then
  return {-1}
end
if lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
end
local fence_type = redis.call('TYPE', KEYS[2])['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE fence key holds a ' .. fence_type)
end
if redis.call('PTTL', KEYS[1]) < 0 then
  return {-2}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {0}
end
local unit = tonumber(ARGV[3])
local t = redis.call('TIME')
local now_ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local value = math.floor(now_ms / unit) + tonumber(ARGV[4]) + 1
local px = (value + 1) * unit - now_ms - 1
redis.call('SET', KEYS[1], string.format('%d', value), 'PX', px)
redis.call('PEXPIRE', KEYS[2], px + tonumber(ARGV[5]))
return {1, string.format('%d', value), redis.call('PTTL', KEYS[1])}
