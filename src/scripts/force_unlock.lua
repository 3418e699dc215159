-- force_unlock: delete the lock whoever holds it, but only if it is one of our locks.
--   KEYS[1]  lock key
--   KEYS[2]  optional: the fair mode's grant record <prefix>{name}:fairg ("<nonce>:<wake
--            channel>", see fair_unlock): when it names the lease deleted (a grant its waiter
--            has not confirmed), the grant is revoked on that waiter's wake channel
--            ('revoked:<lease>'), so a waiter reading the grant's announcement only after this
--            never takes it as the lock; the record goes with the lease
--   ARGV[1]  optional: the lock's release channel, published to on release
--   ARGV[2]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- Returns 1 deleted, -1 not held.
-- Error WRONGTYPE / NOTLOCK when the key holds data that is not ours; nothing is deleted.
local lock_type = redis.call('TYPE', KEYS[1])['ok']
if lock_type == 'none' then
  return -1
end
if lock_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
end
local cur = redis.call('GET', KEYS[1])
if string.sub(cur, 1, 4) ~= 'tl1:' then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
local grant_nonce, grant_channel
if KEYS[2] then
  local grant_type = redis.call('TYPE', KEYS[2])['ok']
  if grant_type ~= 'none' and grant_type ~= 'string' then
    return redis.error_reply('WRONGTYPE grant key holds a ' .. grant_type)
  end
  if grant_type == 'string' then
    grant_nonce, grant_channel = string.match(redis.call('GET', KEYS[2]), '^(%x+):(.*)$')
    if not grant_nonce then
      return redis.error_reply('NOTLOCK grant key holds a value that is not a grant record')
    end
  end
end
redis.call('DEL', KEYS[1])
if grant_nonce and string.sub(cur, -#grant_nonce - 1) == ':' .. grant_nonce then
  redis.call('DEL', KEYS[2])
  local revoked = 'revoked:' .. cur
  if ARGV[2] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', grant_channel, revoked)) == 'table' then
    redis.pcall('PUBLISH', grant_channel, revoked)
  end
end
if ARGV[1] then
  -- The announcement never fails the release that has already happened: a user without
  -- channel permissions (Redis 7's default `acl-pubsub-default resetchannels`) or a server
  -- without SPUBLISH (mid-upgrade: fall back to PUBLISH) leaves waiters to their timed
  -- retries, which the holder's remaining time bounds.
  if ARGV[2] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[1], 'released')) == 'table' then
    redis.pcall('PUBLISH', ARGV[1], 'released')
  end
end
return 1
