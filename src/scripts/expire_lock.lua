-- expire_lock: take the lock if it is not held, with a lease and a fencing token.
--   KEYS[1]  lock key    <prefix>{name}
--   KEYS[2]  fence key   <prefix>{name}:fence   (same hash tag)
--   ARGV[1]  lease length in ms (> 0)
--   ARGV[2]  nonce: fresh, unguessable hex, one per attempt
--   ARGV[3]  how long the fence state outlives the lease, in ms
-- Returns
--   {1, lease, pttl}   taken; lease = "tl1:<expiry ms>:<fence>:<nonce>", expiry by server time;
--                      pttl = the lease's time left in ms as the server sees it, from which the
--                      client dates its deadline: for a new lease the PX this script just set
--                      (the key's expiry runs from a moment after the request was sent, so the
--                      length set is never more than the server grants), else its PTTL. Also returned when this nonce
--                      already holds the lock (a retried call whose first reply was lost), so the
--                      call is safe to repeat: the lease the first call made, with the time it
--                      has left. The repeat re-applies the key's expiry, a write, so that a WAIT
--                      after it counts the replicas that have the grant.
--   {0, holder, pttl}  held by another lease for pttl more ms (-1: the key has no expiry)
--   error WRONGTYPE / NOTLOCK when either key holds data that is not ours; nothing is written.
-- get_string, fence_token: from prelude.lua, prepended. Each key is read once: get_string's GET
-- is also the type check.
local cur, lock_err = get_string(KEYS[1], 'lock')
if lock_err then return lock_err end
local raw, fence_err = get_string(KEYS[2], 'fence')
if fence_err then return fence_err end
local last = fence_token(raw)
if type(last) == 'table' then return last end
if cur then
  if string.sub(cur, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
  end
  local mine = ':' .. ARGV[2]
  if string.sub(cur, -#mine) == mine then
    -- A repeat whose first reply was lost: touch the key (same expiry) so that this
    -- connection has written, and a WAIT pipelined after it counts only replicas that have
    -- the grant (a WAIT after no write counts every connected replica at once).
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl > 0 then
      redis.call('PEXPIRE', KEYS[1], pttl)
    end
    return {1, cur, pttl}
  end
  return {0, cur, redis.call('PTTL', KEYS[1])}
end
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = last + 1
if now_us > fence then
  fence = now_us
end
local lease = string.format('tl1:%d:%d:%s', math.floor(now_us / 1000) + ttl, fence, ARGV[2])
redis.call('SET', KEYS[1], lease, 'PX', ttl)
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ttl + tonumber(ARGV[3]))
return {1, lease, ttl}
