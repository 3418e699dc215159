-- fair_unlock: release in fair mode, or leave the queue; either way, a freed lock is granted to
-- the first live waiter in the same step, and that waiter alone is woken, with the message
-- 'granted:<grant ms>:<lease>' (the grant's length in ms, then its lease value, which ends in
-- the waiter's nonce): enough for the waiter to hold without another round trip. Other
-- announcements ('released') carry nothing a waiter reads.
--   KEYS[1..4]  lock, fence, queue, waiters (as fair_lock)
--   KEYS[5]  optional: the grant record <prefix>{name}:fairg, "<nonce>:<wake channel>" of the
--            grant not confirmed yet (PX the grant's length): written with a grant, deleted with
--            the lease it names; force_unlock revokes a grant by it
--   ARGV[1]  the lease value to release, or (ARGV[2] = 'nonce') the nonce of a waiter leaving:
--            it leaves the queue, and a grant it received is released
--   ARGV[2]  'lease' or 'nonce'
--   ARGV[3]  how long the fence state outlives a lease, in ms
--   ARGV[4]  the lock's release channel: announced to when nobody was waiting (plain waiters)
--   ARGV[5]  'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- A waiter leaving a free lock as the first live waiter (nobody's release is coming to hand it
-- on) wakes the next live waiter on its wake channel ('released'), which then takes the lock.
-- Returns {released, granted}: released 1 (the lease was ours and is gone), 0 (held by another
-- lease; nothing changed but a leaving waiter's place), -1 (not held); granted 1 when the lock
-- went to the next waiter, else 0. Safe to repeat: a repeat finds nothing of ours.
-- Error WRONGTYPE / NOTLOCK when a key it would touch holds data that is not ours; nothing is
-- written.
-- get_string, check_types, read_fence: from prelude.lua, prepended.
-- Nobody queued and no grant pending (the uncontended case): the queue's keys and the grant
-- record are absent, nobody is granted or woken, and the fence is not needed, so none of them is
-- read (the fair release then costs what the plain one does).
local queued
if KEYS[5] then
  queued = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5]) > 0
else
  queued = redis.call('EXISTS', KEYS[3], KEYS[4]) > 0
end
local cur, lock_err = get_string(KEYS[1], 'lock')
if lock_err then return lock_err end
local spec = {}
if queued then
  spec[1], spec[2], spec[3] = {KEYS[2], 'string', 'fence'}, {KEYS[3], 'zset', 'queue'}, {KEYS[4], 'hash', 'waiters'}
end
local grant_at
if KEYS[5] and queued then
  grant_at = #spec + 1
  spec[grant_at] = {KEYS[5], 'string', 'grant'}
end
local types = check_types(spec)
if types.err then return types end
local grant_type = grant_at and types[grant_at]
local last = 0
if queued then
  last = read_fence(KEYS[2], types[1])
  if type(last) == 'table' then return last end
end
if cur and string.sub(cur, 1, 4) ~= 'tl1:' then
  return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
end
if grant_type == 'string' and not string.match(redis.call('GET', KEYS[5]), '^%x+:') then
  return redis.error_reply('NOTLOCK grant key holds a value that is not a grant record')
end
local function announce(channel, message)
  if ARGV[5] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', channel, message)) == 'table' then
    redis.pcall('PUBLISH', channel, message)
  end
end
local t = queued and redis.call('TIME') or {0, 0}
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
-- The first live waiter: its nonce, waiter lease and wake channel; waiters whose place lapsed
-- are dropped on the way.
local function first_live()
  while queued do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head then return false end
    local info = redis.call('HGET', KEYS[4], head)
    local ends, wl, channel
    if info then
      ends, wl, channel = string.match(info, '^(%d+):(%d+):(.*)$')
    end
    if ends and tonumber(ends) > now_ms then
      return head, tonumber(wl), channel
    end
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
  return false
end
local ours
if ARGV[2] == 'nonce' then
  local was_first = not cur and first_live() == ARGV[1]
  if queued then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
  local mine = ':' .. ARGV[1]
  ours = cur and string.sub(cur, -#mine) == mine
  if was_first then
    local next_waiter, _, channel = first_live()
    if next_waiter then
      announce(channel, 'released')
    end
  end
else
  ours = cur == ARGV[1]
end
if not cur then return {-1, 0} end
if not ours then return {0, 0} end
redis.call('DEL', KEYS[1])
if grant_type == 'string' then
  redis.call('DEL', KEYS[5])
end
local retention = tonumber(ARGV[3])
local head, wl, channel = first_live()
if head then
  -- Grant for the waiter lease: a grant to a waiter that died lapses that soon; the waiter
  -- confirms it (fair_lock) and so gets its full lease.
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  local fence = last + 1
  if now_us > fence then
    fence = now_us
  end
  local lease = string.format('tl1:%d:%d:%s', now_ms + wl, fence, head)
  redis.call('SET', KEYS[1], lease, 'PX', wl)
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', wl + retention)
  if KEYS[5] then
    redis.call('SET', KEYS[5], head .. ':' .. channel, 'PX', wl)
  end
  announce(channel, string.format('granted:%d:%s', wl, lease))
  return {1, 1}
end
announce(ARGV[4], 'released')
return {1, 0}
