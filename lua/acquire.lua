-- acquire: take a permit of the resource if one is free, in one script run
-- (storage v2, docs/decisions/storage-v2.md).
-- KEYS[1] record    <ns>:lease:v2:{<purpose>:<digest>}  string or hash (below)
-- KEYS[2] sequence  <ns>:seq:v2:{<purpose>:<digest>}    "<last fence>:<changes>:<watched until>:<queue until>"
-- KEYS[3] history   <ns>:hist:v2:{<purpose>:<digest>}   list (below, "History")
-- KEYS[4] index     <ns>:exp:v2:{<purpose>:<digest>}    sorted set (below, the expiry index)
-- KEYS[5] queue     <ns>:queue:v2:{<purpose>:<digest>}  sorted set (queue.lua)
-- KEYS[6] asks      <ns>:ask:v2:{<purpose>:<digest>}    hash (queue.lua)
-- KEYS[7] claim     <ns>:claim:v2:{<purpose>:<digest>}:<the caller's permit field>
-- KEYS[8] grants    <ns>:granted:v2:{<purpose>:<digest>}  hash (release.lua, "Hand-off")
-- Every key the script touches is named here (all in one slot: one hash
-- tag), so that a Cluster redirects the call before anything runs while
-- the slot moves. The event channel <ns>:wake:v2 and the resource tag are
-- derived from KEYS[1], and only when an event is due.
-- ARGV[1] owner token  ARGV[2] operation id  ARGV[3] ttl ms  ARGV[4] holder label or ''
-- ARGV[5] shape: '' for a plain lease (limit 1, exclusive, no lock-delay)
--         asked by a caller not queued; "+<heartbeat horizon ms>:<member>"
--         for the same asked by a waiter not queued yet, which takes its
--         place in the fair queue as <member> when it finds no permit (as
--         queue.lua's 'enter' does, with the ask built from ARGV[1..4]: one
--         script run for the look and the enter); else
--         "<limit>:<x exclusive|s shared>:<lock-delay ms>:<queue member or ''>",
--         where the member part "+<heartbeat horizon ms>:<member>" enters
--         a waiter not queued yet in the same way (without an ask: only a
--         plain lease is granted), and "-<member>" is a queued waiter's
--         last look: refused, its entry and ask leave the queue in the run
-- ARGV[6] history length: most entries the resource's history keeps
-- ARGV[7] history ttl ms: how long the history outlives its last entry
-- ARGV[8] purpose watched: '1' while the purpose is in the registry of
--         watched purposes (lua/purposes.lua): the acquire is announced
--         as for a watched resource. '' otherwise.
-- ARGV[9] nonce, a 32-bit integer. Every reply starts with the tag
--         nonce * 16 + status + 9 (status -9..6 in the low 4 bits; exact as a
--         Lua number): the caller proves the reply answers its own request (a
--         pipelined connection one reply short would otherwise hand it
--         another request's reply). One element, not two: redis-rs spends
--         ~900 instructions per reply element.
--
-- The record: field 'l' the limit its holders agreed on (absent: 1), 'm'
-- their mode (absent: 'x'), and one field per permit "p:<owner token>:<operation
-- id>" (neither contains ':') with the value
--   "<fence>|<expiresAt>|<acquiredAt>|<renewedAt>|<ttlMs>|<lockDelayMs>|<holder>"
-- (times in ms of the server clock; the label last, as it may contain '|').
-- A permit is live while expiresAt > now. An expired permit with a lock-delay
-- stays in the record until expiresAt + lockDelayMs: the delay. Its own
-- owner token may acquire at once (ahead of any queue), and doing so ends
-- that delay: the old permit goes. The record's
-- PTTL is the latest expiresAt + lockDelayMs of its permits, so Redis deletes
-- it when the last permit and delay are over, with nobody's help.
--
-- History (docs/decisions/storage-v2.md, "History"): the list
-- KEYS[3], newest entry
-- first, "<kind>|<at ms>|<fence>|<version>|[<extra>|]<holder>": this
-- script writes 'a' (acquired) and the expiries it notices: 'x' (expired,
-- at = the permit's expiresAt, read from the record), 'd' (its lock-delay
-- started, extra = the delay in ms) and 'X' (expired, at = now: Redis had
-- already dropped the record, so the expiry's own time is gone).
--
-- Returns:
--   {tag(1), fence, now}  acquired (acquiredAt = renewedAt = now)
--   {tag(2), remaining, fence, acquiredAt, renewedAt, ttlMs, holder, granted}
--     the same attempt already holds a permit (TTL not extended); granted
--     1: the caller waits and a release granted it that permit (its grant
--     mark, field <permit field> of KEYS[8], names it), so this is its
--     acquisition, else 0
--   {tag(3), remaining}   the same owner token holds the plain lease for
--                         another operation
--   {tag(0), retry, why}  contended: why 0 no free permit (or the other
--     mode holds it; retry = the soonest expiry), 1 lock-delay (retry = the
--     delay left), 2 queued behind waiters (retry = when the first waiter's
--     heartbeat lapses), 3 the caller's queue entry is gone (re-enter);
--     why + 4: the caller entered the queue ("+..." shape) in this run;
--     why + 8: a last look's entry left it ("-<member>", below)
--   {tag(4), limit}       limit_mismatch: live holders agreed on another limit
--   {tag(-9), error}      Redis refused a write; no permit was written (the
--                         first write, the sequence, is harmless alone)
-- After the items above, statuses 0, 1 (general path), 3 and 4 append the
-- hold time (expiresAt - acquiredAt, ms) of each permit whose expiry this
-- run wrote to the history ('x'), for the hold-time histogram (end
-- "expired"); none on the fast path, a replay or a refusal.
-- Every answer of integers only (all but statuses 2 and -9) is packed into
-- one string, "<tag> <item> ..." (see `answer`).
-- A bounded permit (label slot "\30<maxHoldMs>|...", docs/decisions/storage-v2.md,
-- "Bounded holds") ends at acquiredAt + maxHoldMs at the latest: a renew
-- through a pod of the previous release, which knows no bound, moves its
-- expiresAt past it, and every script of this release still ends it there
-- (called only when the slot at `at` starts with \30; acquire.lua,
-- release.lua, renew.lua, inspect.lua and break.lua keep the same function).
local function capped(value, at, acq, exp)
  local bound = tonumber(string.match(value, '^\30(%d+)|', at))
  if bound and tonumber(acq) + bound < exp then
    return tonumber(acq) + bound
  end
  return exp
end
local tag = tonumber(ARGV[9]) * 16 + 9
local t = redis.call('TIME')
local secs, micros = tonumber(t[1]), tonumber(t[2])
local now = secs * 1000 + (micros - micros % 1000) / 1000
local ttl = tonumber(ARGV[3])
-- GET tells a plain record (a string) from a hash (WRONGTYPE) or none.
local cur = redis.pcall('GET', KEYS[1])
local H, HMAX = nil, tonumber(ARGV[6])
-- No record: the sequence is read first (the fast path needs it anyway).
local seq0 = not cur and redis.call('GET', KEYS[2])
if seq0 then
  -- No record, but a sequence: when the newest history entry left holders
  -- live (its version "<changes>.<live>" counts some), their permits ran
  -- out since and Redis dropped the record: their expiries are written now
  -- ('X'), for every acquire or holder change nothing closed. One LINDEX
  -- on the fast path; the rest only then. (No sequence: nothing was
  -- acquired here for the history's age, at least the last TTL and
  -- lock-delay: no history entry is left to close.)
  H = KEYS[3]
  local head = redis.call('LINDEX', H, 0)
  local left = head and string.match(head, '^%a|%d+|%d+|%d+%.(%d+)|')
  if left and left ~= '0' then
    local all = redis.call('LRANGE', H, 0, -1)
    local open, order = {}, {}
    for i = #all, 1, -1 do
      local k, f, at = string.match(all[i], '^(%a)|%d+|(%d+)|[^|]*|()')
      if k == 'a' or k == 'h' then
        if not open[f] then
          order[#order + 1] = f
        end
        open[f] = string.sub(all[i], at)
      elseif k and k ~= 'd' then
        open[f] = false
      end
    end
    local version = (string.match(seq0, '^%d+:(%d+):') or '0') .. '.0'
    local at_text = string.format('%d', now)
    local push = {}
    for i = 1, #order do
      if open[order[i]] then
        push[#push + 1] = 'X|' .. at_text .. '|' .. order[i] .. '|' .. version .. '|' .. open[order[i]]
        open[order[i]] = false
      end
    end
    -- In slices of 200: unpack puts every element on Lua's C stack (about
    -- 8 000 at most), and a counting lease may leave up to HMAX open.
    local n
    for i = 1, #push, 200 do
      n = redis.pcall('LPUSH', H, unpack(push, i, math.min(i + 199, #push)))
    end
    if type(n) == 'number' and n > HMAX then
      redis.pcall('LTRIM', H, 0, HMAX - 1)
    end
    -- Every path below may return before writing the history again: the
    -- TTL is set here, with the write (a key without one would never go).
    if n then
      redis.pcall('PEXPIRE', H, ARGV[7])
    end
  end
end
if not cur and (ARGV[5] == '' or string.byte(ARGV[5], 1) == 43) then -- '+'
  -- The fast path: a plain lease asked for a free resource that nobody
  -- queues for. It writes what the general path below writes in that case,
  -- in the fewest Lua steps: on the uncontended acquire every bytecode and
  -- every new string is paid by Redis per call (docs/decisions/storage-v2.md).
  local seq = seq0
  local last, changes, watched, marks = 0, 0, 0, ':0:0'
  if seq then
    local a, b, c, d = string.match(seq, '^(%d+):(%d+):(%d+):?(%d*)')
    if a then
      if d ~= '' and tonumber(d) > now then
        last = nil -- a queue exists: the general path decides
      else
        last, changes, watched = tonumber(a), tonumber(b), tonumber(c)
        marks = ':' .. c .. ':' .. (d == '' and '0' or d)
      end
    end
  end
  if last then
    local us6 = t[2]
    if #us6 < 6 then
      us6 = string.sub('00000' .. us6, -6)
    end
    local fence, fence_text = secs * 1000000 + micros, t[1] .. us6
    if last >= fence then
      fence = last + 1
      fence_text = string.format('%d', fence)
    end
    changes = changes + 1
    local changes_text = changes == 1 and '1' or string.format('%d', changes)
    -- The sequence lives as the history (ARGV[7]), at least this TTL and
    -- a minute (see SEQ_TTL below).
    local hist_ms = tonumber(ARGV[7])
    local done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. marks, 'PX',
      (ttl > hist_ms and ttl > 60000) and ARGV[3] or (hist_ms > 60000 and ARGV[7] or '60000'))
    if type(done) == 'table' and done.err then
      return {tag - 9, done.err}
    end
    local now_text = t[1] .. string.sub(us6, 1, 3)
    done = redis.pcall('SET', KEYS[1], 'p:' .. ARGV[1] .. ':' .. ARGV[2] .. '|' .. fence_text .. '|'
      .. string.format('%d', now + ttl) .. '|' .. now_text .. '|' .. now_text .. '|' .. ARGV[3] .. '|0|'
      .. ARGV[4], 'PX', ARGV[3])
    if type(done) == 'table' and done.err then
      return {tag - 9, done.err}
    end
    H = H or KEYS[3]
    done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.1|' .. ARGV[4])
    if type(done) == 'number' and done > HMAX then
      redis.pcall('LTRIM', H, 0, HMAX - 1)
    end
    redis.pcall('PEXPIRE', H, ARGV[7])
    if watched > now or ARGV[8] ~= '' then
      redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
        string.match(KEYS[1], '{(.*)}$') .. '\t' .. changes_text .. '.1\tacquired')
    end
    -- {tag + 1, fence, now}, packed as `answer` packs (fence_text is fence
    -- and now_text is now, in decimal).
    return string.format('%d ', tag + 1) .. fence_text .. ' ' .. now_text
  end
end
local limit, mode, delay, delay_text, member = 1, 'x', 0, '0', ''
-- A waiter not queued yet: the member it enters as when refused (with an
-- ask, which a release may grant, for a plain lease only).
-- A queued waiter's last look ('-<member>'): refused, its entry leaves.
local enter_as, horizon, asks, leaving
if string.byte(ARGV[5], 1) == 43 then -- '+'
  local h1, e1 = string.match(ARGV[5], '^%+(%d+):(.+)$')
  horizon, enter_as, asks = tonumber(h1), e1, true
elseif ARGV[5] ~= '' then
  local l1, m1, d1, q1 = string.match(ARGV[5], '^(%d+):(%a):(%d+):(.*)$')
  limit, mode, delay, delay_text, member = tonumber(l1), m1, tonumber(d1), d1, q1
  if string.byte(q1, 1) == 43 then -- '+'
    local h1, e1 = string.match(q1, '^%+(%d+):(.+)$')
    horizon, enter_as, member = tonumber(h1), e1, ''
  elseif string.byte(q1, 1) == 45 then -- '-'
    member, leaving = string.sub(q1, 2), true
  end
end
-- The sequence key outlives the lease it numbers (TTL and lock-delay) and
-- lives as long as the history its change count annotates (ARGV[7]), at
-- least a minute (past the watch and queue marks it carries, and a margin
-- for a server clock stepped back); then it may go: the server clock floors
-- the next token (docs/storage.md, "Keys"; src/store/redis/keys.rs).
local SEQ_TTL = string.format('%d', math.max(ttl + delay, tonumber(ARGV[7]), 60000))
-- A plain lease (limit 1, exclusive, no lock-delay) is kept as a string,
-- "<permit field>|<permit value>", with the key's PTTL its expiry: the
-- uncontended acquire then costs what v1's did (one GET, one SET PX).
-- Anything else is a hash. GET tells which (WRONGTYPE: a hash).
-- (Nothing below allocates on the uncontended path that it can avoid:
-- every string, table and closure made here is Lua garbage, and collecting
-- it is paid per call.)
local rec, hashed = nil, false
-- A hash record's expiry index (docs/decisions/storage-v2.md, "The expiry index"):
-- the sorted set <ns>:exp:v2:T, one member per permit field, scored by its
-- expiresAt. With it a call reads only the permits due (expired by their
-- score, at most INDEX_DUE), the caller's own, and counts, so its work does
-- not grow with the live holders. `extra` counts the live permits the loop
-- below does not see; `rebuild` says the index could not be trusted (more
-- due than INDEX_DUE, or it disagrees with the hash: written by a v2
-- script, evicted): the whole hash is read, as before, and the index
-- written anew from it.
-- Once a run wrote a permit's expiry to the history, the permit's score
-- becomes -(expiresAt + lockDelayMs) (`recorded`, below): never due again,
-- so each expiry is written once, and a long lock-delay of many permits
-- is not read by every call. Below -now: its delay runs (`delays`);
-- from -now to 0: over, swept like a long-expired permit.
local IDX, INDEX_DUE = nil, 256
-- Records of at most this many fields are read whole (below).
local SMALL_RECORD = 32
-- Most long-expired permits one call deletes (see the sweep below).
local STALE_SWEEP = 256
local extra, extra_soonest, extra_latest, rebuild = 0, nil, 0, false
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
-- recorded: permit fields whose expiry is in the history already (a
-- negative index score). delays: "<field>, <ends>" of recorded permits in
-- their lock-delay that the loop below does not read; delays_top: the
-- latest end of them all when there are too many to read, with
-- delays_others set when some are not the caller's owner's.
local recorded, delays, delays_top, delays_others = {}, nil, nil, false
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif cur then
  hashed = true
  IDX = KEYS[4]
  local fields = redis.call('HLEN', KEYS[1])
  local own = fields > SMALL_RECORD and redis.call('HGET', KEYS[1], mine)
  if fields <= SMALL_RECORD then
    -- A small record: one read of all of it costs Redis less than the
    -- index's reads. The index is only counted against it, and written
    -- anew when they differ, so that it is right when the record grows.
    rec = redis.call('HGETALL', KEYS[1])
    local permits = 0
    for i = 1, #rec, 2 do
      if string.byte(rec[i], 1) == 112 then -- 'p'
        permits = permits + 1
      end
    end
    local scores = redis.call('ZRANGE', IDX, 0, SMALL_RECORD, 'WITHSCORES')
    for i = 1, #scores, 2 do
      if string.byte(scores[i + 1], 1) == 45 then -- '-': recorded
        recorded[scores[i]] = true
      end
    end
    rebuild = #scores / 2 ~= permits
  elseif own and (function()
    local e, a, at = string.match(own, '^%d+|(%d+)|(%d+)|%d+|%d+|%d+|()')
    e = tonumber(e)
    return (string.byte(own, at) == 30 and capped(own, at, a, e) or e) > now
  end)() then
    -- The same attempt holds a permit: the loop answers the replay.
    rec = {mine, own}
  else
    local due = redis.call('ZRANGEBYSCORE', IDX, 0, now, 'LIMIT', 0, INDEX_DUE + 1)
    if #due <= INDEX_DUE then
      -- Recorded permits whose delay is over are read as due ones (and
      -- swept by the loop), without writing their expiry again.
      local over = redis.call('ZRANGEBYSCORE', IDX, -now, '(0', 'LIMIT', 0, STALE_SWEEP)
      for i = 1, #over do
        recorded[over[i]] = true
        due[#due + 1] = over[i]
      end
      local lm = redis.call('HMGET', KEYS[1], 'l', 'm')
      rec = {}
      if lm[1] then
        rec[#rec + 1] = 'l'
        rec[#rec + 1] = lm[1]
      end
      if lm[2] then
        rec[#rec + 1] = 'm'
        rec[#rec + 1] = lm[2]
      end
      local found = 0
      for i = 1, #due do
        local v = redis.call('HGET', KEYS[1], due[i])
        if v then
          found = found + 1
          rec[#rec + 1] = due[i]
          rec[#rec + 1] = v
        else
          redis.pcall('ZREM', IDX, due[i])
        end
      end
      local members = redis.call('ZCARD', IDX) - (#due - found)
      if fields - (lm[1] and 1 or 0) - (lm[2] and 1 or 0) ~= members then
        rebuild = true
      else
        -- The live permits not due: counted, and read only when few (an
        -- owner's other operation matters only for a plain-sized lease).
        local ahead = redis.call('ZCOUNT', IDX, '(' .. now, '+inf')
        if ahead <= 8 then
          local live_fields = redis.call('ZRANGEBYSCORE', IDX, '(' .. now, '+inf')
          for i = 1, #live_fields do
            local v = redis.call('HGET', KEYS[1], live_fields[i])
            if not v then
              rebuild = true -- a member without its permit
              break
            end
            rec[#rec + 1] = live_fields[i]
            rec[#rec + 1] = v
          end
        else
          extra = ahead
          extra_soonest = tonumber(redis.call('ZRANGEBYSCORE', IDX, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
          -- The record's PTTL already covers every permit's end and delay.
          extra_latest = now + redis.call('PTTL', KEYS[1])
        end
      end
      -- Recorded permits in their lock-delay: read when few; when many,
      -- the latest end stands for them all and only the caller's owner's
      -- are looked for (a scan of the index in C, no Lua per member).
      local top = not rebuild and redis.call('ZRANGE', IDX, 0, 0, 'WITHSCORES')
      if top and top[2] and -tonumber(top[2]) > now then
        local n = redis.call('ZCOUNT', IDX, '-inf', '(' .. -now)
        delays = {}
        if n <= INDEX_DUE then
          local d = redis.call('ZRANGEBYSCORE', IDX, '-inf', '(' .. -now, 'WITHSCORES')
          for i = 1, #d, 2 do
            delays[#delays + 1] = d[i]
            delays[#delays + 1] = -tonumber(d[i + 1])
          end
        else
          delays_top = -tonumber(top[2])
          local own_n, met = 0, {}
          local function meet(field, score)
            local ends = -tonumber(score)
            if ends > now and not met[field] then
              met[field] = true
              own_n = own_n + 1
              delays[#delays + 1] = field
              delays[#delays + 1] = ends
            end
          end
          -- The caller's own permit is looked up directly; its owner's
          -- other operations by a scan bounded as every call's work is
          -- (docs/design.md §14): 2 scans of about 256 members. One
          -- beyond them is taken for another owner's, whose delay the
          -- caller waits out (a wait, never a second holder).
          local score = redis.call('ZSCORE', IDX, mine)
          if score then
            meet(mine, score)
          end
          local cursor, scans = '0', 0
          repeat
            local r = redis.call('ZSCAN', IDX, cursor, 'MATCH', 'p:' .. ARGV[1] .. ':*', 'COUNT', 256)
            cursor, scans = r[1], scans + 1
            for i = 1, #r[2], 2 do
              meet(r[2][i], r[2][i + 1])
            end
          until cursor == '0' or scans == 2
          delays_others = n > own_n
        end
      end
    else
      rebuild = true
    end
  end
  if rebuild then
    if fields > SMALL_RECORD then
      rec = redis.call('HGETALL', KEYS[1])
    end
    -- Whatever the index holds of recorded expiries stays known.
    recorded, delays, delays_top = {}, nil, nil
    local neg = redis.call('ZRANGEBYSCORE', IDX, '-inf', '(0')
    for i = 1, #neg do
      recorded[neg[i]] = true
    end
  end
end
local owner = rec and string.sub(mine, 1, #ARGV[1] + 3)
local l, m = 1, 'x'
local live, soonest, same_owner, latest = 0, nil, false, 0
local stale, delay_end, returning
-- Expired permits this run read whose expiry is not in the history yet
-- (six items each): each is written once (the index remembers it), at
-- most SEEN_MAX a call (the rest stay due for later calls), but all of
-- them when the run reads the whole hash anyway (a rebuild): left due,
-- more than INDEX_DUE of them would make the next call rebuild again, so
-- 2 000 permits expiring at once cost 2 000 / SEEN_MAX whole reads in a
-- row instead of one (each of the next calls blocked Redis for tens of
-- ms while survivors acquired and released).
local SEEN_MAX = 256
local seen
for i = 1, rec and #rec or 0, 2 do
  local field = rec[i]
  local b = string.byte(field, 1)
  if b == 112 then -- 'p'
    local v = rec[i + 1]
    local fence, exp, acq, ren, granted, ld, at = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
    exp = tonumber(exp)
    if string.byte(v, at) == 30 then
      exp = capped(v, at, acq, exp)
    end
    if exp > now then
      if field == mine then
        -- 1 when the caller waits and a release granted its entry this
        -- permit (release.lua sets the grant mark to the granted member):
        -- its acquisition.
        local handed = 0
        if member ~= '' then
          local until_ms, to = string.match(redis.call('HGET', KEYS[8], mine) or '', '^(%d+)|(.*)$')
          handed = (to == member and tonumber(until_ms) > now) and 1 or 0
        end
        -- A replay tells its caller that it holds this permit: the permit
        -- is marked claimed for as long as it lives, so that the clean-up
        -- release of a waiter of the same attempt that left (release.lua,
        -- mode 'a') leaves it alone (docs/design.md §14). The answer is
        -- decided first, before any write; the mark is written only when
        -- it is needed: not when the permit was renewed (the clean-up
        -- keeps it anyway) or is claimed already, and not for a waiter's
        -- look at its own grant (`handed`): should that waiter have gone,
        -- its own clean-up must find the grant unclaimed (the mark names
        -- this entry: no other entry's clean-up takes it). A Redis that
        -- refuses the mark (full, NOREPLICAS, READONLY: the SET is this
        -- run's first write) still gets the replay answered, as the
        -- previous release answered it: the clean-up's own first write is
        -- the same kind of SET (release.lua, mode 'a'), refused by the
        -- same refusal, so no clean-up takes the permit while the mark
        -- could not be written. (v2 scripts ignore the key: additive.)
        if handed == 0 and acq == ren then
          local C = KEYS[7]
          if redis.call('EXISTS', C) == 0 then
            redis.pcall('SET', C, '1', 'PX', exp - now)
          end
        end
        return {tag + 2, exp - now, tonumber(fence), tonumber(acq), tonumber(ren), tonumber(granted),
          string.sub(v, at), handed}
      end
      live = live + 1
      if not soonest or exp < soonest then
        soonest = exp
      end
      if string.sub(field, 1, #owner) == owner then
        same_owner = true
      end
      local ends = exp + tonumber(ld)
      if ends > latest then
        latest = ends
      end
    else
      local ends = exp + tonumber(ld)
      local owned = string.sub(field, 1, #owner) == owner
      -- noted: its expiry is in the history, or goes there in this run (at
      -- most SEEN_MAX a call, and the caller's owner's own always: they
      -- go with the write). Only a noted permit is swept.
      local noted = recorded[field]
      if not noted and (owned or rebuild or not seen or #seen < SEEN_MAX * 6) then
        seen = seen or {}
        seen[#seen + 1] = fence
        seen[#seen + 1] = exp
        seen[#seen + 1] = ld
        seen[#seen + 1] = string.sub(v, at)
        seen[#seen + 1] = acq
        seen[#seen + 1] = field
        noted = true
        -- A rebuild (below) indexes it as written already (or drops it
        -- when its delay is over), in the index it writes anyway.
        recorded[field] = rebuild or nil
      end
      if ends > now and owned then
        -- The caller's owner token let this permit expire: it may come
        -- back at once (ahead of any queue), and coming back ends the
        -- delay its expiry started (the old permit goes with the write).
        returning = true
        stale = stale or {}
        stale[#stale + 1] = field
      elseif ends > now then
        -- Another owner's lock-delay runs: the permit stays until it is over.
        if ends > latest then
          latest = ends
        end
        if not delay_end or ends > delay_end then
          delay_end = ends
        end
      elseif noted and (not stale or #stale < STALE_SWEEP) then
        -- Long expired: swept, at most STALE_SWEEP a call (the rest by
        -- later calls), so that no call's deletes grow with the holders.
        stale = stale or {}
        stale[#stale + 1] = field
      end
    end
  elseif b == 108 then -- 'l'
    l = tonumber(rec[i + 1])
  elseif b == 109 then -- 'm'
    m = rec[i + 1]
  end
end
-- The recorded lock-delays the loop did not read: the caller's owner's
-- may come back (and end), another owner's hold the resource.
for i = 1, delays and #delays or 0, 2 do
  local ends = delays[i + 1]
  if string.sub(delays[i], 1, #owner) == owner then
    returning = true
    stale = stale or {}
    stale[#stale + 1] = delays[i]
  else
    if ends > latest then
      latest = ends
    end
    if not delay_end or ends > delay_end then
      delay_end = ends
    end
  end
end
if delays_top then
  if delays_top > latest then
    latest = delays_top
  end
  if delays_others and (not delay_end or delays_top > delay_end) then
    delay_end = delays_top -- at most this: one of them ends last
  end
end
live = live + extra
if extra_soonest and (not soonest or extra_soonest < soonest) then
  soonest = extra_soonest
end
if extra_latest > latest then
  latest = extra_latest
end
if rebuild then
  -- The index anew from the whole hash: every permit not long expired
  -- (those whose expiry is written go now, all of them, so that the next
  -- call finds few due).
  redis.pcall('DEL', IDX)
  local add, gone = {}, {}
  for i = 1, #rec, 2 do
    if string.byte(rec[i], 1) == 112 then -- 'p'
      local exp, acq, ld, at = string.match(rec[i + 1], '^%d+|(%d+)|(%d+)|%d+|%d+|(%d+)|()')
      if string.byte(rec[i + 1], at) == 30 then
        exp = string.format('%d', capped(rec[i + 1], at, acq, tonumber(exp)))
      end
      if tonumber(exp) + tonumber(ld) > now or not recorded[rec[i]] then
        -- (a long-expired permit whose expiry is not written yet stays,
        -- due: this run or a later one writes it, then sweeps it)
        add[#add + 1] = recorded[rec[i]] and string.format('%d', -(tonumber(exp) + tonumber(ld))) or exp
        add[#add + 1] = rec[i]
        if #add == 200 then
          redis.pcall('ZADD', IDX, unpack(add))
          add = {}
        end
      else
        gone[#gone + 1] = rec[i]
        if #gone == 200 then
          redis.pcall('HDEL', KEYS[1], unpack(gone))
          gone = {}
        end
      end
    end
  end
  if #add > 0 then
    redis.pcall('ZADD', IDX, unpack(add))
  end
  if #gone > 0 then
    redis.pcall('HDEL', KEYS[1], unpack(gone))
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.pcall('PEXPIRE', IDX, pttl)
  end
end
-- The permits of `list` (every `step` items: fence, expiresAt, lock-delay
-- ms, ..., the field last) whose expiries were just written: each scored
-- -(expiresAt + lockDelayMs) in the index, never due again; one whose delay
-- is over too goes now (release.lua keeps the same function).
local function recorded_in(list, step)
  local add, gone = {}, {}
  for i = 1, #list, step do
    local ends = tonumber(list[i + 1]) + tonumber(list[i + 2])
    if ends > now then
      add[#add + 1] = string.format('%d', -ends)
      add[#add + 1] = list[i + step - 1]
    else
      gone[#gone + 1] = list[i + step - 1]
    end
    if #add == 200 or #gone == 100 or i + step > #list then
      if #add > 0 then
        redis.pcall('ZADD', IDX, unpack(add))
      end
      if #gone > 0 then
        redis.pcall('HDEL', KEYS[1], unpack(gone))
        redis.pcall('ZREM', IDX, unpack(gone))
      end
      add, gone = {}, {}
    end
  end
end
-- How long each permit whose expiry this run writes was held (expiresAt -
-- acquiredAt), for the hold-time histogram: appended to every answer below
-- after its own items (see `answer`).
local holds
local function answer(reply)
  for i = 1, holds and #holds or 0 do
    reply[#reply + 1] = holds[i]
  end
  -- Integers only: packed into one string, "<tag> <item> ...", which the
  -- service reads as this array (src/store/redis/reply.rs, `open`): a
  -- reply element costs its client far more than a few digits do.
  local packed = {}
  for i = 1, #reply do
    local n = tonumber(reply[i])
    if not n then
      return reply
    end
    packed[i] = string.format('%d', n)
  end
  return table.concat(packed, ' ')
end
-- No permit for the caller: {tag(0), retry, why}. A waiter not queued yet
-- (enter_as) takes its place at the back of the fair queue first, with its
-- ask when it has one, as queue.lua's 'enter' does (a change to either
-- belongs in both), and says so (why + 4). A refused write leaves no
-- entry: the caller enters with queue.lua then.
local function refused(retry, why)
  if leaving then
    -- The last look of a waiter: its entry and ask go in this run, so no
    -- release grants the attempt after it was told 'contended' (as
    -- queue.lua's 'leave'; the next waiter may go now). why + 8: left.
    local done = redis.pcall('ZREM', KEYS[5], member)
    if type(done) == 'table' and done.err then
      return answer({tag, retry, why})
    end
    redis.pcall('HDEL', KEYS[6], member)
    redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
      string.match(KEYS[1], '{(.*)}$') .. '\t\tqueue')
    return answer({tag, retry, why + 8})
  end
  if not enter_as then
    return answer({tag, retry, why})
  end
  local QUEUE = KEYS[5]
  local ASK = KEYS[6]
  local deadline = now + horizon
  local done = redis.pcall('ZADD', QUEUE, 'NX', secs * 1000000 + micros, enter_as)
  if type(done) == 'table' and done.err then
    return answer({tag, retry, why})
  end
  done = redis.pcall('ZADD', QUEUE, -deadline, '~' .. string.match(enter_as, '^%a:([^:]+):'))
  if type(done) == 'table' and done.err then
    redis.pcall('ZREM', QUEUE, enter_as)
    return answer({tag, retry, why})
  end
  if asks then
    redis.pcall('HSET', ASK, enter_as, ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[4])
  end
  redis.pcall('PEXPIRE', QUEUE, horizon + 1000)
  redis.pcall('PEXPIRE', ASK, horizon + 1000)
  -- Tell acquire the queue exists until this deadline (queue.lua).
  local seq = redis.call('GET', KEYS[2])
  local a, b, c, d = '0', '0', '0', '0'
  if seq then
    local a1, b1, c1, d1 = string.match(seq, '^(%d+):(%d+):(%d+):?(%d*)')
    if a1 then
      a, b, c, d = a1, b1, c1, (d1 ~= '' and d1 or '0')
    end
  end
  if tonumber(d) < deadline then
    local mark = a .. ':' .. b .. ':' .. c .. ':' .. string.format('%d', deadline)
    if seq and redis.call('PTTL', KEYS[2]) > horizon + 1000 then
      done = redis.pcall('SET', KEYS[2], mark, 'KEEPTTL')
    else
      done = redis.pcall('SET', KEYS[2], mark, 'PX', SEQ_TTL)
    end
    if type(done) == 'table' and done.err then
      redis.pcall('ZREM', QUEUE, enter_as)
      redis.pcall('HDEL', ASK, enter_as)
      return answer({tag, retry, why})
    end
  end
  return answer({tag, retry, why + 4})
end
if seen then
  -- The expiries this run read, each written once: 'x' at its expiresAt,
  -- then 'd' when a lock-delay followed. The index remembers them (a
  -- hash record's: `recorded`, above); an entry already among the last 64
  -- is not written again either (a string record read expired twice, an
  -- index a v2 script rebuilt).
  H = H or KEYS[3]
  local recent = redis.call('LRANGE', H, 0, 63)
  local known = {}
  for i = 1, #recent do
    local k, f = string.match(recent[i], '^(%a)|%d+|(%d+)|')
    if k then
      known[(k == 'X' and 'x' or k) .. f] = true
    end
  end
  local seq1 = redis.call('GET', KEYS[2])
  local version = ((seq1 and string.match(seq1, '^%d+:(%d+):')) or '0') .. '.' .. live
  local push = {}
  for i = 1, #seen, 6 do
    local f, exp_at, ld, who = seen[i], string.format('%d', seen[i + 1]), seen[i + 2], seen[i + 3]
    if not known['x' .. f] then
      push[#push + 1] = 'x|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. who
      holds = holds or {}
      holds[#holds + 1] = seen[i + 1] - tonumber(seen[i + 4])
    end
    if ld ~= '0' and not known['d' .. f] then
      push[#push + 1] = 'd|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. ld .. '|' .. who
    end
  end
  -- In slices of 200 (unpack's C stack): a rebuild reads every permit.
  -- Only the newest HMAX: the trim below would drop any older at once.
  local n
  for i = math.max(1, #push - HMAX + 1), #push, 200 do
    n = redis.pcall('LPUSH', H, unpack(push, i, math.min(i + 199, #push)))
  end
  if type(n) == 'number' and n > HMAX then
    redis.pcall('LTRIM', H, 0, HMAX - 1)
  end
  if n then
    redis.pcall('PEXPIRE', H, ARGV[7])
  end
  if hashed and not rebuild then
    recorded_in(seen, 6)
  end
end
if delay_end then
  return refused(delay_end - now, 1)
end
if live > 0 then
  if limit == 1 and l == 1 and mode == 'x' and m == 'x' and same_owner then
    return answer({tag + 3, soonest - now})
  end
  if m ~= mode then
    return refused(soonest - now, 0)
  end
  if mode == 'x' then
    if l ~= limit then
      return answer({tag + 4, l})
    end
    if live >= limit then
      return refused(soonest - now, 0)
    end
  elseif live >= 10000 then
    return refused(soonest - now, 0)
  end
end
-- The sequence: fencing, the change count, watch and queue marks.
local last, changes, watched, queued = 0, 0, 0, 0
local seq = redis.call('GET', KEYS[2])
if seq then
  local a, b, c, d = string.match(seq, '^(%d+):(%d+):(%d+):?(%d*)')
  if a then
    last, changes, watched, queued = tonumber(a), tonumber(b), tonumber(c), tonumber(d) or 0
  end
end
-- Fair queue (only while some instance keeps waiters there): waiters go in
-- the order they entered; a caller without an entry goes only when nobody
-- live waits; an exclusive waiter when fewer live waiters are ahead of it
-- than there are free permits and no shared one; a shared waiter when no
-- exclusive one is ahead. An owner back within its own lock-delay skips it.
local wake_next = false
if queued > now and not returning then
  local QUEUE = KEYS[5]
  local free = (mode == 'x') and (limit - live) or 10000
  local entries = redis.call('ZRANGEBYSCORE', QUEUE, 0, '+inf', 'LIMIT', 0, 64)
  local alive, dead = {}, nil
  local ahead, ahead_x, found, lapse, behind = 0, 0, false, nil, 0
  for i = 1, #entries do
    local e = entries[i]
    if e == member then
      found = true
      behind = #entries - i
      break
    end
    local inst = string.match(e, '^%a:([^:]+):')
    local until_ms = alive[inst]
    if until_ms == nil then
      local s = redis.call('ZSCORE', QUEUE, '~' .. (inst or ''))
      until_ms = s and -tonumber(s) or 0
      alive[inst or ''] = until_ms
    end
    if until_ms > now then
      ahead = ahead + 1
      if string.byte(e, 1) == 120 then
        ahead_x = ahead_x + 1
      end
      if not lapse or until_ms < lapse then
        lapse = until_ms
      end
    else
      dead = dead or {}
      dead[#dead + 1] = e
      if alive[inst or ''] ~= -1 then
        -- The dead instance's heartbeat member goes too (once).
        dead[#dead + 1] = '~' .. (inst or '')
        alive[inst or ''] = -1
      end
    end
  end
  if dead then
    -- At most 64 entries plus as many heartbeat members were read above, so
    -- this unpack is bounded (Lua's C stack holds about 8 000). Their asks
    -- go with them (queue.lua keeps one per entry that asked).
    redis.pcall('ZREM', QUEUE, unpack(dead))
    redis.pcall('HDEL', KEYS[6], unpack(dead))
  end
  if member ~= '' and not found and not redis.call('ZSCORE', QUEUE, member) then
    return refused(1, 3)
  end
  local blocked
  if member ~= '' and not found and mode == 'x' and #entries == 64 then
    -- Queued past the first 64 entries read above. An exclusive waiter of a
    -- counting lease may still go when fewer entries than free permits are
    -- ahead of it (each counted as live: conservative) and none of them is
    -- shared; the entries between 64 and its rank are read only then, so
    -- at most `limit` of them (never more than 10 000).
    -- (Heartbeat members '~<instance>' score below every waiter: they
    -- come first by rank.)
    local beats = redis.call('ZCOUNT', QUEUE, '-inf', '(0')
    local rank = redis.call('ZRANK', QUEUE, member)
    rank = rank and rank - beats
    blocked = true
    if rank and rank < free and ahead_x == ahead then
      local rest = redis.call('ZRANGE', QUEUE, beats + 64, beats + rank - 1)
      blocked = false
      for i = 1, #rest do
        local b = string.byte(rest[i], 1)
        if b == 115 then -- 's': a shared waiter ahead
          blocked = true
          break
        end
      end
      behind = redis.call('ZCARD', QUEUE) - beats - rank - 1
      found = true
    end
  elseif member == '' or not found then
    blocked = ahead > 0 or (member ~= '' and not found)
  elseif mode == 'x' then
    -- (a shared waiter ahead waits for every exclusive permit to go: an
    -- exclusive waiter behind it must not take a free one meanwhile)
    blocked = ahead >= free or ahead > ahead_x
  else
    blocked = ahead_x > 0
  end
  if blocked then
    return refused((lapse or (now + 100)) - now, 2)
  end
  -- Waiters behind this one look again once it holds: the next may go
  -- now (a free permit, a shared turn), and the rest learn the new
  -- holder's expiry rather than sleeping until a heartbeat lapses.
  wake_next = found and behind > 0
end
-- Fencing: strictly increasing per resource, also when the sequence key is
-- gone (evicted, expired, an empty restarted Redis): never below the server
-- clock in microseconds. 2^53 µs is in the year 2255, so the value stays an
-- exact JSON number.
-- Every number turned into text is a sprintf in Lua 5.1: the fence and the
-- clock are cut from TIME's own strings, and the rest go through '%d' (a C
-- long: exact for these integers, and about 2 700 instructions cheaper on
-- Redis' side than '%.0f' or tostring, which format a double).
local us6 = t[2]
if #us6 < 6 then
  us6 = string.sub('00000' .. us6, -6)
end
local fence, fence_text = secs * 1000000 + micros, t[1] .. us6
if last + 1 > fence then
  fence = last + 1
  fence_text = string.format('%d', fence)
end
changes = changes + 1
local changes_text = changes == 1 and '1' or string.format('%d', changes)
local done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. ':'
  .. (watched == 0 and '0' or string.format('%d', watched)) .. ':'
  .. (queued == 0 and '0' or string.format('%d', queued)), 'PX', SEQ_TTL)
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
local now_text = t[1] .. string.sub(us6, 1, 3)
local exp_text = string.format('%d', now + ttl)
if not hashed and limit == 1 and mode == 'x' and delay == 0 then
  -- A plain lease on a free resource (a string record left over can only
  -- hold an expired permit): one SET with its TTL. The fast path at the top
  -- writes the same record and sequence for a caller not queued; a change
  -- to either write belongs in both.
  done = redis.pcall('SET', KEYS[1], mine .. '|' .. fence_text .. '|' .. exp_text .. '|' .. now_text
    .. '|' .. now_text .. '|' .. ARGV[3] .. '|0|' .. ARGV[4], 'PX', ARGV[3])
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  if member ~= '' then
    redis.pcall('ZREM', KEYS[5], member)
    redis.pcall('HDEL', KEYS[6], member)
  end
  H = H or KEYS[3]
  done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.1|' .. ARGV[4])
  if type(done) == 'number' and done > HMAX then
    redis.pcall('LTRIM', H, 0, HMAX - 1)
  end
  redis.pcall('PEXPIRE', H, ARGV[7])
  if watched > now or ARGV[8] ~= '' then
    redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
      string.match(KEYS[1], '{(.*)}$') .. '\t' .. changes_text .. '.1\tacquired')
  end
  if wake_next then
    -- Nobody else can go while this permit lives: the waiters behind only
    -- learn when it ends ("queue\t<ttl ms>": no look needed).
    redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
      string.match(KEYS[1], '{(.*)}$') .. '\t\tqueue\t' .. ARGV[3])
  end
  return answer({tag + 1, fence, now})
end
local value = fence_text .. '|' .. exp_text .. '|' .. now_text
  .. '|' .. now_text .. '|' .. ARGV[3] .. '|' .. delay_text .. '|' .. ARGV[4]
if not hashed and rec then
  -- An expired plain permit in a string record: the hash replaces it.
  redis.pcall('DEL', KEYS[1])
  stale = nil
end
IDX = IDX or KEYS[4]
if not hashed then
  -- A new hash record: no index left over from an evicted one.
  redis.pcall('DEL', IDX)
end
if stale then
  -- In slices: unpack puts every element on Lua's C stack (about 8 000 at
  -- most), and an owner's own expired permits are not capped above.
  for i = 1, #stale, 200 do
    local j = math.min(i + 199, #stale)
    redis.pcall('HDEL', KEYS[1], unpack(stale, i, j))
    redis.pcall('ZREM', IDX, unpack(stale, i, j))
  end
end
if live == 0 and (l ~= limit or m ~= mode) then
  done = redis.pcall('HSET', KEYS[1], mine, value, 'l', limit, 'm', mode)
else
  done = redis.pcall('HSET', KEYS[1], mine, value)
end
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
local ends = now + ttl + delay
if latest > ends then
  ends = latest
end
done = redis.pcall('PEXPIRE', KEYS[1], ends - now)
if type(done) == 'table' and done.err then
  -- A record without a TTL would be a lease for ever: take the permit back.
  if live == 0 and not delay_end then
    redis.pcall('DEL', KEYS[1])
    redis.pcall('DEL', IDX)
  else
    redis.pcall('HDEL', KEYS[1], mine)
  end
  return {tag - 9, done.err}
end
-- The index learns the permit and lives as long as the record.
redis.pcall('ZADD', IDX, exp_text, mine)
redis.pcall('PEXPIRE', IDX, ends - now)
if member ~= '' then
  redis.pcall('ZREM', KEYS[5], member)
  -- Its ask (queue.lua) goes with it: no release grants it again.
  redis.pcall('HDEL', KEYS[6], member)
end
H = H or KEYS[3]
done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.'
  .. (live + 1) .. '|' .. ARGV[4])
if type(done) == 'number' and done > HMAX then
  redis.pcall('LTRIM', H, 0, HMAX - 1)
end
redis.pcall('PEXPIRE', H, ARGV[7])
-- Watchers of this resource (an instance renews "watched until" while it
-- has some) hear of the acquire; nobody pays for the event otherwise. The
-- next queued waiter looks at once when a permit is still free for it.
if watched > now or ARGV[8] ~= '' then
  redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
    string.match(KEYS[1], '{(.*)}$') .. '\t' .. changes_text .. '.' .. (live + 1) .. '\tacquired')
end
if wake_next then
  -- An exclusive permit of a limit of 1: the waiters behind only learn when
  -- it ends (as above); otherwise one may go now, and they look.
  redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
    string.match(KEYS[1], '{(.*)}$') .. '\t\tqueue'
    .. ((limit == 1 and mode == 'x') and ('\t' .. ARGV[3]) or ''))
end
return answer({tag + 1, fence, now})
