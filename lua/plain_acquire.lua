-- plain_acquire: the acquire of a plain lease (limit 1, exclusive, no
-- lock-delay, no wait: acquire.lua's shape '') by a caller not queued,
-- in the fewest Redis calls and arguments; anything else is left to
-- acquire.lua (status 6, below), which the service then runs (lua/README.md,
-- "Slim scripts"). It writes what acquire.lua writes in the same case
-- (record, sequence, history entry 'a', the event of a watched resource),
-- and answers a live plain lease of another owner as acquire.lua does.
-- KEYS[1] record  KEYS[2] sequence  KEYS[3] history (see acquire.lua)
-- ARGV[1] permit field: "p:<owner token>:<operation id>"
-- ARGV[2] ttl ms  ARGV[3] holder label or ''
-- ARGV[4] history length  ARGV[5] history ttl ms
-- ARGV[6] purpose watched: '1' or '' (see acquire.lua)
-- ARGV[7] nonce, given as the tag of status 1 (nonce * 16 + 10): every
-- reply starts with tag(status) = nonce * 16 + status + 9 (see
-- acquire.lua), and the acquired answer starts with this argument as it
-- is, with no number made of it.
-- Returns, packed as acquire.lua packs: "<tag(1)> <fence> <now>" acquired,
-- "<tag(0)> <retry> 0" contended (another owner's live plain lease),
-- {tag(-9), error} Redis refused a write (no permit written), and
-- "<tag(6)>" for anything this script leaves to acquire.lua: a record
-- that is a hash, the caller's own owner's, expired, bounded or marked in
-- its label slot; a queue; holders whose expiry is still to be written.
-- Nothing was written then.
-- Every number made from text (tonumber), every string.format and
-- string.match costs Redis about 1 300, 1 800 and 4 500 instructions a
-- call (callgrind), against some 5 000 a redis.call: only the numbers
-- the path needs are made (docs/perf-log/2026-12-05.md, "night").
local t = redis.call('TIME')
local cur = redis.pcall('GET', KEYS[1])
local us6 = t[2]
if #us6 < 6 then
  us6 = string.sub('00000' .. us6, -6)
end
local now_text = t[1] .. string.sub(us6, 1, 3)
local now = tonumber(now_text)
if cur then
  local tag = tonumber(ARGV[7]) - 1
  if type(cur) == 'string' then
    -- Another owner's live plain lease: contended, retry when it ends.
    local o = string.find(ARGV[1], ':', 3, true)
    local exp, at = string.match(cur, '^p:[^|]*|%d+|(%d+)|%d+|%d+|%d+|0|()')
    local b = at and string.byte(cur, at)
    if exp and not (b and b < 32) and string.sub(cur, 1, o) ~= string.sub(ARGV[1], 1, o) then
      local left = tonumber(exp) - now
      if left > 0 then
        return string.format('%d %d 0', tag, left)
      end
    end
  end
  return string.format('%d', tag + 6)
end
local seq = redis.call('GET', KEYS[2])
local fence_text = t[1] .. us6
local changes_text, watched, marks = '1', 0, ':0:0'
if seq then
  -- When the newest history entry left holders live, Redis dropped their
  -- record since: acquire.lua writes their expiries first.
  local head = redis.call('LINDEX', KEYS[3], 0)
  local left = head and string.match(head, '^%a|%d+|%d+|%d+%.(%d+)|')
  if left and left ~= '0' then
    return string.format('%d', tonumber(ARGV[7]) + 5)
  end
  local a, b, c, d = string.match(seq, '^(%d+):(%d+):(%d+):?(%d*)')
  if a then
    if d ~= '' and d ~= '0' and tonumber(d) > now then
      return string.format('%d', tonumber(ARGV[7]) + 5) -- a queue: acquire.lua decides
    end
    -- Fencing as lib/fence.lua: above the last token and the clock in µs.
    local last = tonumber(a)
    if last >= tonumber(fence_text) then
      fence_text = string.format('%d', last + 1)
    end
    changes_text = string.format('%d', tonumber(b) + 1)
    watched = c == '0' and 0 or tonumber(c)
    marks = ':' .. c .. ':' .. (d == '' and '0' or d)
  end
end
-- The sequence lives as the history, at least this TTL and a minute
-- (acquire.lua's SEQ_TTL). A history age of n digits is at least
-- 10^(n-1) ms: with 6 digits or more, above a minute, and above a TTL
-- below that, with no number made of it (the usual case).
local ttl = tonumber(ARGV[2])
local seq_px
if #ARGV[5] > 5 and ttl < 10 ^ (#ARGV[5] - 1) then
  seq_px = ARGV[5]
else
  local hist_ms = tonumber(ARGV[5])
  seq_px = (ttl > hist_ms and ttl > 60000) and ARGV[2] or (hist_ms > 60000 and ARGV[5] or '60000')
end
local done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. marks, 'PX', seq_px)
if type(done) == 'table' and done.err then
  return {tonumber(ARGV[7]) - 10, done.err}
end
done = redis.pcall('SET', KEYS[1], ARGV[1] .. '|' .. fence_text .. '|' .. string.format('%d', now + ttl)
  .. '|' .. now_text .. '|' .. now_text .. '|' .. ARGV[2] .. '|0|' .. ARGV[3], 'PX', ARGV[2])
if type(done) == 'table' and done.err then
  return {tonumber(ARGV[7]) - 10, done.err}
end
local H = KEYS[3]
done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.1|' .. ARGV[3])
-- (A length of n digits is at least 10^(n-1): no trim below that.)
if type(done) == 'number' and done > 10 ^ (#ARGV[4] - 1) and done > tonumber(ARGV[4]) then
  redis.pcall('LTRIM', H, 0, tonumber(ARGV[4]) - 1)
end
-- The history lives its age past this entry (plain_release.lua counts on it).
redis.pcall('PEXPIRE', H, ARGV[5])
if watched > now or ARGV[6] ~= '' then
  redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
    string.match(KEYS[1], '{(.*)}$') .. '\t' .. changes_text .. '.1\tacquired')
end
-- {tag(1), fence, now}, packed as acquire.lua packs.
return ARGV[7] .. ' ' .. fence_text .. ' ' .. now_text
