-- sem_release: give one holder's permits back and announce it.
--   KEYS[1]  holders    <prefix>{name}:sem        zset
--   KEYS[2]  holdings   <prefix>{name}:sem:h      hash
--   KEYS[3]  queue      <prefix>{name}:sem:q      zset (the fair mode's waiters)
--   KEYS[4]  waiters    <prefix>{name}:sem:qw     hash
--   ARGV[1]  the holder's nonce
--   ARGV[2]  the semaphore's release channel
--   ARGV[3]  'SPUBLISH' to announce with sharded pub/sub (default 'PUBLISH')
-- The nonce also leaves the fair queue, if it waits there (a waiter giving up).
-- Returns 1 released, -1 not held (released already, or its lease passed). Announces when it
-- released a holder or a waiter left (those behind may fit now). Safe to repeat: a repeat finds
-- nothing of ours and announces nothing.
-- Error WRONGTYPE when a key holds data that is not ours; nothing is written.
-- Uses check_types and now_ms from prelude.lua, prepended.
local types = check_types({{KEYS[1], 'zset', 'holders'}, {KEYS[2], 'hash', 'holdings'},
  {KEYS[3], 'zset', 'queue'}, {KEYS[4], 'hash', 'waiters'}})
if types.err then return types end
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local live = score and tonumber(score) >= now
redis.call('ZREM', KEYS[1], ARGV[1])
local had = redis.call('HDEL', KEYS[2], ARGV[1]) == 1
local left = redis.call('ZREM', KEYS[3], ARGV[1]) == 1
redis.call('HDEL', KEYS[4], ARGV[1])
local released = live and had
if not (released or left) then
  return -1
end
if ARGV[3] ~= 'SPUBLISH' or type(redis.pcall('SPUBLISH', ARGV[2], 'released')) == 'table' then
  redis.pcall('PUBLISH', ARGV[2], 'released')
end
if released then
  return 1
end
return -1
