-- rw_read_release: remove one reader; when it was the last live one, announce it.
--   KEYS[1]  readers key  <prefix>{name}:r
--   ARGV[1]  the reader's nonce
--   ARGV[2]  the lock's release channel <prefix>{name}:released
--   ARGV[3]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
--   KEYS[2], KEYS[3]  optional: the fair writers' queue <prefix>{name}:wq and waiters hash
--            <prefix>{name}:ww; when the last live reader leaves, the first live queued writer
--            is woken on its wake channel too (read-only on the queue)
-- Returns 1 released, -1 not held (the lease had expired, or was released already).
-- Error WRONGTYPE when the key holds data that is not ours; nothing is removed.
local rt = redis.call('TYPE', KEYS[1])['ok']
if rt == 'none' then
  return -1
end
if rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now))
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return -1
end
-- Only a waiting writer cares, and only once no live reader is left.
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- The announcement never fails the release that has already happened: a user without
  -- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
  -- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
  -- retries, which the holder's remaining time bounds.
  if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
    redis.pcall('PUBLISH', ARGV[2], 'released')
  end
  if KEYS[3] and redis.call('TYPE', KEYS[2])['ok'] == 'zset'
      and redis.call('TYPE', KEYS[3])['ok'] == 'hash' then
    local i = 0
    while true do
      local first = redis.call('ZRANGE', KEYS[2], i, i)[1]
      if not first then break end
      local info = redis.call('HGET', KEYS[3], first)
      local ends, channel
      if info then
        ends, channel = string.match(info, '^(%d+):%d+:(.*)$')
      end
      if ends and tonumber(ends) > now then
        if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', channel, 'released')) == 'table' then
          redis.pcall('PUBLISH', channel, 'released')
        end
        break
      end
      i = i + 1
    end
  end
end
return 1
