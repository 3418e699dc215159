-- sem_acquire: take `permits` of a semaphore's `limit` permits for one holder, each holder with
-- its own lease; refuse (writing nothing) when they do not fit.
--   KEYS[1]  holders    <prefix>{name}:sem        zset: holder nonce -> lease expiry (ms, server time)
--   KEYS[2]  holdings   <prefix>{name}:sem:h      hash: holder nonce -> "<permits>:<fence>"
--   KEYS[3]  fence      <prefix>{name}:sem:fence  string: the last fencing token issued
--   ARGV[1]  holder nonce: one per acquisition, the same for each of its attempts
--   ARGV[2]  permits to take (>= 1)
--   ARGV[3]  the limit this caller counts against (>= permits)
--   ARGV[4]  lease length in ms (> 0)
--   ARGV[5]  how long the fence state outlives the lease, in ms
--   ARGV[6]  '0' plain (the queue is ignored); fair: 'wait' (queue when refused) or 'once'
--            (a single attempt: refused when it does not fit, and it does not queue)
--   ARGV[7]  fair: the waiter lease in ms, how long a place in the queue lasts unless refreshed
--   KEYS[4]  fair: queue    <prefix>{name}:sem:q   zset: waiter nonce -> arrival (server us)
--   KEYS[5]  fair: waiters  <prefix>{name}:sem:qw  hash: waiter nonce -> "<place ends ms>:<permits>"
--   KEYS[6]  limit      <prefix>{name}:sem:n      string: the limit the semaphore was given, by
--            the first caller it admitted or queued (or by sem_set_limit); kept as long as the
--            fence state. A caller that counts against another limit is refused (LIMIT error),
--            nothing written: every client of one semaphore counts against one limit
-- Fair: a caller is admitted only if the permits of the live waiters queued ahead of it, its
-- own and those held fit under the limit (first come, first served; a waiter for many permits
-- holds up those behind it); admitted, it leaves the queue. Waiters whose place lapsed are
-- dropped. Plain callers ignore the queue (mixing them with fair ones never breaks the limit,
-- only fairness).
-- Returns
--   {1, expiry ms, fence, permits in use, permits held, remaining ms}
--                                           taken now, or held already under this nonce (a
--                                           repeat: its lease is moved to ARGV[4] from now,
--                                           its permits and fence kept, whatever ARGV[2]
--                                           says); safe to repeat. remaining = the lease's
--                                           time left as the server sees it (its score − TIME).
--   {0, wait ms, permits in use}            they do not fit: the earliest holder's lease ends
--                                           in wait ms (0 when nobody holds any: the limit
--                                           itself is too small, impossible after validation).
--   error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
--   error LIMIT when the semaphore's stored limit is not ARGV[3]; nothing is written.
-- A holder is never evicted: a smaller limit only refuses new holders until enough leave.
-- Uses check_types and now_us from prelude.lua, prepended.
local fair = ARGV[6] == 'wait' or ARGV[6] == 'once'
local spec = {{KEYS[1], 'zset', 'holders'}, {KEYS[2], 'hash', 'holdings'},
  {KEYS[3], 'string', 'fence'}}
if fair then
  spec[4] = {KEYS[4], 'zset', 'queue'}
  spec[5] = {KEYS[5], 'hash', 'waiters'}
