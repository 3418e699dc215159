-- rw_write_acquire: take the write lock if no writer holds it and no live reader is in, with a
-- lease and a fencing token; when refused, optionally announce this writer's intent.
--   KEYS[1]  writer key   <prefix>{name}:w
--   KEYS[2]  readers key  <prefix>{name}:r
--   KEYS[3]  intent key   <prefix>{name}:wi
--   KEYS[4]  fence key    <prefix>{name}:fence
--   ARGV[1]  nonce: fresh, unguessable hex, one per acquisition (kept across its retries)
--   ARGV[2]  lease length in ms (> 0)
--   ARGV[3]  intent lease in ms: when refused, mark this writer as waiting for that long
--            (new readers then stay out: writer preference); 0 announces nothing
--   ARGV[4]  how long the fence state outlives the lease, in ms
--   ARGV[5]  optional: the lock's intent channel <prefix>{name}:intent; when given, a newly
--            raised intent against live readers is announced there ('intent'), so that clients
--            sharing an idle read hold give it back at once (waiters listen on the release
--            channel, not here: an intent does not wake them)
--   ARGV[6]  optional: 'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
--   ARGV[7]  optional: '1' to announce on ARGV[5] ('idle') when refused by live readers without
--            raising an intent: a waiting writer under reader preference, once per wait, so
--            that clients give back their *idle* shared read holds (holds with readers inside
--            stay, and take new readers)
-- Returns
--   {1, lease, pttl}                taken; lease = "tl1:<expiry ms>:<fence>:<nonce>", expiry by
--                                   server time (also when this nonce already holds it: a retry,
--                                   answered with the lease its first call wrote); pttl: the
--                                   time the writer key has left, which the client's deadline
--                                   is dated from
--   {0, 'writer', pttl, readers}    another writer holds it for pttl more ms
--   {0, 'intent', pttl, readers}    another writer waits first; its intent expires in pttl ms
--   {0, 'readers', pttl, readers}   live readers are in; the last lease ends within pttl ms
--   error WRONGTYPE / NOTLOCK when a key holds data that is not ours; nothing is written.
local wt = redis.call('TYPE', KEYS[1])['ok']
if wt ~= 'none' and wt ~= 'string' then
  return redis.error_reply('WRONGTYPE writer key holds a ' .. wt)
end
local rt = redis.call('TYPE', KEYS[2])['ok']
if rt ~= 'none' and rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local it = redis.call('TYPE', KEYS[3])['ok']
if it ~= 'none' and it ~= 'string' then
  return redis.error_reply('WRONGTYPE intent key holds a ' .. it)
end
local ft = redis.call('TYPE', KEYS[4])['ok']
if ft ~= 'none' and ft ~= 'string' then
  return redis.error_reply('WRONGTYPE fence key holds a ' .. ft)
end
local last = 0
if ft == 'string' then
  local raw = redis.call('GET', KEYS[4])
  if not string.match(raw, '^%d+$') or tonumber(raw) > 9007199254740991 then
    return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
  end
  last = tonumber(raw)
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
  intent = redis.call('GET', KEYS[3])
  if not string.match(intent, '^%x+$') then
    return redis.error_reply('NOTLOCK intent key holds a value that is not a writer intent')
  end
end
local blocker, remaining
local readers = 0
if writer then
  local mine = ':' .. ARGV[1]
  if string.sub(writer, -#mine) == mine then
    return {1, writer, redis.call('PTTL', KEYS[1])}
  end
  blocker, remaining = 'writer', redis.call('PTTL', KEYS[1])
else
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now = math.floor(now_us / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now))
  readers = redis.call('ZCARD', KEYS[2])
  if intent and intent ~= ARGV[1] then
    return {0, 'intent', redis.call('PTTL', KEYS[3]), readers}
  end
  if readers == 0 then
    local ttl = tonumber(ARGV[2])
    -- Fencing token: the larger of "one more than the last" and the server time in µs (the
    -- scheme of the core's expire lock, so tokens keep rising after the fence key expires).
    local fence = last + 1
    if now_us > fence then
      fence = now_us
    end
    local lease = string.format('tl1:%d:%d:%s', now + ttl, fence, ARGV[1])
    redis.call('SET', KEYS[1], lease, 'PX', ttl)
    redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ttl + tonumber(ARGV[4]))
    if intent then
      redis.call('DEL', KEYS[3])
    end
    return {1, lease, redis.call('PTTL', KEYS[1])}
  end
  blocker, remaining = 'readers', redis.call('PTTL', KEYS[2])
end
-- Refused: announce (or re-assert) this writer's intent unless another writer's is up.
local intent_ms = tonumber(ARGV[3])
if intent_ms > 0 and (not intent or intent == ARGV[1]) then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', intent_ms)
  -- Announced once, when raised (a re-assertion stays quiet: shared read holds heard it
  -- already). As for releases, the announcement never fails the step.
  if not intent and blocker == 'readers' and ARGV[5] then
    if ARGV[6] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[5], 'intent')) == 'table' then
      redis.pcall('PUBLISH', ARGV[5], 'intent')
    end
  end
elseif ARGV[7] == '1' and blocker == 'readers' and ARGV[5] then
  -- Reader preference: no intent, only the hint to give back idle holds.
  if ARGV[6] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[5], 'idle')) == 'table' then
    redis.pcall('PUBLISH', ARGV[5], 'idle')
  end
end
return {0, blocker, remaining, readers}
