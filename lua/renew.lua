-- renew: reset the TTL of the caller's own lease, in one script run.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms
-- ARGV[4] nonce, echoed first in every reply (see acquire.lua).
-- Returns {nonce, 1, ttl, fencing token} renewed, {nonce, 0} absent,
-- {nonce, -1} someone else's, {nonce, -9, error} Redis refused the PEXPIRE.
local nonce = tonumber(ARGV[4])
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {nonce, 0}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {nonce, -1}
end
local done = redis.pcall('PEXPIRE', KEYS[1], ARGV[3])
if type(done) == 'table' and done.err then
  return {nonce, -9, done.err}
end
return {nonce, 1, tonumber(ARGV[3]), tonumber(string.sub(current, cut + 1))}
