-- prelude: helpers shared by the fair writers' scripts (fair_write_acquire.rs and
-- fair_write_release.rs prepend this file to each, so the script the server loads is this file
-- followed by the script's own). check_types, read_fence and the clock are the core crate's
-- (src/scripts/prelude.lua), kept in this crate so that it builds on its own; read_writer and
-- read_intent are the RwLock's.
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
-- read_fence(key, key_type): the last fencing token a fence key holds (0 when it is absent,
-- key_type being its type from check_types), or the NOTLOCK error reply when it holds a value
-- that is not a fencing token.
local function read_fence(key, key_type)
  if key_type ~= 'string' then
    return 0
  end
  local raw = redis.call('GET', key)
  if not string.match(raw, '^%d+$') or tonumber(raw) > 9007199254740991 then
    return redis.error_reply('NOTLOCK fence key holds a value that is not a fencing token')
  end
  return tonumber(raw)
end
-- read_writer(key, key_type): the writer's lease the writer key holds (false when absent), or
-- the NOTLOCK error reply when it holds a value that is not a tairlock lease.
local function read_writer(key, key_type)
  if key_type ~= 'string' then
    return false
  end
  local writer = redis.call('GET', key)
  if string.sub(writer, 1, 4) ~= 'tl1:' then
    return redis.error_reply('NOTLOCK writer key holds a value that is not a tairlock lease')
  end
  return writer
end
-- read_intent(key, key_type): the waiting writer's nonce the intent key holds (false when
-- absent), or the NOTLOCK error reply when it holds a value that is not a writer intent.
local function read_intent(key, key_type)
  if key_type ~= 'string' then
    return false
  end
  local intent = redis.call('GET', key)
  if not string.match(intent, '^%x+$') then
    return redis.error_reply('NOTLOCK intent key holds a value that is not a writer intent')
  end
  return intent
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
