#!lua flags=allow-oom
-- session: a session's record and its set of attached leases (docs/design.md
-- §18, docs/storage.md "Keys"), both in the session's own slot; no lease key
-- is read here (a session's leases live in many slots: the service renews
-- them with session_renew.lua, per slot).
-- KEYS[1] record  <ns>:session:v2:{<id>}, a hash: o = the operation id of
--   the attempt that made it, h = holder label ('' none), t = ttl ms of the
--   last renewal, c = created at, r = renewed at, e = expires at (ms), x = '1'
--   once ended
-- KEYS[2] leases  <ns>:sessleases:v2:{<id>}, a sorted set: member
--   "<purpose>\31<digest>\31<operation id>" scored by when it was attached
-- allow-oom: a full Redis must not stop a session's renew or end (its
-- leases' own renews and releases are served full, README "full Redis");
-- a record and a list member are a few hundred bytes.
-- ARGV[1] op: 'create', 'renew', 'attach', 'detach', 'end', 'get', 'page'
--   or 'forget' (delete the set of leases, once ended ones are released)
-- ARGV[2] operation id (create), member (attach, detach) or offset (page)
-- ARGV[3] ttl ms (create, renew; '' on a renew: the session's own), the most
--   leases (attach) or page size (page)
-- ARGV[4] holder label (create; '' none)
-- ARGV[5] keep ms: how long a session's record outlives its end or expiry,
--   so that a late caller hears why it is gone (at most an hour; '' on a
--   renew: its TTL, at least a minute, at most an hour)
-- ARGV[6] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(status), now, o, h, t, c, r, e, leases} for statuses 1 (live;
-- after the op), 2 (create found the same operation's session: a replay), 0
-- (attach found the session full); {tag(3)} create found another
-- operation's live session; {tag(4)} ended; {tag(5)} expired; {tag(6)} no
-- record. 'page' returns {tag(1), now, member, ...} (any state); 'detach'
-- and 'forget' {tag(1), now}. Writes come after the checks and are refused
-- as a whole (status -9) when Redis refuses the first.
local tag = tonumber(ARGV[6]) * 16 + 9
--#include lib/time.lua
local R, L = KEYS[1], KEYS[2]
local op = ARGV[1]
local keep = tonumber(ARGV[5])
if op == 'page' then
  local from = tonumber(ARGV[2])
  local got = redis.call('ZRANGE', L, from, from + tonumber(ARGV[3]) - 1)
  local out = {tag + 1, now}
  for i = 1, #got do
    out[#out + 1] = got[i]
  end
  return out
end
if op == 'detach' then
  local done = redis.pcall('ZREM', L, ARGV[2])
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  return {tag + 1, now}
end
if op == 'forget' then
  redis.call('DEL', L)
  return {tag + 1, now}
end
local f = redis.call('HGETALL', R)
local rec = {}
for i = 1, #f, 2 do
  rec[f[i]] = f[i + 1]
end
local function answer(status)
  return {tag + status, now, rec.o, rec.h, rec.t, rec.c, rec.r, rec.e,
    redis.call('ZCARD', L)}
end
-- The record lives `keep` past its end, and the set of leases with it.
local function expire(until_ms)
  local left = until_ms + keep - now
  redis.call('PEXPIRE', R, left)
  if redis.call('EXISTS', L) == 1 then
    redis.call('PEXPIRE', L, left)
  end
end
if not rec.e then
  if op ~= 'create' then
    return {tag + 6}
  end
  local ttl = tonumber(ARGV[3])
  local n = string.format('%d', now)
  local e = string.format('%d', now + ttl)
  local done = redis.pcall('HSET', R, 'o', ARGV[2], 'h', ARGV[4], 't', ARGV[3],
    'c', n, 'r', n, 'e', e)
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  rec = {o = ARGV[2], h = ARGV[4], t = ARGV[3], c = n, r = n, e = e}
  expire(now + ttl)
  return answer(1)
end
if rec.x == '1' then
  return {tag + 4}
end
local e = tonumber(rec.e)
if e <= now then
  return {tag + 5}
end
if op == 'create' then
  if rec.o == ARGV[2] then
    return answer(2)
  end
  return {tag + 3}
elseif op == 'renew' then
  local ttl_text = ARGV[3] ~= '' and ARGV[3] or rec.t
  local ttl = tonumber(ttl_text)
  keep = keep or math.min(math.max(ttl, 60000), 3600000)
  rec.t, rec.r, rec.e = ttl_text, string.format('%d', now), string.format('%d', now + ttl)
  local done = redis.pcall('HSET', R, 't', rec.t, 'r', rec.r, 'e', rec.e)
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  expire(now + ttl)
elseif op == 'attach' then
  if not redis.call('ZSCORE', L, ARGV[2]) and redis.call('ZCARD', L) >= tonumber(ARGV[3]) then
    return answer(0)
  end
  local done = redis.pcall('ZADD', L, string.format('%d', now), ARGV[2])
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  redis.call('PEXPIRE', L, redis.call('PTTL', R))
elseif op == 'end' then
  local done = redis.pcall('HSET', R, 'x', '1')
  if type(done) == 'table' and done.err then
    return {tag - 9, done.err}
  end
  expire(now)
end
return answer(1)
