-- rw_fair_write_acquire: a fair writer's attempt. Take the write lock if no writer holds it, no
-- live reader is in, no plain writer's intent is up, and no live fair writer is queued ahead;
-- else join (or stay in) the writers' FIFO with a waiter lease. A lock a release granted to this
-- nonce is confirmed (full lease, same fencing token).
--   KEYS[1]  writer key   <prefix>{name}:w
--   KEYS[2]  readers key  <prefix>{name}:r
--   KEYS[3]  intent key   <prefix>{name}:wi
--   KEYS[4]  fence key    <prefix>{name}:fence
--   KEYS[5]  queue        <prefix>{name}:wq   zset: waiter nonce -> arrival (server us)
--   KEYS[6]  waiters      <prefix>{name}:ww   hash: waiter nonce -> "<lease end ms>:<lease ms>:<wake channel>"
--   ARGV[1]  nonce: hex, one per acquisition, the same for each of its attempts
--   ARGV[2]  lease length in ms (> 0)
--   ARGV[3]  intent lease in ms (writer preference; 0: no intent): the intent key names the
--            first live queued writer while any fair writer waits, so new readers stay out
--   ARGV[4]  how long the fence state outlives the lease, in ms
--   ARGV[5]  the waiter lease in ms (> 0): how long this waiter's place lasts unless refreshed,
--            and how long a grant made to it lasts before it confirms it
--   ARGV[6]  the waiter's wake channel (in the lock's hash slot)
--   ARGV[7]  '1' to queue when refused (a waiting call); '0' for a single attempt
--   ARGV[8]  the lock's intent channel: a newly raised intent against live readers is announced
--   ARGV[9]  'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
--   ARGV[10] optional: '1' to announce on ARGV[8] ('idle') when refused by live readers without
--            raising an intent: a waiting writer under reader preference, once per wait, so
--            that clients give back their *idle* shared read holds (as rw_write_acquire's 7th)
-- Returns
--   {1, lease, pttl}                ours: taken now, or granted by a release (confirmed now: the
--                                   lease is rewritten to ARGV[2] from now, the fence kept), or
--                                   held already (a repeat); safe to repeat; pttl: the time the
--                                   writer key has left, which the client's deadline is dated
--                                   from
--   {0, 'writer', pttl, readers}    another writer holds it for pttl more ms
--   {0, 'intent', pttl, readers}    a live fair writer is queued ahead (pttl: its place's time
--                                   left), or a plain writer's intent is up (pttl: its time left)
--   {0, 'readers', pttl, readers}   live readers are in; the last lease ends within pttl ms
--   error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
-- check_types, read_fence, read_writer, read_intent: from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'string', 'writer'}, {KEYS[2], 'zset', 'readers'}, {KEYS[3], 'string', 'intent'}, {KEYS[4], 'string', 'fence'}, {KEYS[5], 'zset', 'queue'}, {KEYS[6], 'hash', 'waiters'}})
if types.err then return types end
local wt, rt, it, ft, qt, ht = types[1], types[2], types[3], types[4], types[5], types[6]
local last = read_fence(KEYS[4], ft)
if type(last) == 'table' then return last end
local writer = read_writer(KEYS[1], wt)
if type(writer) == 'table' then return writer end
local intent = read_intent(KEYS[3], it)
if type(intent) == 'table' then return intent end
-- An intent a fair waiter holds (it names a queued writer): the queue moves it along. Any other
-- intent is a plain writer's, which fair writers respect as plain ones do.
local fair_intent = intent and redis.call('HEXISTS', KEYS[6], intent) == 1
local nonce = ARGV[1]
local ttl = tonumber(ARGV[2])
local intent_ms = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local wl = tonumber(ARGV[5])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function leave(who)
  redis.call('ZREM', KEYS[5], who)
  redis.call('HDEL', KEYS[6], who)
end
local function queue()
  if ARGV[7] ~= '1' then return end
  if not redis.call('ZSCORE', KEYS[5], nonce) then
    redis.call('ZADD', KEYS[5], now_us, nonce)
  end
  redis.call('HSET', KEYS[6], nonce, string.format('%d:%d:%s', now + wl, wl, ARGV[6]))
  for i = 5, 6 do
    if redis.call('PTTL', KEYS[i]) < wl then
      redis.call('PEXPIRE', KEYS[i], wl)
    end
  end
end
-- The first live queued writer and its place's end; waiters whose lease ran out are dropped.
local function head()
  while true do
    local first = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
    if not first then return false, 0 end
    local info = redis.call('HGET', KEYS[6], first)
    local ends = info and tonumber(string.match(info, '^(%d+):'))
    if ends and ends > now then return first, ends end
    leave(first)
    if first == intent then
      -- A crashed waiter's intent goes with it.
      redis.call('DEL', KEYS[3])
      intent, fair_intent = false, false
    end
  end
end
-- Under writer preference the intent names the first live queued writer (unless a plain
-- writer's intent is up): announced once, when raised against live readers.
local function raise_intent(against_readers)
  if ARGV[7] ~= '1' or intent_ms <= 0 or (intent and not fair_intent) then return end
  local first = head()
  if not first then return end
  redis.call('SET', KEYS[3], first, 'PX', intent_ms)
  if not intent and against_readers then
    if ARGV[9] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[8], 'intent')) == 'table' then
      redis.pcall('PUBLISH', ARGV[8], 'intent')
    end
  end
end
local function take(fence)
  local lease = string.format('tl1:%d:%d:%s', now + ttl, fence, nonce)
  redis.call('SET', KEYS[1], lease, 'PX', ttl)
  redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ttl + retention)
  leave(nonce)
  if intent == nonce or fair_intent then
    -- The intent passes to the next live queued writer, or goes.
    local first = head()
    if first and intent_ms > 0 then
      redis.call('SET', KEYS[3], first, 'PX', intent_ms)
    else
      redis.call('DEL', KEYS[3])
    end
  end
  return {1, lease, redis.call('PTTL', KEYS[1])}
end
if writer then
  local mine = ':' .. nonce
  if string.sub(writer, -#mine) == mine then
    -- Granted to us by a release (or taken by an attempt whose reply was lost): confirm it.
    local fence = tonumber(string.match(writer, '^tl1:%d+:(%d+):'))
    if not fence then
      return redis.error_reply('NOTLOCK writer key holds a value that is not a tairlock lease')
    end
    return take(fence)
  end
  queue()
  raise_intent(false)
  return {0, 'writer', redis.call('PTTL', KEYS[1]), 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now))
local readers = redis.call('ZCARD', KEYS[2])
local first, ends = head()
if first and first ~= nonce then
  queue()
  raise_intent(readers > 0)
  return {0, 'intent', ends - now, readers}
end
if intent and intent ~= nonce and not fair_intent then
  queue()
  return {0, 'intent', redis.call('PTTL', KEYS[3]), readers}
end
if readers == 0 then
  local fence = last + 1
  if now_us > fence then
    fence = now_us
  end
  return take(fence)
end
queue()
raise_intent(true)
if intent_ms <= 0 and ARGV[10] == '1' then
  -- Reader preference: no intent, only the hint to give back idle holds.
  if ARGV[9] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[8], 'idle')) == 'table' then
    redis.pcall('PUBLISH', ARGV[8], 'idle')
  end
end
return {0, 'readers', redis.call('PTTL', KEYS[2]), readers}
