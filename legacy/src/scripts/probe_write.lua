-- legacy_probe_write: read the server's clock, then write, as legacy_acquire does. Answers 1.
--   KEYS[1]  a scratch key (written with a 1 s PX, then deleted)
-- A server that replicates scripts verbatim (Redis before 5, unless the script switched to
-- effects replication) refuses a write after TIME ("Write commands not allowed after non
-- deterministic commands"): capability detection must not pick ScriptedLock there.
local t = redis.call('TIME')
redis.call('SET', KEYS[1], t[1], 'PX', 1000)
redis.call('DEL', KEYS[1])
return 1
