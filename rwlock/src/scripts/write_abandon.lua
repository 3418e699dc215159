-- rw_write_abandon: undo whatever one write acquisition left behind: the write lock, if that
-- acquisition took it (and it was never renewed), and its intent, if it announced one. For a
-- writer that gives up waiting, and for a cancelled acquire.
--   KEYS[1]  writer key   <prefix>{name}:w
--   KEYS[2]  intent key   <prefix>{name}:wi
--   ARGV[1]  the acquisition's nonce
--   ARGV[2]  the lock's release channel
--   ARGV[3]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
--   ARGV[4]  optional: a fencing token, the last an operator's snapshot saw issued: the write
--            lock is deleted only if its token is no larger (a writer that took it after the
--            snapshot is left alone, though it holds it under the nonce the snapshot saw)
-- Returns how many keys were deleted (0, 1 or 2); publishes on the channel when any was.
-- Error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is deleted.
local wt = redis.call('TYPE', KEYS[1])['ok']
if wt ~= 'none' and wt ~= 'string' then
  return redis.error_reply('WRONGTYPE writer key holds a ' .. wt)
end
local it = redis.call('TYPE', KEYS[2])['ok']
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
  intent = redis.call('GET', KEYS[2])
  if not string.match(intent, '^%x+$') then
    return redis.error_reply('NOTLOCK intent key holds a value that is not a writer intent')
  end
end
local deleted = 0
local mine = ':' .. ARGV[1]
local function seen(lease)
  if not ARGV[4] then return true end
  local fence = tonumber(string.match(lease, '^tl1:%d+:(%d+):'))
  return fence ~= nil and fence <= tonumber(ARGV[4])
end
if writer and string.sub(writer, -#mine) == mine and seen(writer) then
  redis.call('DEL', KEYS[1])
  deleted = deleted + 1
end
if intent == ARGV[1] then
  redis.call('DEL', KEYS[2])
  deleted = deleted + 1
end
if deleted > 0 then
  -- The announcement never fails the release that has already happened: a user without
  -- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
  -- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
  -- retries, which the holder's remaining time bounds.
  if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
    redis.pcall('PUBLISH', ARGV[2], 'released')
  end
end
return deleted
