-- purposes: the registry of watched purposes (docs/watching.md, "Watching
-- a purpose"), one hash of purpose -> "watched until" (ms, server clock).
-- Every instance reads it about once a second and passes "purpose watched"
-- to acquire.lua and renew.lua for the purposes in it, so their scripts
-- announce acquires and holder changes of every resource of the purpose.
-- KEYS[1] registry  <ns>:purposes:v2:{purposes}
-- ARGV[1] purpose to mark watched, or '' (only read)
-- ARGV[2] mark ms: the mark lasts this long
-- ARGV[3] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(2), now, purpose, until, purpose, until, ...}: the purposes
-- marked until after now. Marks that have run out are deleted (at most 64
-- a call). {tag(-9), error} when Redis refused the mark.
--#include lib/time.lua
local tag = tonumber(ARGV[3]) * 16 + 9
if ARGV[1] ~= '' then
  local done = redis.pcall('HSET', KEYS[1], ARGV[1], string.format('%d', now + tonumber(ARGV[2])))
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  -- The registry lives as long as its latest mark: a key every write
  -- extends, never one without a TTL.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
  end
end
-- Nothing marked (the usual case): no HGETALL, which would cost a read
-- every second and look like a whole-record read to INFO commandstats.
if ARGV[1] == '' and redis.call('EXISTS', KEYS[1]) == 0 then
  return {tag + 2, now}
end
local all = redis.call('HGETALL', KEYS[1])
local out = {tag + 2, now}
local stale = 0
for i = 1, #all, 2 do
  local till = tonumber(all[i + 1]) or 0
  if till > now then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  elseif stale < 64 then
    stale = stale + 1
    redis.pcall('HDEL', KEYS[1], all[i])
  end
end
return out
