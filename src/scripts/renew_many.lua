-- renew_many: renew several leases this caller holds in one call, each as `renew` would: the
-- batched watchdog's one step per batch of leases. Every lease gets its own outcome; a lease
-- that cannot be renewed never stops the others.
--   KEYS[2i-1], KEYS[2i]            lease i's lock key and fence key (one hash slot on a cluster)
--   ARGV[1]                         how long the fence state outlives a lease, in ms
--   ARGV[4i-2] .. ARGV[4i+1]        lease i's current value, new length in ms (> 0), new nonce,
--                                   and '1' to refresh its fence key, '0' to leave it
-- Returns, for lease i, four integers at 4i-3 .. 4i:
--   {1, expiry ms, pttl, fence pttl}  renewed: the new lease is `tl1:<expiry>:<the same
--                         fence>:<new nonce>`, pttl its time left as the server sees it; fence
--                         pttl the time left of the fence key when this call refreshed it, else
--                         0. Also when the new nonce holds it already (a repeat whose reply was
--                         lost: that lease, as it is, fence pttl 0)
--   {0, 0, 0, 0}          held by another lease
--   {-1, 0, 0, 0}         not held
--   {-2, 0, 0, 0}         a key holds data that is not ours (the lock key another type or a
--                         value that is not a lease; the fence key, when it is refreshed,
--                         another type or a value that is not a fencing token): nothing written
--                         for this lease
-- The fence key is read and written only when asked ('1'): it is then set to the highest of its
-- token and the lease's, to last the lease + 1.5 × the retention. The caller asks when the fence
-- key, as the last refresh reported it, might not outlive the renewed lease by the retention; so
-- most renewals do not touch it (the fencing token is kept 1–1.5 retentions after a lease ends).
-- A renewal sets the lock key with PX: time stands still within a script, so its PTTL then is
-- the length set, which is what is reported. For the same reason every lease renewed to one
-- length gets one expiry, whose text is made once.
local retention = tonumber(ARGV[1])
local t = redis.call('TIME')
local now_ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local prefixes = {}
local out = {}
for i = 1, #KEYS / 2 do
  local lock, fence_key = KEYS[2 * i - 1], KEYS[2 * i]
  local lease, px, nonce = ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i]
  local code, expiry, pttl, fence_pttl = -2, 0, 0, 0
  local cur = redis.pcall('GET', lock)
  local fence = type(cur) == 'string' and string.match(cur, '^tl1:%d+:(%d+):')
  if cur == false then
    code = -1
  elseif not fence then
    code = -2
  elseif cur == lease then
    local ttl = tonumber(px)
    local refresh = ARGV[4 * i + 1] == '1'
    local last = refresh and redis.pcall('GET', fence_key)
    if type(last) == 'table' or (last and (not string.match(last, '^%d+$')
        or tonumber(last) > 9007199254740991)) then
      code = -2
    else
      expiry = now_ms + ttl
      local prefix = prefixes[px]
      if not prefix then
        prefix = 'tl1:' .. expiry .. ':'
        prefixes[px] = prefix
      end
      redis.call('SET', lock, prefix .. fence .. ':' .. nonce, 'PX', px)
      if refresh then
        if not last or tonumber(last) < tonumber(fence) then
          last = fence
        end
        fence_pttl = ttl + retention + math.floor(retention / 2)
        redis.call('SET', fence_key, last, 'PX', fence_pttl)
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
  out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = code, expiry, pttl, fence_pttl
end
return out
