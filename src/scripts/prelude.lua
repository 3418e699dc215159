-- prelude: helpers shared by the scripts built with it (scripts/semaphore.rs prepends this file
-- to each of them, so the script the server loads is this file followed by the script's own).
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
-- now_us(): the server's time in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- now_ms(): the server's time in whole milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end
