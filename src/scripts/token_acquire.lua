-- token_acquire: take a token lock as redis-py, node redlock, redis-semaphore and redsync take
-- theirs (`SET key token NX PX ttl`), and move a fencing token kept beside it, which only this
-- crate keeps. Safe to repeat with the same token.
--   KEYS[1]  lock key, exactly as named (no prefix, no hash tag imposed)
--   KEYS[2]  fence key: keys::companion_key(lock, ':fence'), in the lock key's slot
--   ARGV[1]  the token (not empty)
--   ARGV[2]  lease length in ms (> 0)
--   ARGV[3]  how long the fence state outlives the lease, in ms
-- Returns
--   {1, pttl, fence}  ours: taken now, or held by this very token already (a repeat whose first
--                     reply was lost), with the time it has left and its fencing token
--   {0, pttl}         held by another token for pttl more ms (-1: a key without a TTL, such as
--                     redis-py's Lock(timeout=None) writes, or a user's string)
--   error WRONGTYPE when a key holds another type, NOTLOCK when the fence key holds a string that
--   is not a fencing token; nothing is written.
-- Uses check_types, read_fence and now_us from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'string', 'lock'}, {KEYS[2], 'string', 'fence'}})
if types.err then return types end
local last = read_fence(KEYS[2], types[2])
if type(last) == 'table' then return last end
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
if cur and types[2] == 'string' then
  -- A repeat: the lock, and the fencing token its first application issued, are ours already.
  return {1, redis.call('PTTL', KEYS[1]), last}
end
-- The token is the larger of "one more than the last" and the server time in microseconds, so
-- it keeps increasing after the fence key has expired (as the expire lock's). A repeat that
-- finds its fence key gone (deleted by hand) gets a new token, larger than every earlier one.
local fence = last + 1
local now = now_us()
if now > fence then
  fence = now
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', pttl + tonumber(ARGV[3]))
return {1, pttl, fence}
