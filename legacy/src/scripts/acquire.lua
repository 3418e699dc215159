-- legacy_acquire: take a legacy-format lock if it is free, or if an old client wrote it (no TTL)
-- and its timestamp has passed by the server's clock; write a fencing token beside it in the
-- same step.
--   KEYS[1]  lock key, exactly as the user names it (e.g. lock.orderid)
--   KEYS[2]  fence key: {K}:fence, or K:fence when K has a hash tag (same slot either way)
--   ARGV[1]  milliseconds per unit: 1000 (seconds) or 1 (milliseconds)
--   ARGV[2]  lease in units: the `timeout` of `now + timeout + 1`
--   ARGV[3]  fence retention in ms: how long the fence key outlives the lease
-- Returns
--   {1, value, fence, pttl} taken: value = now + timeout + 1 in units, by server time; the key
--                           is written with a PX that ends it in the last millisecond of that
--                           timestamp by the TIME read here (Redis counts the PX from the
--                           script's start, which may be a little earlier: the key can go up to
--                           a millisecond or so before its timestamp passes, never after);
--                           pttl: the key's time to live after the write, which the client's
--                           deadline is dated from
--   {0, value, remaining}   held: the holder's timestamp, and ms until the key goes (its TTL), or
--                           for a key without a TTL until its timestamp passes
--   error WRONGTYPE / NOTLOCK when a key holds data that is not a lock; nothing is written
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type ~= 'none' and lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
end
local fence_type = redis.call('TYPE', KEYS[2])['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE fence key holds a ' .. fence_type)
end
local unit = tonumber(ARGV[1])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local now = math.floor(now_ms / unit)
local cur = redis.call('GET', KEYS[1])
if cur then
  if #cur > 19 or not string.match(cur, '^%d+$') then
    return redis.error_reply('NOTLOCK lock key holds a value that is not a legacy lock timestamp')
  end
  -- Held or not, by the rule WatchLock follows too (wire::held_for). A key with a TTL was written
  -- by a Watch or Scripted client: held while it exists, whatever its timestamp says (inside a
  -- script Redis judges expiry by the script's start time, and the timestamp, judged by the TIME
  -- read above, can pass a millisecond before the key goes: taking the key then would overwrite
  -- a lease its holder still relies on).
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 then
    return {0, cur, pttl}
  end
  -- No TTL: an old client wrote it. Expired iff now > value (the jeffkit rule), judged by the
  -- server's clock only.
  local held = tonumber(cur)
  if now <= held then
    -- The first ms past the timestamp, capped at 2^53 (Lua numbers are doubles: 17-19 digit
    -- timestamps would otherwise lose precision or overflow the integer reply).
    local ends_ms = (held + 1) * unit
    if ends_ms >= 9007199254740992 then
      ends_ms = 9007199254740992
    end
    return {0, cur, ends_ms - now_ms}
  end
end
local last = 0
if fence_type == 'string' then
  local raw = redis.call('GET', KEYS[2])
  if #raw > 19 or not string.match(raw, '^%d+$') then
    return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
  end
  last = tonumber(raw)
end
-- The core's fencing scheme: one more than the last, but never below the server time in us.
local fence = last + 1
if now_us > fence then
  fence = now_us
end
local value = now + tonumber(ARGV[2]) + 1
local px = (value + 1) * unit - now_ms - 1
redis.call('SET', KEYS[1], string.format('%d', value), 'PX', px)
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', px + tonumber(ARGV[3]))
return {1, string.format('%d', value), string.format('%d', fence), redis.call('PTTL', KEYS[1])}
