-- release: delete the caller's own lease and wake the resource's waiters.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] wake-up channel  ARGV[4] wake-up message ("<purpose>:<digest>")
-- ARGV[5] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1)} released, {tag(0)} already absent, {tag(-1)} someone
-- else's (untouched), {tag(-9), error} Redis refused.
-- The PUBLISH comes before the DEL: an ACL that denies the channel refuses
-- the release before anything is deleted (a wake-up without a delete only
-- costs the waiters one look).
local tag = tonumber(ARGV[5]) * 16 + 9
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {tag}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {tag - 1}
end
local done = redis.pcall('PUBLISH', ARGV[3], ARGV[4])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
done = redis.pcall('DEL', KEYS[1])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
return {tag + 1}
