-- rw_fair_write_release: a fair writer's release, or a fair waiter leaving the queue; either
-- way a freed write lock is granted in the same step to the first live queued writer, and that
-- writer alone is woken.
--   KEYS[1]  writer key   <prefix>{name}:w
--   KEYS[2]  intent key   <prefix>{name}:wi
--   KEYS[3]  fence key    <prefix>{name}:fence
--   KEYS[4]  queue        <prefix>{name}:wq   (as rw_fair_write_acquire)
--   KEYS[5]  waiters      <prefix>{name}:ww
--   ARGV[1]  the write lease to release, or (ARGV[2] = 'nonce') the nonce of a waiter leaving:
--            it leaves the queue, withdraws its intent, and a grant it received is released
--   ARGV[2]  'lease' or 'nonce'
--   ARGV[3]  how long the fence state outlives a lease, in ms
--   ARGV[4]  the lock's release channel: announced to when the lock is free and nobody fair is
--            waiting (readers and plain writers wait there)
--   ARGV[5]  'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
--   ARGV[6]  intent lease in ms (writer preference; 0: none): a fair intent passes to the next
--            live queued writer for that long
--   ARGV[7]  optional, with 'nonce': a fencing token, the last an operator's snapshot saw
--            issued: a write lock held under the nonce is given back only if its token is no
--            larger (one taken or granted after the snapshot is left alone)
-- A plain writer's intent (one no queued fair writer holds) is respected: a release then grants
-- nothing, frees the lock and announces on ARGV[4], where that writer waits. A waiter leaving a
-- free write lock as the first live queued writer (no release is coming to hand it on) wakes
-- the next live queued writer on its wake channel ('released').
-- Returns {released, granted}: released 1 (the lease was ours and is gone), 0 (held by another
-- lease; nothing changed but a leaving waiter's place and intent), -1 (not held); granted 1
-- when the lock went to the next queued writer, else 0. Safe to repeat: a repeat finds nothing
-- of ours.
-- Error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
-- check_types, read_fence, read_writer, read_intent: from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'string', 'writer'}, {KEYS[2], 'string', 'intent'}, {KEYS[3], 'string', 'fence'}, {KEYS[4], 'zset', 'queue'}, {KEYS[5], 'hash', 'waiters'}})
if types.err then return types end
local wt, it, ft, qt, ht = types[1], types[2], types[3], types[4], types[5]
local last = read_fence(KEYS[3], ft)
if type(last) == 'table' then return last end
local writer = read_writer(KEYS[1], wt)
if type(writer) == 'table' then return writer end
local intent = read_intent(KEYS[2], it)
if type(intent) == 'table' then return intent end
local fair_intent = intent and redis.call('HEXISTS', KEYS[5], intent) == 1
local intent_ms = tonumber(ARGV[6])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function announce(channel, message)
  if ARGV[5] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', channel, message)) == 'table' then
    redis.pcall('PUBLISH', channel, message)
  end
end
local function leave(who)
  redis.call('ZREM', KEYS[4], who)
  redis.call('HDEL', KEYS[5], who)
end
-- The first live queued writer and its entry; waiters whose lease ran out are dropped.
local function head()
  while true do
    local first = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not first then return false end
    local info = redis.call('HGET', KEYS[5], first)
    local ends, wl, channel
    if info then
      ends, wl, channel = string.match(info, '^(%d+):(%d+):(.*)$')
    end
    if ends and tonumber(ends) > now then return first, tonumber(wl), channel end
    leave(first)
  end
end
-- A fair intent names the first live queued writer: move it there, or drop it. True if kept.
local function pass_intent()
  local first = head()
  if first and intent_ms > 0 then
    redis.call('SET', KEYS[2], first, 'PX', intent_ms)
    return true
  end
  redis.call('DEL', KEYS[2])
  return false
end
local ours
local withdrew = false
local was_first = false
if ARGV[2] == 'nonce' then
  was_first = not writer and head() == ARGV[1]
  leave(ARGV[1])
  withdrew = intent == ARGV[1]
  local mine = ':' .. ARGV[1]
  ours = writer and string.sub(writer, -#mine) == mine
  if ours and ARGV[7] then
    local fence = tonumber(string.match(writer, '^tl1:%d+:(%d+):'))
    ours = fence ~= nil and fence <= tonumber(ARGV[7])
  end
else
  ours = writer == ARGV[1]
end
local moves = withdrew or fair_intent
if not ours then
  if moves and not pass_intent() then
    -- Readers kept out by the intent may enter now.
    announce(ARGV[4], 'released')
  end
  if was_first then
    local next_writer, _, next_channel = head()
    if next_writer then
      announce(next_channel, 'released')
    end
  end
  if writer then return {0, 0} end
  return {-1, 0}
end
redis.call('DEL', KEYS[1])
local retention = tonumber(ARGV[3])
-- A plain writer's intent: it goes first, as for plain writers.
local plain_intent = intent and not moves
local first, wl, channel = false, 0, false
if not plain_intent then
  first, wl, channel = head()
end
if first then
  -- Granted for the waiter lease: a grant to a waiter that died lapses that soon; the waiter
  -- confirms it (rw_fair_write_acquire) and so gets its full lease.
  local fence = last + 1
  if now_us > fence then
    fence = now_us
  end
  redis.call('SET', KEYS[1], string.format('tl1:%d:%d:%s', now + wl, fence, first), 'PX', wl)
  redis.call('SET', KEYS[3], string.format('%d', fence), 'PX', wl + retention)
  leave(first)
  if moves then
    pass_intent()
  end
  announce(channel, 'granted')
  return {1, 1}
end
if moves then
  redis.call('DEL', KEYS[2])
end
announce(ARGV[4], 'released')
return {1, 0}
