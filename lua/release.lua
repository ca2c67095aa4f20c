-- release: delete the caller's own permit and wake the resource's waiters.
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)
-- ARGV[1] owner token  ARGV[2] operation id
-- ARGV[3] event channel  ARGV[4] resource tag ("<purpose>:<digest>")
-- ARGV[5] mode: '' the caller's release; 'a' the clean-up of an acquisition
--         whose waiter left before hearing of it (docs/design.md §14): the permit
--         goes only if nobody has been told it is held since, i.e. it was
--         never renewed and no replay claimed it (acquire.lua's claim key).
-- ARGV[6] history length  ARGV[7] history ttl ms (see acquire.lua)
-- ARGV[8] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- History (see acquire.lua): 'r' for the released permit, and 'x'/'d' for
-- expired permits this run reads, as acquire.lua writes them.
-- Returns {tag(1), heldMs} released (heldMs = now - the permit's acquiredAt,
-- for the hold-time histogram), {tag(0)} already absent, {tag(-1)} someone
-- else holds it (untouched), {tag(2)} mode 'a' and the permit was claimed
-- or renewed (untouched), {tag(-2), why} already absent and its tombstone
-- (break.lua or renew.lua) says why ('revoked', 'max_hold'), {tag(-9),
-- error} Redis refused. After those items, every answer but a refusal
-- appends the hold time (expiresAt - acquiredAt, ms) of each permit whose
-- expiry this run wrote to the history (as acquire.lua).
-- The event "<tag>\t<version>\treleased" is published before the delete: an
-- ACL that denies the channel refuses the release before anything is deleted
-- (an event without a delete only costs waiters and watchers one look).
-- A release changes no counter: the version "<changes>.<live permits>" moves
-- because the live count falls (and for one change count it only falls). A
-- release never starts a lock-delay: only an expiry does.
local tag = tonumber(ARGV[8]) * 16 + 9
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
-- Only when the caller's permit is not found: its tombstone, if an
-- operator broke it (break.lua), until it would have expired.
local function tombstone()
  local tomb = redis.call('HGET', (string.gsub(KEYS[1], ':lease:v2:{', ':tomb:v2:{', 1)), mine)
  local ends, why = string.match(tomb or '', '^(%d+)|(.*)$')
  if ends and tonumber(ends) > now then
    return why
  end
end
-- A plain lease is a string record "<field>|<value>" (see acquire.lua).
local cur = redis.pcall('GET', KEYS[1])
local rec, IDX
-- extra: other live permits the loop below does not see (counted by the
-- expiry index, see acquire.lua); the whole hash is read only when the
-- index cannot be trusted (more than 256 permits due, or it disagrees with
-- the hash).
local extra = 0
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif type(cur) == 'table' then
  IDX = (string.gsub(KEYS[1], ':lease:v2:{', ':exp:v2:{', 1))
  -- A small record (32 fields at most) is read whole, as acquire.lua does:
  -- one read costs Redis less than the index's reads.
  local fields = redis.call('HLEN', KEYS[1])
  local due = fields > 32 and redis.call('ZRANGEBYSCORE', IDX, '-inf', now, 'LIMIT', 0, 257)
  if due and #due <= 256 then
    local lm = redis.call('HMGET', KEYS[1], 'l', 'm')
    local part, found, has_mine = {}, 0, false
    for i = 1, #due do
      local v = redis.call('HGET', KEYS[1], due[i])
      if v then
        found = found + 1
        part[#part + 1] = due[i]
        part[#part + 1] = v
        has_mine = has_mine or due[i] == mine
      else
        redis.pcall('ZREM', IDX, due[i])
      end
    end
    local members = redis.call('ZCARD', IDX) - (#due - found)
    if fields - (lm[1] and 1 or 0) - (lm[2] and 1 or 0) == members then
      extra = redis.call('ZCOUNT', IDX, '(' .. now, '+inf')
      local own = not has_mine and redis.call('HGET', KEYS[1], mine)
      if own then
        local score = redis.call('ZSCORE', IDX, mine)
        if score and tonumber(score) > now then
          part[#part + 1] = mine
          part[#part + 1] = own
          extra = extra - 1
        else
          extra = nil -- the permit is not where the index says
        end
      end
      if extra then
        rec = part
      end
    end
  end
  if not rec then
    extra = 0
    rec = redis.call('HGETALL', KEYS[1])
  end
else
  local why = tombstone()
  if why then
    return {tag - 2, why}
  end
  return {tag}
end
local held, live, rest, latest, renewed = false, extra, extra, 0, false
-- Long-expired permits (expiry and lock-delay over) go with the release, at
-- most STALE_SWEEP a call, as in acquire.lua.
local STALE_SWEEP = 256
local stale
local acquired_at = now -- the caller's permit's acquiredAt, read below
local own_value -- the caller's permit, for its history entry
local seen -- expired permits read (at most 64): their history entries
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local exp, acq, ren, ld = string.match(rec[i + 1], '^%d+|(%d+)|(%d+)|(%d+)|%d+|(%d+)|')
    exp = tonumber(exp)
    if exp > now then
      live = live + 1
    elseif not seen or #seen < 64 then
      seen = seen or {}
      seen[#seen + 1] = rec[i + 1]
    end
    if field == mine then
      own_value = rec[i + 1]
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
      elseif not stale or #stale < STALE_SWEEP then
        stale = stale or {}
        stale[#stale + 1] = field
      end
    end
  end
end
local H, HMAX = (string.gsub(KEYS[1], ':lease:v2:{', ':hist:v2:{', 1)), tonumber(ARGV[6])
local changes = '0'
local seq = redis.call('GET', KEYS[2])
if seq then
  changes = string.match(seq, '^%d+:(%d+):') or '0'
end
-- Hold times of the expiries written below, appended to the answer (as
-- acquire.lua does).
local holds
local function answer(reply)
  for i = 1, holds and #holds or 0 do
    reply[#reply + 1] = holds[i]
  end
  return reply
end
if seen then
  -- As acquire.lua: each expiry once ('x', then 'd' for a lock-delay).
  local recent = redis.call('LRANGE', H, 0, 63)
  local known = {}
  for i = 1, #recent do
    local k, f = string.match(recent[i], '^(%a)|%d+|(%d+)|')
    if k then
      known[(k == 'X' and 'x' or k) .. f] = true
    end
  end
  local version = changes .. '.' .. (held and live - 1 or live)
  local push = {}
  for i = 1, #seen do
    local f, exp_at, acq, ld, at = string.match(seen[i], '^(%d+)|(%d+)|(%d+)|%d+|%d+|(%d+)|()')
    if not known['x' .. f] then
      push[#push + 1] = 'x|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. string.sub(seen[i], at)
      holds = holds or {}
      holds[#holds + 1] = tonumber(exp_at) - tonumber(acq)
    end
    if ld ~= '0' and not known['d' .. f] then
      push[#push + 1] = 'd|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. ld .. '|' .. string.sub(seen[i], at)
    end
  end
  local n = #push > 0 and redis.pcall('LPUSH', H, unpack(push))
  if type(n) == 'number' and n > HMAX then
    redis.pcall('LTRIM', H, 0, HMAX - 1)
  end
end
if not held then
  local why = tombstone()
  if why then
    return answer({tag - 2, why})
  end
  if live > 0 then
    return answer({tag - 1})
  end
  return answer({tag})
end
if ARGV[5] == 'a' and (renewed
    or redis.call('EXISTS', (string.gsub(KEYS[1], ':lease:v2:{', ':claim:v2:{', 1)) .. ':' .. mine) == 1) then
  return answer({tag + 2})
end
local done = redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. '\t' .. changes .. '.' .. (live - 1) .. '\treleased')
if type(done) == 'table' and done.err then
  return {tag - 9, done.err}
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
local fence, at = string.match(own_value, '^(%d+)|%d+|%d+|%d+|%d+|%d+|()')
done = redis.pcall('LPUSH', H, 'r|' .. string.format('%d', now) .. '|' .. fence .. '|' .. changes .. '.'
  .. (live - 1) .. '|' .. string.sub(own_value, at))
if type(done) == 'number' and done > HMAX then
  redis.pcall('LTRIM', H, 0, HMAX - 1)
end
redis.pcall('PEXPIRE', H, ARGV[7])
return answer({tag + 1, now - acquired_at})
