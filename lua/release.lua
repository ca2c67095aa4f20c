-- release: delete the caller's own permit and wake the resource's waiters.
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)
-- KEYS[3] tombstones  <ns>:tomb:v2:{<purpose>:<digest>} (break.lua)
-- KEYS[4] history  KEYS[5] index  KEYS[6] queue  KEYS[7] asks
-- KEYS[8] claim  KEYS[9] grants (see acquire.lua; the claim of the caller's permit)
-- ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] event channel  ARGV[4] resource tag ("<purpose>:<digest>")
-- ARGV[5] mode: '' the caller's release; 's' the same when the lease's
--         session ended (docs/design.md §18: its history entry is 'e', not 'r');
--         'a' the clean-up of an acquisition
--         whose waiter left before hearing of it (docs/design.md §14): the permit
--         goes only if nobody has been told it is held since, i.e. it was
--         never renewed and no replay claimed it (acquire.lua's claim key).
-- ARGV[6] history length  ARGV[7] history ttl ms (see acquire.lua)
-- ARGV[8] this instance's id (its queue members are '<mode>:<id>:<n>')
-- ARGV[9] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- History (see acquire.lua): 'r' ('e' in mode 's') for the released permit, and 'x'/'d' for
-- expired permits this run reads, as acquire.lua writes them.
-- Returns {tag(1), heldMs} released (heldMs = now - the permit's acquiredAt,
-- for the hold-time histogram), {tag(0)} already absent, {tag(-1)} someone
-- else holds it (untouched), {tag(2)} mode 'a' and the permit was claimed
-- or renewed (untouched), {tag(-2), why} already absent and its tombstone
-- (break.lua or renew.lua) says why ('revoked', 'max_hold'), {tag(-9),
-- error} Redis refused. After those items, every answer but a refusal
-- appends the hold time (expiresAt - acquiredAt, ms) of each permit whose
-- expiry this run wrote to the history (as acquire.lua). Every answer of
-- integers only (all but statuses -2 and -9) is packed into one string,
-- "<tag> <item> ..." (as acquire.lua; see `answer`).
-- Hand-off (docs/design.md §12): when the released permit was a plain
-- lease's and the fair queue's first live entry is an exclusive waiter
-- that left an ask (queue.lua) on the releasing instance itself, this run
-- grants that waiter the lease: the
-- permit written as acquire.lua writes it (its attempt, a new fencing token,
-- its TTL and label; 'a' in the history), its entry and ask gone, the grant
-- mark set: field <its permit field> of KEYS[9] = "<end ms>|<granted
-- member>", for the permit's TTL, at most 60 s (read by that entry's
-- leave and its next look; gone with the permit's release; ended marks
-- are pruned as tombstones are), and
-- "<tag>\t<version>\tgranted\t<member>\t<fence>\t<acquiredAt>" published
-- instead of 'released' (after the writes: nobody hears of a grant that was
-- not written). The waiter's instance answers it from that message, without
-- another script run; a waiter that left meanwhile is released again by
-- mode 'a' (the grant was never claimed). A head without an ask (an older
-- instance's waiter, a shared or counting waiter) is not granted: the
-- release wakes waiters as before. So is a head on another instance: that
-- instance may have been frozen or killed a moment ago (its heartbeat
-- lasts 2 s), and a grant would then be held for its whole TTL by a
-- waiter nobody can answer or clean up; the releasing instance is running.
-- The event "<tag>\t<version>\treleased" is published before the delete (with
-- the queue's live head known: "\t<its instance>\t<ms to its lapse>"): an
-- ACL that denies the channel refuses the release before anything is deleted
-- (an event without a delete only costs waiters and watchers one look).
-- A release changes no counter: the version "<changes>.<live permits>" moves
-- because the live count falls (and for one change count it only falls). A
-- release never starts a lock-delay: only an expiry does.
--#include lib/permit.lua
--#include lib/time.lua
--#include lib/sequence.lua
local tag = tonumber(ARGV[9]) * 16 + 9
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
-- The clean-up (mode 'a') is refused whenever a replay's claim would be
-- (acquire.lua answers a replay whose claim Redis refused): its first
-- write is a SET of the claim key, refused by a full Redis (SET may grow
-- memory), NOREPLICAS and READONLY exactly as the claim's SET is (Redis
-- checks those at a script's first write only). NX: it sets nothing when
-- a replay claimed the permit (claimed); what it set goes at once.
local claimed = false
if ARGV[5] == 'a' then
  local probe = redis.pcall('SET', KEYS[8], 'a', 'NX', 'PX', 1000)
  if type(probe) == 'table' and probe.err then
    return {tag - 9, probe.err}
  end
  claimed = not probe
  if probe then
    redis.call('DEL', KEYS[8])
  end
end
--#include lib/tombstone.lua
-- A plain lease is a string record "<field>|<value>" (see acquire.lua).
-- The record (a hash answers GET with an error: pcall) and the sequence.
-- Not one MGET, though it would save a call: MGET is not in the ACL
-- rules docs/topologies.md gives operators, and a release must keep
-- working under the rules an operator set for the previous one.
local cur = redis.pcall('GET', KEYS[1])
local seq = redis.call('GET', KEYS[2])
local rec, IDX
-- extra: other live permits the loop below does not see (counted by the
-- expiry index, lib/index.lua); the whole hash is read only when the
-- index cannot be trusted (more than INDEX_DUE permits due, or it
-- disagrees with the hash).
local extra, delayed, delayed_end = 0, 0, 0
-- Permits whose expiry is in the history already: a negative index score,
-- -(expiresAt + lockDelayMs) (see acquire.lua).
local recorded = {}
--#include lib/limits.lua
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif type(cur) == 'table' then
  --#include lib/index.lua
  IDX = KEYS[5]
  -- A small record (SMALL_RECORD fields at most) is read whole, as
  -- acquire.lua does: one read costs Redis less than the index's reads.
  local fields = redis.call('HLEN', KEYS[1])
  local part, _, agrees
  if fields > SMALL_RECORD then
    part, _, agrees = read_due(fields)
  end
  if agrees then
    extra = redis.call('ZCOUNT', IDX, '(' .. now, '+inf')
    local has_mine = false
    for i = 1, #part, 2 do
      has_mine = has_mine or part[i] == mine
    end
    local own = not has_mine and redis.call('HGET', KEYS[1], mine)
    if own then
      local score = redis.call('ZSCORE', IDX, mine)
      if score and tonumber(score) > now then
        part[#part + 1] = mine
        part[#part + 1] = own
        extra = extra - 1
      elseif score and tonumber(score) < -now then
        -- Expired, recorded, in its lock-delay: read, not counted.
        recorded[mine] = true
        part[#part + 1] = mine
        part[#part + 1] = own
      else
        extra = nil -- the permit is not where the index says
      end
    end
    if extra then
      rec = part
      -- Recorded permits in their lock-delay: counted (the record stays
      -- for them) and the latest end read, not each of them.
      delayed = redis.call('ZCOUNT', IDX, '-inf', '(' .. -now)
      if delayed > 0 then
        delayed_end = -tonumber(redis.call('ZRANGE', IDX, 0, 0, 'WITHSCORES')[2])
      end
    end
  end
  if not rec then
    extra, recorded = 0, {}
    rec = redis.call('HGETALL', KEYS[1])
    local neg = fields > SMALL_RECORD and redis.call('ZRANGEBYSCORE', IDX, '-inf', '(0', 'WITHSCORES')
      or redis.call('ZRANGE', IDX, 0, SMALL_RECORD, 'WITHSCORES')
    for i = 1, #neg, 2 do
      if string.byte(neg[i + 1], 1) == 45 then -- '-'
        recorded[neg[i]] = true
      end
    end
  end
else
  return not_held(0)
end
local held, live, rest, latest, renewed = false, extra, extra + delayed, delayed_end, false
-- Long-expired permits (expiry and lock-delay over) go with the release, at
-- most STALE_SWEEP a call (lib/index.lua).
local stale
local acquired_at = now -- the caller's permit's acquiredAt, read below
-- The caller's permit, its fence and where its holder slot starts, for
-- its history entry.
local own_value, own_fence, own_at
-- Expired permits read whose expiry is not in the history yet (six
-- items each, as lib/expiries.lua takes them): each written once.
local seen
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local fence, exp, acq, ren, _, ld, at = permit(rec[i + 1], true)
    if exp > now then
      live = live + 1
    end
    -- noted: its expiry is in the history or goes there in this run (at
    -- most SEEN_MAX a call; the rest stay due for later calls). Only a noted
    -- permit is swept.
    local noted = exp <= now and recorded[field]
    if exp <= now and not noted and (not seen or #seen < SEEN_MAX * 6) then
      seen = seen or {}
      seen[#seen + 1] = fence
      seen[#seen + 1] = exp -- its end (a bound caps it)
      seen[#seen + 1] = ld
      seen[#seen + 1] = string.sub(rec[i + 1], at)
      seen[#seen + 1] = acq
      seen[#seen + 1] = field
      noted = true
    end
    if field == mine then
      own_value, own_fence, own_at = rec[i + 1], fence, at
      held = exp > now
      renewed = acq ~= ren
      acquired_at = tonumber(acq)
    else
      local ends = exp + tonumber(ld)
      if ends > now then
        rest = rest + 1
        if ends > latest then
          latest = ends
        end
      elseif noted and (not stale or #stale < STALE_SWEEP) then
        stale = stale or {}
        stale[#stale + 1] = field
      end
    end
  end
end
local H, HMAX = KEYS[4], tonumber(ARGV[6])
local changes = '0'
local last, watched, queued = '0', '0', '0'
do
  local a, b, c, d = sequence(seq)
  if a then
    last, changes, watched, queued = a, b, c, d
  end
end
--#include lib/reply.lua
if seen then
  --#include lib/expiries.lua
  -- As acquire.lua: each expiry once ('x', then 'd' for a lock-delay).
  write_expiries(H, seen, changes .. '.' .. (held and live - 1 or live))
  if IDX then
    recorded_in(seen, 6)
  end
end
if not held then
  return answer(not_held(live))
end
if ARGV[5] == 'a' and (renewed or claimed) then
  return answer({tag + 2})
end
-- A grant mark of this permit (a release granted it to a waiter) goes
-- with it; only while a queue exists, when grants are made (a mark left
-- behind ends with its PTTL).
if tonumber(queued) > now then
  redis.pcall('HDEL', KEYS[9], mine)
end
-- Hand-off: the queue's first live entry, when the released permit was a
-- plain lease's (a string record: no other permit, no lock-delay).
local QUEUE, ASK, head, ask, head_lapse
if type(cur) == 'string' and tonumber(queued) > now then
  QUEUE = KEYS[6]
  local entries = redis.call('ZRANGEBYSCORE', QUEUE, 0, '+inf', 'LIMIT', 0, 64)
  local alive = {}
  for i = 1, #entries do
    local inst = string.match(entries[i], '^%a:([^:]+):') or ''
    local until_ms = alive[inst]
    if until_ms == nil then
      local sc = redis.call('ZSCORE', QUEUE, '~' .. inst)
      until_ms = sc and -tonumber(sc) or 0
      alive[inst] = until_ms
    end
    if until_ms > now then
      head, head_lapse = entries[i], until_ms
      break
    end
  end
  if head and string.match(head, '^x:([^:]+):') == ARGV[8] then
    ASK = KEYS[7]
    ask = redis.call('HGET', ASK, head)
  end
end
-- The version's live count after the release, as text: a number
-- concatenated is formatted as a double ('%.14g'), far dearer than '%d',
-- and a plain release leaves none.
local left_text = live == 1 and '0' or string.format('%d', live - 1)
local done
if not ask then
  -- With a live head known: "\t<its instance>\t<ms until its heartbeat
  -- lapses>"; only that instance's waiters look, the others sleep until
  -- then at most (the head may go, or its instance has died).
  local head_inst = head and string.match(head, '^%a:([^:]+):')
  local target = head_inst and ('\t' .. head_inst .. '\t' .. string.format('%d', head_lapse - now)) or ''
  done = redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes .. '.' .. left_text .. '\treleased'
    .. target)
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
end
if rest == 0 then
  done = redis.pcall('DEL', KEYS[1])
  if IDX then
    redis.pcall('DEL', IDX)
  end
else
  done = redis.pcall('HDEL', KEYS[1], mine)
  if not (type(done) == 'table' and done.err) then
    -- Shorten the record's life to its other permits'; refused, it only
    -- lives longer than needed (the permit is gone either way).
    -- (Not when the index counted some: their ends were not read.)
    if extra == 0 then
      redis.pcall('PEXPIRE', KEYS[1], latest - now)
      redis.pcall('PEXPIRE', IDX, latest - now)
    end
    redis.pcall('ZREM', IDX, mine)
    -- In slices of 200: unpack puts each element on Lua's C stack.
    for i = 1, stale and #stale or 0, 200 do
      local j = math.min(i + 199, #stale)
      redis.pcall('HDEL', KEYS[1], unpack(stale, i, j))
      redis.pcall('ZREM', IDX, unpack(stale, i, j))
    end
  end
end
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
done = redis.pcall('LPUSH', H, (ARGV[5] == 's' and 'e|' or 'r|') .. string.format('%d', now) .. '|' .. own_fence
  .. '|' .. changes .. '.'
  .. left_text .. '|' .. string.sub(own_value, own_at))
if type(done) == 'number' and done > HMAX then
  redis.pcall('LTRIM', H, 0, HMAX - 1)
end
redis.pcall('PEXPIRE', H, ARGV[7])
if ask then
  -- (the helpers only a grant needs, spliced here: a closure is made
  -- per run from where it stands)
  --#include lib/fence.lua
  --#include lib/prune.lua
  -- The grant, as acquire.lua's general path writes a plain lease.
  local granted = false
  local ttl_text, owner, op, label = string.match(ask, '^(%d+)|([^|]*)|([^|]*)|(.*)$')
  if ttl_text then
    -- Fencing as acquire.lua: above the last token and the clock in µs.
    local _, fence_text, now_text = next_fence(tonumber(last))
    local ttl = tonumber(ttl_text)
    local changes_text = string.format('%d', tonumber(changes) + 1)
    -- The sequence's lifetime as acquire.lua's: the history's, at least
    -- the TTL and a minute.
    local seq_ms = math.max(ttl, tonumber(ARGV[7]), 60000)
    done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. ':' .. watched .. ':' .. queued,
      'PX', string.format('%d', seq_ms))
    if not (type(done) == 'table' and done.err) then
      done = redis.pcall('SET', KEYS[1], 'p:' .. owner .. ':' .. op .. '|' .. fence_text .. '|'
        .. string.format('%d', now + ttl) .. '|' .. now_text .. '|' .. now_text .. '|' .. ttl_text .. '|0|'
        .. label, 'PX', ttl_text)
      granted = not (type(done) == 'table' and done.err)
    end
    if granted then
      redis.pcall('ZREM', QUEUE, head)
      redis.pcall('HDEL', ASK, head)
      -- The grant mark: this entry was granted (its leave and its next
      -- look read it), for as long as the permit may live, at most a
      -- minute: a key of its own with a PTTL, so marks never pile up
      -- under a queue that never empties. Its value is the granted
      -- member: the same attempt may wait in two entries (its caller
      -- left one instance and retried on another), and only the granted
      -- entry's leave may take the grant for its own.
      local mark_end = now + (ttl > 60000 and 60000 or ttl)
      redis.pcall('HSET', KEYS[9], 'p:' .. owner .. ':' .. op, string.format('%d', mark_end) .. '|' .. head)
      if redis.call('PTTL', KEYS[9]) < mark_end - now then
        redis.pcall('PEXPIRE', KEYS[9], mark_end - now)
      end
      prune_ended(KEYS[9], now, 1)
      done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.1|' .. label)
      if type(done) == 'number' and done > HMAX then
        redis.pcall('LTRIM', H, 0, HMAX - 1)
      end
      redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes_text .. '.1\tgranted\t' .. head .. '\t'
        .. fence_text .. '\t' .. now_text)
    end
  end
  if not granted then
    -- Not granted (a malformed ask, Redis refused the write): released,
    -- and the waiters look for themselves.
    redis.pcall('HDEL', ASK, head)
    redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes .. '.' .. left_text .. '\treleased')
  end
end
if not holds then
  -- The usual answer, packed as `answer` packs it, without its tables.
  return string.format('%d %d', tag + 1, now - acquired_at)
end
return answer({tag + 1, now - acquired_at})
