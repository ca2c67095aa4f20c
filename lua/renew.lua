-- renew: reset the TTL of the caller's own lease, in one script run.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms
-- ARGV[4] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1), ttl, fencing token} renewed, {tag(0)} absent,
-- {tag(-1)} someone else's, {tag(-9), error} Redis refused the PEXPIRE.
local tag = tonumber(ARGV[4]) * 16 + 9
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {tag}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {tag - 1}
end
local done = redis.pcall('PEXPIRE', KEYS[1], ARGV[3])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
return {tag + 1, tonumber(ARGV[3]), tonumber(string.sub(current, cut + 1))}
