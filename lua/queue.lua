-- queue: the fair queue of waiters of one resource (docs/design.md §12), kept only
-- while some instance has waiters for it.
-- KEYS[1] queue     <ns>:queue:v2:{<purpose>:<digest>}  sorted set
-- KEYS[2] sequence  <ns>:seq:v2:{<purpose>:<digest>}    (see acquire.lua)
-- KEYS[3] asks  KEYS[4] grants  KEYS[5] record (see acquire.lua)
-- ARGV[1] verb: 'enter', 'front', 'beat' or 'leave'. 'front' enters like
--         'enter' but ahead of this instance's own first entry among the
--         first 64 (a turn holder whose place lapsed must not wait behind
--         its own instance's waiters, who wait for its turn).
-- ARGV[2] this instance's id  ARGV[3] heartbeat horizon ms (beat/enter)
-- ARGV[4] sequence key ttl ms  ARGV[5] event channel  ARGV[6] resource tag
-- ARGV[7] member ('<mode>:<instance>:<n>'; enter/leave), or for beat the
--         roster: this instance's members that still wait, comma-separated;
--         its other entries among the first 64 go (per-waiter liveness: an
--         entry whose waiter has gone stops blocking at the next beat)
-- ARGV[8] ask (enter/front): '' or the waiter's acquire, for a release to
--         grant it the lease in its own run (release.lua, "Hand-off"):
--         "<ttl ms>|<owner token>|<operation id>|<holder label>" (the label
--         as acquire.lua's ARGV[4], last: it may contain '|'). Kept in the
--         hash KEYS[3], field = the member, for as long as the queue
--         lives; a release that grants the entry deletes it and sets the
--         grant mark, field "p:<owner token>:<operation id>" of KEYS[4] =
--         "<end ms>|<granted member>" (release.lua). For leave: '' or the
--         asking attempt's permit field "p:<owner token>:<operation id>"
--         (its grant mark is read).
-- ARGV[9] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Members: each waiter '<mode>:<instance>:<n>' with score = the server
-- clock in µs when it entered (its place; ties go by member), and each
-- instance '~<instance>' with score = -(its heartbeat deadline in ms). A
-- waiter is live while its instance's deadline is in the future: one beat
-- per instance and resource keeps all its waiters, and a dead instance's
-- waiters stop holding up the queue when its deadline passes. The key
-- expires by itself after the last deadline; the sequence's fourth part
-- ("queue until") tells acquire when it can skip the queue altogether.
-- Returns {tag(1), n}: for enter/front n = the PTTL of the resource's
-- record (held, or in a lock-delay: a release or an expiry comes first,
-- and a release hands off to the queue's head); when it has none, the ms
-- until the first entry's heartbeat lapses if that entry is another live
-- one (it goes first), else -2 (the waiter looks at once); for leave
-- n = 1 when a release granted the entry (its grant mark is set to this
-- member, and goes now: what the attempt holds may be that grant), else 0; for
-- beat n = 1.
-- {tag(-9), error} Redis refused a write.
--#include lib/time.lua
--#include lib/queue_until.lua
local tag = tonumber(ARGV[9]) * 16 + 9
local verb = ARGV[1]
local ASK = KEYS[3]
if verb == 'leave' then
  redis.pcall('ZREM', KEYS[1], ARGV[7])
  -- The grant mark: a release granted this entry (release.lua); nothing
  -- else says so (an entry dropped by a heartbeat or as dead was granted
  -- nothing).
  -- The mark names the granted member: another entry of the same attempt
  -- (its caller retried on another instance) was granted nothing.
  local granted = false
  if ARGV[8] ~= '' then
    local until_ms, to = string.match(redis.call('HGET', KEYS[4], ARGV[8]) or '', '^(%d+)|(.*)$')
    granted = to == ARGV[7] and tonumber(until_ms) > now
    if granted then
      redis.pcall('HDEL', KEYS[4], ARGV[8])
    end
  end
  redis.pcall('HDEL', ASK, ARGV[7])
  -- The next waiter may go now.
  redis.pcall('PUBLISH', ARGV[5], ARGV[6] .. '\t\tqueue')
  return {tag + 1, granted and 1 or 0}
end
local deadline = now + tonumber(ARGV[3])
local done
if verb == 'enter' or verb == 'front' then
  local score = secs * 1000000 + micros
  if verb == 'front' then
    local head = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 64)
    local own = ':' .. ARGV[2] .. ':'
    for i = 1, #head, 2 do
      if string.find(head[i], own, 2, true) == 2 and tonumber(head[i + 1]) - 1 < score then
        score = tonumber(head[i + 1]) - 1
        break
      end
    end
  end
  done = redis.pcall('ZADD', KEYS[1], 'NX', score, ARGV[7])
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  if ARGV[8] ~= '' then
    -- Refused, the entry only waits as one without an ask (it looks for
    -- itself on every release).
    redis.pcall('HSET', ASK, ARGV[7], ARGV[8])
  end
end
if verb == 'beat' then
  local live = {}
  for m in string.gmatch(ARGV[7], '[^,]+') do
    live[m] = true
  end
  local own = ':' .. ARGV[2] .. ':'
  local head = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'LIMIT', 0, 64)
  local gone
  for i = 1, #head do
    if string.find(head[i], own, 2, true) == 2 and not live[head[i]] then
      gone = gone or {}
      gone[#gone + 1] = head[i]
    end
  end
  if gone then
    -- At most 64: unpack is bounded.
    redis.pcall('ZREM', KEYS[1], unpack(gone))
    redis.pcall('HDEL', ASK, unpack(gone))
    redis.pcall('PUBLISH', ARGV[5], ARGV[6] .. '\t\tqueue')
  end
end
done = redis.pcall('ZADD', KEYS[1], -deadline, '~' .. ARGV[2])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
-- Heartbeats that have lapsed go (score -deadline in [-now, 0)): a cleanly
-- stopped instance left its own behind, one per restart under a queue
-- that never empties. Its entries, if any, are dead either way (acquire.lua
-- reads a missing heartbeat as lapsed) and go with the next look.
redis.pcall('ZREMRANGEBYSCORE', KEYS[1], -now, '(0')
redis.pcall('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
redis.pcall('PEXPIRE', ASK, tonumber(ARGV[3]) + 1000)
-- Tell acquire the queue exists until this deadline.
done = mark_queue(deadline, tonumber(ARGV[3]), ARGV[4])
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
if verb == 'beat' then
  return {tag + 1, 1}
end
local pttl = redis.call('PTTL', KEYS[5])
if pttl < 0 then
  -- Free: the waiter looks now if it is the first entry or the first's
  -- instance has died; else the first goes, and announces its TTL to those
  -- behind (acquire.lua), or its heartbeat lapses: that long at most.
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'LIMIT', 0, 1)[1]
  local inst = first and first ~= ARGV[7] and string.match(first, '^%a:([^:]+):')
  local beat = inst and redis.call('ZSCORE', KEYS[1], '~' .. inst)
  if beat and -tonumber(beat) > now then
    pttl = -tonumber(beat) - now
  end
end
return {tag + 1, pttl}
