-- release: delete the caller's own permit and wake the resource's waiters.
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)
-- ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] event channel  ARGV[4] resource tag ("<purpose>:<digest>")
-- ARGV[5] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1)} released, {tag(0)} already absent, {tag(-1)} someone
-- else's (untouched), {tag(-9), error} Redis refused.
-- The event "<tag>\t<version>\treleased" is published before the delete: an
-- ACL that denies the channel refuses the release before anything is deleted
-- (an event without a delete only costs waiters and watchers one look).
-- A release changes no counter: the version "<changes>.<live permits>" moves
-- because the live count falls (and for one change count it only falls).
local tag = tonumber(ARGV[5]) * 16 + 9
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
local v = redis.call('HGET', KEYS[1], mine)
if not v then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {tag - 1}
  end
  return {tag}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(string.match(v, '^%d+|(%d+)|'))
if exp <= now then
  -- Over already (the record outlived it by a clock tick): nothing to end.
  redis.pcall('HDEL', KEYS[1], mine)
  return {tag}
end
local changes = '0'
local seq = redis.call('GET', KEYS[2])
if seq then
  changes = string.match(seq, '^%d+:(%d+):') or '0'
end
local done = redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes .. '.0\treleased')
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
done = redis.pcall('DEL', KEYS[1])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
return {tag + 1}
