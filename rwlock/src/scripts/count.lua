-- rw_count: how many readers are in, and whether a writer holds or waits; read-only.
--   KEYS[1]  writer key, KEYS[2] readers key, KEYS[3] intent key
-- Returns {live readers, writer pttl, intent pttl} (pttl as PTTL: -2 absent).
-- Error WRONGTYPE when the readers key holds data that is not ours.
local rt = redis.call('TYPE', KEYS[2])['ok']
if rt ~= 'none' and rt ~= 'zset' then
  return redis.error_reply('WRONGTYPE readers key holds a ' .. rt)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local readers = 0
if rt == 'zset' then
  readers = redis.call('ZCOUNT', KEYS[2], string.format('%d', now), '+inf')
end
return {readers, redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[3])}
