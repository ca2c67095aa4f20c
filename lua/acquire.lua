-- acquire: take the lease if it is free, in one script run (storage v2,
-- docs/storage-v2.md).
-- KEYS[1] record    <ns>:lease:v2:{<purpose>:<digest>}  hash, one field per permit
-- KEYS[2] sequence  <ns>:seq:v2:{<purpose>:<digest>}    "<last fence>:<changes>:<watched until ms>"
-- ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms  ARGV[4] sequence key ttl ms
-- ARGV[5] holder label or ''  ARGV[6] event channel  ARGV[7] resource tag
-- ARGV[8] nonce, a 32-bit integer. Every reply starts with the tag
--         nonce * 16 + status + 9 (status -9..6 in the low 4 bits; exact as a
--         Lua number): the caller proves the reply answers its own request (a
--         pipelined connection one reply short would otherwise hand it
--         another request's reply). One element, not two: redis-rs spends
--         ~900 instructions per reply element.
-- A permit is the field "p:<owner token>:<operation id>" (neither contains
-- ':') with the value
--   "<fence>|<expiresAt>|<acquiredAt>|<renewedAt>|<ttlMs>|<lockDelayMs>|<holder>"
-- (times in ms of the server clock; the label last, as it may contain '|').
-- The record's PTTL is its permit's expiry, so Redis deletes it at the TTL.
-- Returns:
--   {tag(1), fence, now}  acquired (acquiredAt = renewedAt = now)
--   {tag(2), remaining, fence, acquiredAt, renewedAt, ttlMs, holder}  the
--     same attempt already holds it (TTL not extended)
--   {tag(3), remaining}   the same owner token holds it for another operation
--   {tag(0), remaining}   someone else holds it
--   {tag(-9), error}      Redis refused a write; no lease was written (the
--                         first write, the sequence, is harmless alone)
local tag = tonumber(ARGV[8]) * 16 + 9
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
local rec = redis.call('HGETALL', KEYS[1])
local stale
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local v = rec[i + 1]
    local fence, exp, acq, ren, ttl, at = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|%d+|()')
    exp = tonumber(exp)
    if exp > now then
      if field == mine then
        return {tag + 2, exp - now, tonumber(fence), tonumber(acq), tonumber(ren), tonumber(ttl), string.sub(v, at)}
      end
      if string.sub(field, 1, #ARGV[1] + 3) == 'p:' .. ARGV[1] .. ':' then
        return {tag + 3, exp - now}
      end
      return {tag, exp - now}
    end
    stale = stale or {}
    stale[#stale + 1] = field
  end
end
-- Fencing: strictly increasing per resource, also when the sequence key is
-- gone (evicted, expired, an empty restarted Redis): never below the server
-- clock in microseconds. 2^53 µs is in the year 2255, so the value stays an
-- exact JSON number.
local last, changes, watched = 0, 0, 0
local seq = redis.call('GET', KEYS[2])
if seq then
  local a, b, c = string.match(seq, '^(%d+):(%d+):(%d+)$')
  if a then
    last, changes, watched = tonumber(a), tonumber(b), tonumber(c)
  end
end
local fence = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
local fence_text = string.format('%.0f', fence)
changes = changes + 1
local changes_text = string.format('%.0f', changes)
local done = redis.pcall('SET', KEYS[2],
  fence_text .. ':' .. changes_text .. ':' .. string.format('%.0f', watched), 'PX', ARGV[4])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
if stale then
  redis.pcall('HDEL', KEYS[1], unpack(stale))
end
local now_text = string.format('%.0f', now)
done = redis.pcall('HSET', KEYS[1], mine, fence_text .. '|' .. string.format('%.0f', now + tonumber(ARGV[3]))
  .. '|' .. now_text .. '|' .. now_text .. '|' .. ARGV[3] .. '|0|' .. ARGV[5])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
done = redis.pcall('PEXPIRE', KEYS[1], ARGV[3])
if type(done) == 'table' and done.err then
  -- A record without a TTL would be a lease for ever: take it back.
  redis.pcall('DEL', KEYS[1])
  return {tag - 9, done.err}
end
-- Watchers of this resource (an instance renews "watched until" while it
-- has some) hear of the acquire; nobody pays for the event otherwise.
if watched > now then
  redis.pcall('PUBLISH', ARGV[6], ARGV[7] .. '\t' .. changes_text .. '.1\tacquired')
end
return {tag + 1, fence, now}
