-- renew: reset the TTL of the caller's own lease, in one script run.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms
-- Returns {1, ttl, fencing token} renewed, {0} absent, {-1} someone else's.
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {0}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, tonumber(ARGV[3]), tonumber(string.sub(current, cut + 1))}
