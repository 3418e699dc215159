-- token_renew: compare-and-pexpire: move a token lock's expiry to ttl from now (server time) if
-- it holds exactly this token, and keep its fence state that much longer. The token does not
-- change (the format has no room for a rotation other clients would understand), so a repeat is
-- the same request.
--   KEYS[1]  lock key, exactly as named
--   KEYS[2]  fence key
--   ARGV[1]  the token
--   ARGV[2]  new lease length in ms (> 0), from now
--   ARGV[3]  how long the fence state outlives the lease, in ms
-- Returns {1, pttl} renewed (the time it has left now), {0} held by another token, {-1} not
-- held.
-- Error WRONGTYPE when a key holds another type, NOTLOCK when the fence key holds a string that
-- is not a fencing token; nothing is written.
-- Uses check_types and read_fence from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'string', 'lock'}, {KEYS[2], 'string', 'fence'}})
if types.err then return types end
local last = read_fence(KEYS[2], types[2])
if type(last) == 'table' then return last end
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {-1}
end
if cur ~= ARGV[1] then
  return {0}
end
local ttl = tonumber(ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
if types[2] == 'string' then
  redis.call('PEXPIRE', KEYS[2], ttl + tonumber(ARGV[3]))
end
return {1, redis.call('PTTL', KEYS[1])}
