-- break: an operator removes every live permit of a resource, or the one
-- with a given fencing token (docs/design.md §17), in one script run.
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)  KEYS[3] tombstones
-- KEYS[4] index  KEYS[5] history (see acquire.lua)
-- ARGV[1] fencing token or '' (every permit)  ARGV[2] sequence key ttl ms
-- ARGV[3] event channel  ARGV[4] resource tag ("<purpose>:<digest>")
-- ARGV[5] reason or ''  ARGV[6] key name or ''
-- ARGV[7] history length  ARGV[8] history ttl ms (see acquire.lua)
-- ARGV[9] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- History (see acquire.lua): one 'b' entry per broken permit (at most
-- history length of them), "b|<now>|<fence>|<version>|<key name>|<reason
-- bytes>|<reason><holder>".
-- Returns {tag(1), permits, held ms...} broken (each broken permit's hold
-- time, now - acquiredAt, for the hold-time histogram), {tag(0)} no live permit (with that
-- token): nothing changed, {tag(-9), error} Redis refused (nothing applied:
-- the tombstones are the first write).
-- Each broken permit leaves a tombstone: field "p:<owner>:<operation>" (the
-- permit's own field) = "<expiresAt>|revoked" in the hash KEYS[3], which
-- lives until the last of them would have expired. renew.lua and
-- release.lua read it only when they find no permit of the caller's.
-- A break starts no lock-delay (the permits are deleted, not expired),
-- counts as a change (the version moves, as for an acquire) and publishes
-- "<tag>\t<version>\trevoked\t<key name>\t<reason>" (neither holds a tab:
-- no control characters), which wakes waiters as a release does.
--#include lib/prune.lua
--#include lib/permit.lua
--#include lib/time.lua
--#include lib/sequence.lua
local tag = tonumber(ARGV[9]) * 16 + 9
-- A plain lease is a string record "<field>|<value>" (see acquire.lua).
local cur = redis.pcall('GET', KEYS[1])
local rec, hashed
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif type(cur) == 'table' then
  hashed = true
  rec = redis.call('HGETALL', KEYS[1])
else
  return {tag}
end
local victims, tombs, last_end = {}, {}, 0
local held = {} -- each broken permit's hold time (now - acquiredAt, ms)
local gone = {} -- the broken permits' fence and holder, for their history
local rest, latest, live = 0, 0, 0
local top = 0
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local fence, exp, acq, _, _, ld, at = permit(rec[i + 1], true)
    if exp > now and (ARGV[1] == '' or fence == ARGV[1]) then
      victims[#victims + 1] = field
      held[#held + 1] = now - tonumber(acq)
      if #gone < tonumber(ARGV[7]) * 2 then
        gone[#gone + 1] = fence
        gone[#gone + 1] = string.sub(rec[i + 1], at)
      end
      tombs[#tombs + 1] = field
      tombs[#tombs + 1] = string.format('%d', exp) .. '|revoked'
      if exp > last_end then
        last_end = exp
      end
      if tonumber(fence) > top then
        top = tonumber(fence)
      end
    else
      if exp > now then
        live = live + 1
      end
      local ends = exp + tonumber(ld)
      if ends > now then
        rest = rest + 1
        if ends > latest then
          latest = ends
        end
      end
    end
  end
end
if #victims == 0 then
  return {tag}
end
-- The tombstones first: a write Redis refuses (OOM, NOREPLICAS) is refused
-- here, before anything else changed. In slices of 200 (unpack, Lua's C
-- stack).
for i = 1, #tombs, 400 do
  local j = math.min(i + 399, #tombs)
  local done = redis.pcall('HSET', KEYS[3], unpack(tombs, i, j))
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
end
if redis.call('PTTL', KEYS[3]) < last_end - now then
  redis.pcall('PEXPIRE', KEYS[3], last_end - now)
end
prune_ended(KEYS[3], now, #tombs / 2)
-- A break is a change: the counter moves, so the version does.
local last, changes, watched, queued = string.format('%d', top), 0, '0', '0'
do
  local a, b, c, d = sequence(redis.call('GET', KEYS[2]))
  if a then
    last, changes, watched, queued = a, tonumber(b), c, d
  end
end
changes = changes + 1
local changes_text = string.format('%d', changes)
redis.pcall('SET', KEYS[2], last .. ':' .. changes_text .. ':' .. watched .. ':' .. queued, 'PX', ARGV[2])
local IDX = KEYS[4]
if not hashed or rest == 0 then
  redis.pcall('DEL', KEYS[1])
  if hashed then
    redis.pcall('DEL', IDX)
  end
else
  for i = 1, #victims, 200 do
    local j = math.min(i + 199, #victims)
    redis.pcall('HDEL', KEYS[1], unpack(victims, i, j))
    redis.pcall('ZREM', IDX, unpack(victims, i, j))
  end
  if latest > now then
    redis.pcall('PEXPIRE', KEYS[1], latest - now)
    redis.pcall('PEXPIRE', IDX, latest - now)
  end
end
redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes_text .. '.' .. live
  .. '\trevoked\t' .. ARGV[6] .. '\t' .. ARGV[5])
local H = KEYS[5]
local head = 'b|' .. string.format('%d', now) .. '|'
local tail = '|' .. changes_text .. '.' .. live .. '|' .. ARGV[6] .. '|' .. #ARGV[5] .. '|' .. ARGV[5]
for i = 1, #gone, 400 do
  local push = {}
  for j = i, math.min(i + 398, #gone - 1), 2 do
    push[#push + 1] = head .. gone[j] .. tail .. gone[j + 1]
  end
  redis.pcall('LPUSH', H, unpack(push))
end
if #gone > 0 then
  redis.pcall('LTRIM', H, 0, tonumber(ARGV[7]) - 1)
  redis.pcall('PEXPIRE', H, ARGV[8])
end
local reply = {tag + 1, #victims}
for i = 1, #held do
  reply[i + 2] = held[i]
end
return reply
