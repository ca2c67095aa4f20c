-- release: delete the caller's own lease and wake the resource's waiters.
-- KEYS[1] lease key   ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] wake-up channel  ARGV[4] wake-up message ("<purpose>:<digest>")
-- ARGV[5] nonce, echoed first in every reply (see acquire.lua).
-- Returns {nonce, 1} released, {nonce, 0} already absent, {nonce, -1}
-- someone else's (untouched), {nonce, -9, error} Redis refused.
-- The PUBLISH comes before the DEL: an ACL that denies the channel refuses
-- the release before anything is deleted (a wake-up without a delete only
-- costs the waiters one look).
local nonce = tonumber(ARGV[5])
local owner = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('GET', KEYS[1])
if not current then
  return {nonce, 0}
end
local cut = string.find(current, ':[^:]*$')
if string.sub(current, 1, cut - 1) ~= owner then
  return {nonce, -1}
end
local done = redis.pcall('PUBLISH', ARGV[3], ARGV[4])
if type(done) == 'table' and done.err then
  return {nonce, -9, done.err}
end
done = redis.pcall('DEL', KEYS[1])
if type(done) == 'table' and done.err then
  return {nonce, -9, done.err}
end
return {nonce, 1}
