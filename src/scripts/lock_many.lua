-- lock_many: take several locks at once, all or none (their keys share one cluster slot).
--   KEYS     lock key, fence key of the first lock, then of the second, ... (pairs, as
--            expire_lock's KEYS[1] and KEYS[2])
--   ARGV[1]  lease length in ms (> 0)
--   ARGV[2]  nonce: fresh, unguessable hex, one per acquisition (the same for every lock)
--   ARGV[3]  how long the fence state outlives the lease, in ms
-- Returns
--   {1, lease1, pttl1, lease2, pttl2, ...}
--                             all taken, each lease as expire_lock's with its own fencing token,
--                             each followed by its time left in ms as the server sees it (PTTL).
--                             Also when this nonce already holds them (a retried call whose
--                             first reply was lost): those are kept, with the time they have
--                             left, their expiry re-applied.
--   {0, i, holder, pttl}      lock i (1-based) is held by another lease for pttl more ms (-1: its
--                             key has no expiry); nothing was written.
--   error WRONGTYPE / NOTLOCK when any key holds data that is not ours; nothing is written.
local n = #KEYS / 2
local mine = ':' .. ARGV[2]
local lasts = {}
local curs = {}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local lock_type = redis.call('TYPE', lock)['ok']
  if lock_type ~= 'none' and lock_type ~= 'string' then
    return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type)
  end
  local fence_type = redis.call('TYPE', fence)['ok']
  if fence_type ~= 'none' and fence_type ~= 'string' then
    return redis.error_reply('WRONGTYPE fence key holds a ' .. fence_type)
  end
  lasts[i] = 0
  if fence_type == 'string' then
    local raw = redis.call('GET', fence)
    if not string.match(raw, '^%d+$') or tonumber(raw) > 9007199254740991 then
      return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
    end
    lasts[i] = tonumber(raw)
  end
  local cur = redis.call('GET', lock)
  if cur and string.sub(cur, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK lock key holds a value that is not a tairlock lease')
  end
  curs[i] = cur
end
for i = 1, n do
  local cur = curs[i]
  if cur and string.sub(cur, -#mine) ~= mine then
    return {0, i, cur, redis.call('PTTL', KEYS[2 * i - 1])}
  end
end
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {1}
for i = 1, n do
  local lock, fence_key = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = curs[i]
  if cur then
    -- A repeat: touch the key (same expiry), as expire_lock does.
    local pttl = redis.call('PTTL', lock)
    if pttl > 0 then
      redis.call('PEXPIRE', lock, pttl)
    end
    out[2 * i] = cur
    out[2 * i + 1] = pttl
  else
    local fence = lasts[i] + 1
    if now_us > fence then
      fence = now_us
    end
    local lease = string.format('tl1:%d:%d:%s', math.floor(now_us / 1000) + ttl, fence, ARGV[2])
    redis.call('SET', lock, lease, 'PX', ttl)
    redis.call('SET', fence_key, string.format('%d', fence), 'PX', ttl + tonumber(ARGV[3]))
    out[2 * i] = lease
    out[2 * i + 1] = redis.call('PTTL', lock)
  end
end
return out
