-- legacy_probe: answers 1. Capability detection runs it to learn whether the server runs
-- scripts at all (EVAL/EVALSHA/SCRIPT may be renamed away or denied by an ACL).
return 1
