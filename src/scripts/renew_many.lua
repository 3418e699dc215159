-- renew_many: renew several leases this caller holds in one call, each as `renew` would: the
-- batched watchdog's one step per batch of leases. Every lease gets its own outcome; a lease
-- that cannot be renewed never stops the others.
--   KEYS[2i-1], KEYS[2i]            lease i's lock key and fence key (one hash slot on a cluster)
--   ARGV[1]                         how long the fence state outlives a lease, in ms
--   ARGV[3i-1], ARGV[3i], ARGV[3i+1] lease i's current value, new length in ms (> 0), new nonce
-- Returns, for lease i, three integers at 3i-2 .. 3i:
--   {1, expiry ms, pttl}  renewed: the new lease is `tl1:<expiry>:<the same fence>:<new nonce>`,
--                         pttl its time left as the server sees it; also when the new nonce
--                         holds it already (a repeat whose reply was lost: that lease, as it is)
--   {0, 0, 0}             held by another lease
--   {-1, 0, 0}            not held
--   {-2, 0, 0}            a key holds data that is not ours (the lock key another type or a
--                         value that is not a lease; the fence key, when it is read, another
--                         type or a value that is not a fencing token): nothing written for
--                         this lease
-- The fence key is read (checked) and written only when its time to live would end less than
-- the retention after the renewed lease: it is then set to last the lease + 1.5 × the retention,
-- so that most renewals of a lease only read its time to live (the fencing token is kept
-- between 1 and 1.5 retentions after the lease ends).
-- A renewal sets the lock key with PX: time stands still within a script, so its PTTL then is
-- the length set, which is what is reported.
local retention = tonumber(ARGV[1])
local t = redis.call('TIME')
local now_ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local out = {}
for i = 1, #KEYS / 2 do
  local lock, fence_key = KEYS[2 * i - 1], KEYS[2 * i]
  local lease, nonce = ARGV[3 * i - 1], ARGV[3 * i + 1]
  local code, expiry, pttl = -2, 0, 0
  local cur = redis.pcall('GET', lock)
  local fence = type(cur) == 'string' and string.match(cur, '^tl1:%d+:(%d+):')
  if cur == false then
    code = -1
  elseif not fence then
    code = -2
  elseif cur == lease then
    local ttl = tonumber(ARGV[3 * i])
    local refresh = redis.call('PTTL', fence_key) < ttl + retention
    local last = refresh and redis.pcall('GET', fence_key)
    if type(last) == 'table' or (last and (not string.match(last, '^%d+$')
        or tonumber(last) > 9007199254740991)) then
      code = -2
    else
      expiry = now_ms + ttl
      redis.call('SET', lock, string.format('tl1:%d:%s:%s', expiry, fence, nonce), 'PX', ARGV[3 * i])
      if refresh then
        if not last or tonumber(last) < tonumber(fence) then
          last = fence
        end
        redis.call('SET', fence_key, last, 'PX', ttl + retention + math.floor(retention / 2))
      end
      code, pttl = 1, ttl
    end
  elseif string.sub(cur, -(#nonce + 1)) == ':' .. nonce then
    code = 1
    expiry = tonumber(string.match(cur, '^tl1:(%d+):'))
    pttl = redis.call('PTTL', lock)
  else
    code = 0
  end
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = code, expiry, pttl
end
return out
