-- release: delete the caller's own lease and wake the resource's waiters.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] wake-up channel  ARGV[4] wake-up message ("<purpose>:<digest>")
-- Returns {1} released, {0} already absent, {-1} someone else's (untouched).
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {0}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {-1}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1}
