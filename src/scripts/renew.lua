-- renew: move the expiry of a lease this caller holds, rotating its nonce.
--   KEYS[1]  lock key
--   KEYS[2]  fence key
--   ARGV[1]  the current lease value
--   ARGV[2]  new lease length in ms (> 0), from now by server time
--   ARGV[3]  new nonce
--   ARGV[4]  how long the fence state outlives the lease, in ms
-- Returns {1, new lease, pttl} renewed, pttl = the lease's time left in ms as the server sees it
--         (the PX just set, or the PTTL of a lease found); also when this new nonce already holds it (a retried renewal: the lease the
--         first call made, with the time it has left; the repeat re-applies the key's expiry so
--         that a WAIT after it counts the renewal),
--         {0} held by another lease, {-1} not held.
-- Error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
-- get_string, fence_token: from prelude.lua, prepended. Each key is read once: get_string's GET
-- is also the type check.
local cur, lock_err = get_string(KEYS[1], 'lock')
if lock_err then return lock_err end
if cur == false then
  return {-1}
end
local last, fence_err = get_string(KEYS[2], 'fence')
if fence_err then return fence_err end
local token = fence_token(last)
if type(token) == 'table' then return token end
if string.sub(cur, 1, 4) ~= 'tl1:' then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
if cur ~= ARGV[1] then
  local mine = ':' .. ARGV[3]
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
  return {0}
end
local fence = string.match(cur, '^tl1:%d+:(%d+):')
if not fence then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
local ttl = tonumber(ARGV[2])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = string.format('tl1:%d:%s:%s', math.floor(now_us / 1000) + ttl, fence, ARGV[3])
redis.call('SET', KEYS[1], lease, 'PX', ttl)
if not last or tonumber(last) < tonumber(fence) then
  last = fence
end
redis.call('SET', KEYS[2], last, 'PX', ttl + tonumber(ARGV[4]))
-- The PX just set: the key's expiry runs from a moment after the request was sent.
return {1, lease, ttl}