end
spec[#spec + 1] = {KEYS[6], 'string', 'limit'}
local types = check_types(spec)
if types.err then return types end
local fence_type = types[3]
local stored = false
if types[#spec] == 'string' then
  local raw = redis.call('GET', KEYS[6])
  if not string.match(raw, '^%d+$') or tonumber(raw) > 4294967295 then
    return redis.error_reply('NOTLOCK limit key holds a value that is not a semaphore limit')
  end
  stored = tonumber(raw)
end
local last = 0
if fence_type == 'string' then
  local raw = redis.call('GET', KEYS[3])
  if not string.match(raw, '^%d+$') or tonumber(raw) > 9007199254740991 then
    return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
  end
  last = tonumber(raw)
end
local holdings = redis.call('HGETALL', KEYS[2])
for i = 2, #holdings, 2 do
  if not string.match(holdings[i], '^%d+:%d+$') then
    return redis.error_reply('NOTLOCK holdings key holds a value that is not a permit holding')
  end
end
local nonce = ARGV[1]
local permits = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local retention = tonumber(ARGV[5])
if stored and stored ~= limit then
  return redis.error_reply(string.format('LIMIT semaphore limit is %d, not %d', stored, limit))
end
local now_micros = now_us()
local now = math.floor(now_micros / 1000)
-- Reap holders whose lease has passed: a crashed holder's permits come back with its lease.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now))
for _, who in ipairs(expired) do
  redis.call('ZREM', KEYS[1], who)
  redis.call('HDEL', KEYS[2], who)
end
local function stretch(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
local function in_use()
  local used = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
    used = used + tonumber(string.match(v, '^(%d+):'))
  end
  return used
end
-- The limit is stored with the semaphore, and kept as long as its fence state.
local function keep_limit()
  if stored then
    stretch(KEYS[6], ttl + retention)
  else
    redis.call('SET', KEYS[6], string.format('%d', limit), 'PX', ttl + retention)
  end
end
local expiry = now + ttl
local mine = redis.call('HGET', KEYS[2], nonce)
if mine and redis.call('ZSCORE', KEYS[1], nonce) then
  redis.call('ZADD', KEYS[1], string.format('%d', expiry), nonce)
  stretch(KEYS[1], ttl)
  stretch(KEYS[2], ttl)
  keep_limit()
  local held, fence = string.match(mine, '^(%d+):(%d+)$')
  return {1, expiry, tonumber(fence), in_use(), tonumber(held), expiry - now}
end
local used = in_use()
local ahead, head_ends = 0, false
if fair then
  for _, who in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local info = redis.call('HGET', KEYS[5], who)
    local ends, wants
    if info then
      ends, wants = string.match(info, '^(%d+):(%d+)$')
    end
    if not ends or tonumber(ends) < now then
      redis.call('ZREM', KEYS[4], who)
      redis.call('HDEL', KEYS[5], who)
    elseif who == nonce then
      break
    else
      ahead = ahead + tonumber(wants)
      if not head_ends then
        head_ends = tonumber(ends)
      end
    end
  end
end
if used + ahead + permits > limit then
  if ARGV[6] == 'wait' then
    local wl = tonumber(ARGV[7])
    if not redis.call('ZSCORE', KEYS[4], nonce) then
      redis.call('ZADD', KEYS[4], now_micros, nonce)
    end
    redis.call('HSET', KEYS[5], nonce, string.format('%d:%d', now + wl, permits))
    stretch(KEYS[4], wl)
    stretch(KEYS[5], wl)
    keep_limit()
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 0
  if first[2] then
    wait = tonumber(first[2]) - now
  end
  if used + permits <= limit and head_ends then
    -- Only waiters ahead keep us out: the head's place lasts this long unless refreshed.
    wait = head_ends - now
  end
  return {0, wait, used}
end
local fence = last + 1
if now_micros > fence then
  fence = now_micros
end
if fair then
  redis.call('ZREM', KEYS[4], nonce)
  redis.call('HDEL', KEYS[5], nonce)
end
redis.call('ZADD', KEYS[1], string.format('%d', expiry), nonce)
redis.call('HSET', KEYS[2], nonce, string.format('%d:%d', permits, fence))
stretch(KEYS[1], ttl)
stretch(KEYS[2], ttl)
local keep = redis.call('PTTL', KEYS[3])
if keep < ttl + retention then
  keep = ttl + retention
end
redis.call('SET', KEYS[3], string.format('%d', fence), 'PX', keep)
keep_limit()
return {1, expiry, fence, used + permits, permits, expiry - now}
