-- waiters: read a resource's fair queue (docs/design.md §12) without
-- changing it; never returns an owner token or operation id.
-- KEYS[1] queue  <ns>:queue:v2:{<purpose>:<digest>} (see queue.lua)
-- KEYS[2] asks  <ns>:ask:v2:{<purpose>:<digest>} (see queue.lua)
-- ARGV[1] limit: the most waiters returned (at most 100)
-- ARGV[2] scan: the most queue entries read (bounds the work of a call)
-- ARGV[3] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1), now ms, live, complete, shown, then per shown waiter:
-- member, since µs, holder slot (the label slot of its ask, '' without
-- one), then per instance with live waiters: instance, heartbeat deadline
-- ms; the first 64 in queue order}. A waiter is live while its instance's
-- heartbeat '~<instance>' (score -(deadline ms)) is in the future, as
-- acquire.lua and queue.lua read it (ZSCORE, once per instance per call:
-- a queue may hold any number of other instances' heartbeats); `live`
-- counts the live waiters among the first `scan` entries, and `complete`
-- is 1 when those were all of them. Reads at most `scan` entries, one
-- heartbeat per distinct instance among them and `limit` asks.
--#include lib/time.lua
local tag = tonumber(ARGV[3]) * 16 + 9
local limit = tonumber(ARGV[1])
local scan = tonumber(ARGV[2])
-- Waiters: the clock in µs, > 0; heartbeats: score -(deadline) < 0.
-- alive[instance]: its heartbeat deadline while in the future, else false.
local alive = {}
local function deadline_of(inst)
  local known = alive[inst]
  if known == nil then
    local beat = redis.call('ZSCORE', KEYS[1], '~' .. inst)
    local deadline = beat and -tonumber(beat)
    known = deadline and deadline > now and deadline or false
    alive[inst] = known
  end
  return known
end
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, scan)
local live, shown, seen = 0, {}, {}
local instances = {}
for i = 1, #entries, 2 do
  local member = entries[i]
  local inst = string.match(member, '^%a:([^:]+):')
  if inst and deadline_of(inst) then
    live = live + 1
    if #shown < limit then
      shown[#shown + 1] = {member, entries[i + 1]}
    end
    if not seen[inst] and #instances < 64 then
      seen[inst] = true
      instances[#instances + 1] = inst
    end
  end
end
local reply = {tag + 1, now, live, #entries < 2 * scan and 1 or 0, #shown}
for i = 1, #shown do
  local ask = redis.call('HGET', KEYS[2], shown[i][1])
  -- "<ttl ms>|<owner token>|<operation id>|<label slot>": only the label.
  local slot = ask and string.match(ask, '^%d+|[^|]*|[^|]*|(.*)$') or ''
  reply[#reply + 1] = shown[i][1]
  reply[#reply + 1] = shown[i][2]
  reply[#reply + 1] = slot
end
for i = 1, #instances do
  reply[#reply + 1] = instances[i]
  reply[#reply + 1] = alive[instances[i]]
end
return reply
