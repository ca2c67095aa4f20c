#!lua flags=allow-oom
-- renew: reset the TTL of the caller's own permit, in one script run;
-- optionally change its public holder label (etcd's Proclaim).
-- allow-oom: a renew rewrites its permit in place (same size, give or take
-- the label); a full Redis must not end every lease early (README, "full
-- Redis": renewals, releases and reads are still served).
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)
-- KEYS[3] tombstones (see break.lua)  KEYS[4] index  KEYS[5] history (see acquire.lua)
-- ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms
-- ARGV[4] new holder label or '' (keep)  ARGV[5] sequence key ttl ms
-- ARGV[6] event channel  ARGV[7] resource tag
-- ARGV[8] history length  ARGV[9] history ttl ms (see acquire.lua)
-- ARGV[10] purpose watched: '1' announces a label change as for a watched
-- resource (see acquire.lua), '' otherwise
-- ARGV[11] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- History (see acquire.lua): 'h' when the label changes; a plain renew
-- writes none.
-- Bounded holds (docs/decisions/storage-v2.md, "Bounded holds"): a permit acquired
-- with maxHoldMs keeps "\30<maxHoldMs>|" before its label. No renewal
-- reaches past acquiredAt + maxHoldMs: the renew that would is granted the
-- time left (its TTL is capped), and leaves a tombstone "<end>|max_hold"
-- (as break.lua's, end = the bound + the TTL asked), so that the holder's
-- renew or release after the bound hears why.
-- Returns {tag(1), fence, acquiredAt, now, holder slot, ttl granted} renewed
-- (renewedAt = now; the slot as stored, bound mark included),
-- {tag(0)} absent, {tag(-1)} someone else holds it, {tag(-2), why} the
-- caller's permit ended early and its tombstone says why ('revoked':
-- break.lua, 'max_hold': above), {tag(-9), error} Redis
-- refused (nothing applied: the permit's own expiresAt is what counts, and
-- it is written last).
--#include lib/permit.lua
--#include lib/time.lua
local tag = tonumber(ARGV[11]) * 16 + 9
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
-- A plain lease is a string record "<field>|<value>" (see acquire.lua).
local cur = redis.pcall('GET', KEYS[1])
local rec, hashed
local v, others, latest = nil, 0, 0
-- Long-expired permits found by the walk below go with the renew, at most
-- STALE_SWEEP a call, as lib/index.lua says for acquire and release (the
-- one-HGET path finds none; renew reads no index, so it keeps its own).
local STALE_SWEEP = 256
local stale
local recorded = {}
local relabel_asked = ARGV[4] ~= ''
--#include lib/tombstone.lua
-- A permit value's label slot at `at`: its hold bound (ms) or nil, and
-- where the label itself starts: after the hold bound's mark and a
-- session's ("\29<session id>|", docs/design.md §18), which a new label
-- keeps.
local function slot(value, at)
  local bound
  if string.byte(value, at) == 30 then
    bound, at = string.match(value, '^\30(%d+)|()', at)
  end
  if string.byte(value, at) == 29 then
    at = string.match(value, '^\29[^|]*|()', at)
  end
  return tonumber(bound), at
end
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif type(cur) == 'table' then
  hashed = true
  -- A counting or shared lease: the caller's own permit is one HGET, and a
  -- renew that keeps its label needs nothing else (no walk over the other
  -- holders: the work stays flat with thousands of them). The walk below
  -- is for a new label (the event counts the live holders) and for a
  -- permit that is gone (absent or someone else's?).
  local own = redis.call('HGET', KEYS[1], mine)
  if own then
    local _, exp, _, _, _, _, at = permit(own)
    if exp > now and (not relabel_asked or string.sub(own, select(2, slot(own, at))) == ARGV[4]) then
      v = own
      rec = {}
    end
  end
  if not rec then
    rec = redis.call('HGETALL', KEYS[1])
    -- The permits whose expiry is in the history (a negative index score,
    -- see acquire.lua): only those are swept here; a renew writes no
    -- expiry, so the others wait for a call that writes theirs.
    local neg = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(0')
    for i = 1, #neg do
      recorded[neg[i]] = true
    end
  end
else
  return not_held(0)
end
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local _, exp, _, _, _, ld = permit(rec[i + 1])
    if field == mine then
      if exp > now then
        v = rec[i + 1]
      end
    else
      if exp > now then
        others = others + 1
      end
      local ends = exp + tonumber(ld)
      if ends > latest then
        latest = ends
      end
      if ends <= now and recorded[field] and (not stale or #stale < STALE_SWEEP) then
        stale = stale or {}
        stale[#stale + 1] = field
      end
    end
  end
end
if not v then
  return not_held(others)
end
local fence, acq, ld, at = string.match(v, '^(%d+)|%d+|(%d+)|%d+|%d+|(%d+)|()')
local bound, label_at = slot(v, at)
local holder = string.sub(v, label_at)
local relabel = relabel_asked and ARGV[4] ~= holder
if relabel then
  holder = ARGV[4]
end
local ttl, ttl_text, hold_end = tonumber(ARGV[3]), ARGV[3], nil
if bound then
  hold_end = tonumber(acq) + bound
  if now + ttl >= hold_end then
    -- (at least 1 ms: only a pod that knows no bound renews past it)
    ttl = math.max(hold_end - now, 1)
    ttl_text = string.format('%d', ttl)
  else
    hold_end = nil
  end
end
local now_text = string.format('%d', now)
local kept = string.sub(v, at, label_at - 1) .. holder
local value = fence .. '|' .. string.format('%d', now + ttl)
  .. '|' .. acq .. '|' .. now_text .. '|' .. ttl_text .. '|' .. ld .. '|' .. kept
-- The permit is written first: a write Redis refuses (MISCONF, NOREPLICAS)
-- is refused at the first one, so a refused renew changes nothing, no TTL
-- and no label event. What follows cannot be refused once it was accepted.
local done
if not hashed then
  -- A plain lease: the whole record in one SET, with its new TTL.
  done = redis.pcall('SET', KEYS[1], mine .. '|' .. value, 'PX', ttl_text)
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
else
  done = redis.pcall('HSET', KEYS[1], mine, value)
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  -- The record lives until its last permit and lock-delay are over: a
  -- renew only ever lengthens that (one PTTL, not a walk over every permit
  -- on every renew); a record left longer than needed holds only expired
  -- permits, which every script reads as gone.
  local ends = now + ttl + tonumber(ld)
  if latest > ends then
    ends = latest
  end
  local extend = redis.call('PTTL', KEYS[1]) < ends - now
  if extend then
    redis.pcall('PEXPIRE', KEYS[1], ends - now)
  end
  -- The expiry index (see acquire.lua) learns the new expiry, and lives as
  -- long as the record (also when this ZADD created it).
  local IDX = KEYS[4]
  local added = redis.pcall('ZADD', IDX, string.format('%d', now + ttl), mine)
  if extend then
    redis.pcall('PEXPIRE', IDX, ends - now)
  elseif added == 1 then
    redis.pcall('PEXPIRE', IDX, redis.call('PTTL', KEYS[1]))
  end
  -- In slices of 200: unpack puts each element on Lua's C stack.
  for i = 1, stale and #stale or 0, 200 do
    local j = math.min(i + 199, #stale)
    redis.pcall('HDEL', KEYS[1], unpack(stale, i, j))
    redis.pcall('ZREM', IDX, unpack(stale, i, j))
  end
end
if hold_end then
  --#include lib/prune.lua
  -- Capped at the hold bound: the tombstone that tells the holder why its
  -- lease ends there, kept one asked TTL past the bound.
  local T = KEYS[3]
  local tomb_end = hold_end + tonumber(ARGV[3])
  redis.pcall('HSET', T, mine, string.format('%d', tomb_end) .. '|max_hold')
  if redis.call('PTTL', T) < tomb_end - now then
    redis.pcall('PEXPIRE', T, tomb_end - now)
  end
  prune_ended(T, now, 1)
end
if relabel then
  --#include lib/sequence.lua
  -- A new label is a change watchers see: bump the change counter.
  local last, changes, watched, queued = fence, 0, '0', '0'
  local a, b, c, d = sequence(redis.call('GET', KEYS[2]))
  if a then
    last, changes, watched, queued = a, tonumber(b), c, d
  end
  changes = changes + 1
  local changes_text = string.format('%d', changes)
  redis.pcall('SET', KEYS[2], last .. ':' .. changes_text .. ':' .. watched .. ':' .. queued, 'PX', ARGV[5])
  if tonumber(watched) > now or ARGV[10] ~= '' then
    redis.pcall('PUBLISH', ARGV[6], ARGV[7] .. '\t' .. changes_text .. '.' .. (others + 1) .. '\tholder_changed')
  end
  local H = KEYS[5]
  local n = redis.pcall('LPUSH', H, 'h|' .. now_text .. '|' .. fence .. '|' .. changes_text .. '.'
    .. (others + 1) .. '|' .. holder)
  if type(n) == 'number' and n > tonumber(ARGV[8]) then
    redis.pcall('LTRIM', H, 0, tonumber(ARGV[8]) - 1)
  end
  redis.pcall('PEXPIRE', H, ARGV[9])
end
return {tag + 1, tonumber(fence), tonumber(acq), now, kept, ttl}
