-- acquire: take the lease if it is free, in one script run.
-- KEYS[1] lease key   <ns>:lease:v1:{<purpose>:<digest>}
-- KEYS[2] fence key   <ns>:fence:v1:{<purpose>:<digest>}  (same hash slot)
-- ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms  ARGV[4] fence key ttl ms
-- ARGV[5] nonce, a 32-bit integer. Every reply starts with the tag
--         nonce * 16 + status + 9 (status -9..6 in the low 4 bits; exact as a
--         Lua number): the caller proves the reply answers its own request (a
--         pipelined connection one reply short would otherwise hand it
--         another request's reply). One element, not two: redis-rs spends
--         ~900 instructions per reply element.
-- The lease value is "<owner token>:<operation id>:<fencing token>"; neither
-- the token (base64url) nor the operation id ([A-Za-z0-9._~-]) contains ':'.
-- Returns {tag(status), pttl, fencing token}:
--   1 acquired, 2 same attempt already holds it (TTL not extended),
--   3 same owner token holds it for another operation, 0 someone else holds it,
--   -9 Redis refused a write: {tag(-9), error message}. Every write is the
--   last thing that can fail before the lease exists, and the first write
--   (the fence counter) is harmless alone, so -9 means "no lease written".
local tag = tonumber(ARGV[5]) * 16 + 9
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if current then
  local pttl = redis.call('PTTL', KEYS[1])
  local cut = string.find(current, ':[^:]*$')
  local holder = string.sub(current, 1, cut - 1)
  if holder == owner then
    return {tag + 2, pttl, tonumber(string.sub(current, cut + 1))}
  end
  if string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
    return {tag + 3, pttl, 0}
  end
  return {tag, pttl, 0}
end
-- Fencing: strictly increasing per resource, also when the counter key is
-- gone (evicted, expired, an empty restarted Redis): never below the server
-- clock in microseconds. 2^53 µs is in the year 2255, so the value stays an
-- exact JSON number.
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = math.max(last + 1, floor)
local fence_text = string.format('%.0f', fence)
local done = redis.pcall('SET', KEYS[2], fence_text, 'PX', ARGV[4])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
done = redis.pcall('SET', KEYS[1], owner .. ':' .. fence_text, 'PX', ARGV[3])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
return {tag + 1, tonumber(ARGV[3]), fence}
