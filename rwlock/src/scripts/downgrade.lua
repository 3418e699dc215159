-- rw_downgrade: turn a held write lock into a read lock in one step, so no other writer can
-- slip in between.
--   KEYS[1]  writer key   <prefix>{name}:w
--   KEYS[2]  readers key  <prefix>{name}:r
--   ARGV[1]  the writer's current lease value
--   ARGV[2]  the new reader's nonce
--   ARGV[3]  the read lease in ms (> 0)
--   ARGV[4]  the lock's release channel (waiting readers may enter now)
--   ARGV[5]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns {1, expiry ms, live readers, remaining ms} downgraded (also when the write lease is
-- gone because this very downgrade happened already and its reader is still live: a retried
-- call whose first reply was lost, answered with the reader its first call added); remaining:
-- the time the reader's lease has left by the server's clock (expiry − now, never past the
-- set's own expiry), {0} held by another lease, {-1} not held.
-- Error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
local wt = redis.call('TYPE', KEYS[1])['ok']
if wt ~= 'none' and wt ~= 'string' then
  return redis.error_reply('WRONGTYPE writer key holds a ' .. wt)
end
local rt = redis.call('TYPE', KEYS[2])['ok']
if rt ~= 'none' and rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local writer = false
if wt == 'string' then
  writer = redis.call('GET', KEYS[1])
  if string.sub(writer, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK writer key holds a value that is not a tairlock lease')
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
if writer ~= ARGV[1] then
  -- Done already? The reader this downgrade adds is in, live (read-only: nothing is reaped).
  if rt == 'zset' then
    local mine = redis.call('ZSCORE', KEYS[2], ARGV[2])
    if mine and tonumber(mine) >= now then
      local live = redis.call('ZCOUNT', KEYS[2], string.format('%d', now), '+inf')
      return {1, tonumber(mine), live, left(tonumber(mine))}
    end
  end
  if writer then
    return {0}
  end
  return {-1}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now))
local lease = tonumber(ARGV[3])
local expiry = now + lease
redis.call('ZADD', KEYS[2], string.format('%d', expiry), ARGV[2])
if redis.call('PTTL', KEYS[2]) < lease then
  redis.call('PEXPIRE', KEYS[2], lease)
end
redis.call('DEL', KEYS[1])
-- The announcement never fails the release that has already happened: a user without
-- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
-- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
-- retries, which the holder's remaining time bounds.
if ARGV[5] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[4], 'released')) == 'table' then
  redis.pcall('PUBLISH', ARGV[4], 'released')
end
return {1, expiry, redis.call('ZCARD', KEYS[2]), left(expiry)}
