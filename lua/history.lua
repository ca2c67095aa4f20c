-- history: the newest entries of a resource's history; reads only.
-- KEYS[1] history  <ns>:hist:v2:{<purpose>:<digest>} (see acquire.lua)
-- ARGV[1] limit: the most entries returned
-- ARGV[2] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1), now, entry...}: the entries newest first, as acquire.lua's
-- header describes them (the caller drops those older than its bound).
--#include lib/time.lua
local tag = tonumber(ARGV[2]) * 16 + 9
local out = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
table.insert(out, 1, now)
table.insert(out, 1, tag + 1)
return out
