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
--#include lib/time.lua
local tag = tonumber(ARGV[9]) * 16 + 9
local ttl = tonumber(ARGV[3])
-- GET tells a plain record (a string) from a hash (WRONGTYPE) or none.
local cur = redis.pcall('GET', KEYS[1])
local H, HMAX = nil, tonumber(ARGV[6])
-- No record: the sequence is read first (the fast path needs it anyway).
local seq0 = not cur and redis.call('GET', KEYS[2])
-- No record, but a sequence: when the newest history entry left holders
-- live (its version "<changes>.<live>" counts some), their permits ran
-- out since and Redis dropped the record: their expiries are written
-- ('X', acquire/closed.lua) before this acquire's, for every acquire or
-- holder change nothing closed. One LINDEX on the fast path; the rest
-- only then, on the general path. (No sequence: nothing was acquired
-- here for the history's age, at least the last TTL and lock-delay: no
-- history entry is left to close.)
local dropped = false
if seq0 then
  H = KEYS[3]
  local head = redis.call('LINDEX', H, 0)
  local left = head and string.match(head, '^%a|%d+|%d+|%d+%.(%d+)|')
  dropped = left and left ~= '0'
end
--#include acquire/fast.lua
--#include lib/sequence.lua
--#include lib/fence.lua
--#include acquire/announce.lua
--#include acquire/closed.lua
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
--#include lib/permit.lua
--#include acquire/read.lua
--#include acquire/permits.lua
--#include lib/expiries.lua
--#include acquire/publish.lua
--#include acquire/refused.lua
if seen then
  -- The expiries this run read, each written once (lib/expiries.lua);
  -- the index remembers them (a hash record's: `recorded`, above).
  local _, changes_now = sequence(redis.call('GET', KEYS[2]))
  H = H or KEYS[3]
  write_expiries(H, seen, (changes_now or '0') .. '.' .. live)
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
do
  local a, b, c, d = sequence(redis.call('GET', KEYS[2]))
  if a then
    last, changes, watched, queued = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
  end
end
--#include acquire/queue.lua
-- Fencing (lib/fence.lua): above the last token and the clock in µs.
local fence, fence_text, now_text = next_fence(last)
changes = changes + 1
local changes_text = changes == 1 and '1' or string.format('%d', changes)
local done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. ':'
  .. (watched == 0 and '0' or string.format('%d', watched)) .. ':'
  .. (queued == 0 and '0' or string.format('%d', queued)), 'PX', SEQ_TTL)
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
end
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
  announce(fence_text, now_text, changes_text .. '.1', watched)
  if wake_next then
    -- Nobody else can go while this permit lives: the waiters behind only
    -- learn when it ends ("queue\t<ttl ms>": no look needed).
    publish('\t\tqueue\t' .. ARGV[3])
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
-- Watchers of this resource (an instance renews "watched until" while it
-- has some) hear of the acquire. The next queued waiter looks at once
-- when a permit is still free for it.
announce(fence_text, now_text, changes_text .. '.' .. (live + 1), watched)
if wake_next then
  -- An exclusive permit of a limit of 1: the waiters behind only learn when
  -- it ends (as above); otherwise one may go now, and they look.
  publish('\t\tqueue' .. ((limit == 1 and mode == 'x') and ('\t' .. ARGV[3]) or ''))
end
return answer({tag + 1, fence, now})
