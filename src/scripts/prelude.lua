-- prelude: helpers shared by the scripts built with it (the expire lock's, the fair mode's, the
-- semaphore's and the token lock's: their declarations in scripts/*.rs prepend this file to
-- each of them, so the script the server loads is this file followed by the script's own).
--
-- check_types(spec): spec is a list of {key, wanted type, what}. Returns the keys' types ('none'
-- where a key is absent), or, for the first key that holds another type than wanted, the
-- WRONGTYPE error reply (a table with an `err` field) naming it; the caller returns that reply
-- before writing anything.
local function check_types(spec)
  local types = {}
  for i, s in ipairs(spec) do
    local t = redis.call('TYPE', s[1])['ok']
    if t ~= 'none' and t ~= s[2] then
      return redis.error_reply('WRONGTYPE ' .. s[3] .. ' key holds a ' .. t)
    end
    types[i] = t
  end
  return types
end
-- get_string(key, what): a string key's value (false when it is absent) read with one GET, or
-- nil and, when the key holds another type, the WRONGTYPE error reply naming it (the type is
-- asked for only then): one server call where check_types and a GET would make two.
local function get_string(key, what)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return nil, redis.error_reply('WRONGTYPE ' .. what .. ' key holds a ' .. redis.call('TYPE', key)['ok'])
  end
  return value
end
-- fence_token(raw): the fencing token a fence key's value holds (0 for false: the key is
-- absent), or the NOTLOCK error reply when it is not one. A token is digits and at most
-- 2^53 - 1, the largest integer a Lua number holds exactly.
local function fence_token(raw)
  if not raw then
    return 0
  end
  if not string.match(raw, '^%d+$') or tonumber(raw) > 9007199254740991 then
    return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
  end
  return tonumber(raw)
end
-- read_fence(key, key_type): the last fencing token a fence key holds (0 when it is absent,
-- key_type being its type from check_types), or the NOTLOCK error reply when it holds a value
-- that is not a fencing token.
local function read_fence(key, key_type)
  if key_type ~= 'string' then
    return 0
  end
  return fence_token(redis.call('GET', key))
end
-- now_us(): the server's time in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- now_ms(): the server's time in whole milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end
