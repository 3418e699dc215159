-- fair_lock: the expire lock in fair mode. Take the lock if it is free and nobody live is queued
-- ahead; else join (or stay in) the lock's FIFO of waiters, with a waiter lease.
--   KEYS[1]  lock key    <prefix>{name}
--   KEYS[2]  fence key   <prefix>{name}:fence
--   KEYS[3]  queue       <prefix>{name}:fairq   zset: waiter nonce -> arrival (server us)
--   KEYS[4]  waiters     <prefix>{name}:fairw   hash: waiter nonce -> "<lease end ms>:<lease ms>:<wake channel>"
--   ARGV[1]  lease length in ms (> 0)
--   ARGV[2]  nonce: one per acquisition, the same for each of its attempts
--   ARGV[3]  how long the fence state outlives the lease, in ms
--   ARGV[4]  the waiter lease in ms (> 0): how long this waiter's place lasts unless refreshed,
--            and how long a grant made to it lasts before it confirms it
--   ARGV[5]  the waiter's wake channel (in the lock's hash slot), announced to when granted
--   ARGV[6]  '1' to queue when busy (a waiting call); '0' for a single attempt
-- Returns
--   {1, lease, pttl}
--                ours: taken now, or granted by a release (confirmed now: the lease is rewritten
--                to ARGV[1] from now, the fencing token kept), or held already (a repeat);
--                safe to repeat. pttl = the lease's time left in ms as the server sees it: the
--                PX this script just set (the expiry runs from after the request was sent).
--   {0, pttl, mark}
--                busy: held for pttl more ms (-1: the lock key has no expiry), or free with a
--                live waiter ahead of us (pttl is that waiter's lease left). mark = max(last fencing token, server time in us):
--                every grant a release makes after this attempt has a larger fencing token
--                (the waiter trusts a grant announcement only then: see fair_unlock).
--   error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
-- get_string, check_types, fence_token: from prelude.lua, prepended.
-- Nobody queued (the uncontended case): the queue's keys are absent, so there is nothing to type
-- check, skip or leave there (the fair cycle then costs what the plain one does).
local queued = redis.call('EXISTS', KEYS[3], KEYS[4]) > 0
local cur, lock_err = get_string(KEYS[1], 'lock')
if lock_err then return lock_err end
local fence_raw, fence_err = get_string(KEYS[2], 'fence')
if fence_err then return fence_err end
if queued then
  local types = check_types({{KEYS[3], 'zset', 'queue'}, {KEYS[4], 'hash', 'waiters'}})
  if types.err then return types end
end
local last = fence_token(fence_raw)
if type(last) == 'table' then return last end
local ttl = tonumber(ARGV[1])
local nonce = ARGV[2]
local retention = tonumber(ARGV[3])
local wl = tonumber(ARGV[4])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local function leave(who)
  redis.call('ZREM', KEYS[3], who)
  redis.call('HDEL', KEYS[4], who)
end
local function queue()
  if ARGV[6] ~= '1' then return end
  if not redis.call('ZSCORE', KEYS[3], nonce) then
    redis.call('ZADD', KEYS[3], now_us, nonce)
  end
  redis.call('HSET', KEYS[4], nonce, string.format('%d:%d:%s', now_ms + wl, wl, ARGV[5]))
  for i = 3, 4 do
    if redis.call('PTTL', KEYS[i]) < wl then
      redis.call('PEXPIRE', KEYS[i], wl)
    end
  end
end
local function take(fence)
  local lease = string.format('tl1:%d:%d:%s', now_ms + ttl, fence, nonce)
  redis.call('SET', KEYS[1], lease, 'PX', ttl)
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ttl + retention)
  if queued then leave(nonce) end
  -- The PX just set: the key's expiry runs from a moment after the request was sent.
  return {1, lease, ttl}
end
if cur then
  if string.sub(cur, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
  end
  local mine = ':' .. nonce
  if string.sub(cur, -#mine) == mine then
    -- Granted to us by a release (or taken by an attempt whose reply was lost): confirm it.
    local fence = tonumber(string.match(cur, '^tl1:%d+:(%d+):'))
    return take(fence)
  end
  queue()
  return {0, redis.call('PTTL', KEYS[1]), math.max(last, now_us)}
end
-- Free. Skip waiters whose lease ran out (crashed, or gone without leaving).
while queued do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head or head == nonce then break end
  local info = redis.call('HGET', KEYS[4], head)
  local ends = info and tonumber(string.match(info, '^(%d+):'))
  if ends and ends > now_ms then
    queue()
    return {0, ends - now_ms, math.max(last, now_us)}
  end
  leave(head)
end
local fence = last + 1
if now_us > fence then
  fence = now_us
end
return take(fence)
