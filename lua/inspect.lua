-- inspect: read a resource without changing its permits; never returns an
-- owner token.
-- KEYS[1] record  KEYS[2] sequence (see acquire.lua)
-- ARGV[1] caller's owner token or ''  ARGV[2] operation id or '' (a token
--         alone compares the token only)
-- ARGV[3] watch ms: > 0 when an instance follows this resource; the
--         sequence then says "watched until now + watch ms" (written when
--         less than half of that is left), so acquires and holder changes
--         publish events. Best effort: a refused mark is ignored.
-- ARGV[4] sequence key ttl ms
-- ARGV[5] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(status), changes, live, limit, mode, lock-delay left, held_by,
-- then per shown permit: remaining, fence, acquiredAt, renewedAt, ttlMs,
-- holder, lockDelayMs}: the SHOWN (100) live permits with the lowest fencing tokens (the
-- oldest), in token order; `live` counts them all. A reply stays bounded
-- however many hold a counting lease (a list page reads one per lease).
-- status 0 free (no live permit), 1 held. held_by: 0 not asked, 1 caller,
-- 2 caller other operation (or the caller's token, when no operation was
-- sent), 3 other. The version is "<changes>.<live>".
--#include lib/permit.lua
--#include lib/time.lua
--#include lib/sequence.lua
local tag = tonumber(ARGV[5]) * 16 + 9
local changes, watched = 0, 0
local a, b, c, d = sequence(redis.call('GET', KEYS[2]))
if a then
  changes, watched = tonumber(b), tonumber(c)
end
local watch = tonumber(ARGV[3])
if watch > 0 and watched < now + watch / 2 then
  local mark = string.format('%d', now + watch)
  -- Kept at least past the mark (the sequence may be near its end).
  if a and redis.call('PTTL', KEYS[2]) > watch then
    redis.pcall('SET', KEYS[2], a .. ':' .. b .. ':' .. mark .. ':' .. d, 'KEEPTTL')
  elseif a then
    redis.pcall('SET', KEYS[2], a .. ':' .. b .. ':' .. mark .. ':' .. d, 'PX', ARGV[4])
  else
    redis.pcall('SET', KEYS[2], '0:0:' .. mark .. ':0', 'PX', ARGV[4])
  end
end
-- A plain lease is a string record "<field>|<value>" (see acquire.lua).
local cur = redis.pcall('GET', KEYS[1])
local rec
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif type(cur) == 'table' then
  rec = redis.call('HGETALL', KEYS[1])
else
  rec = {}
end
local l, m, live, delay, held_by = 1, 'x', 0, 0, 0
-- The shown permits, kept sorted by fence: {fence, permit value} pairs.
local SHOWN = 100
local shown = {}
local caller = ARGV[1] ~= '' and ('p:' .. ARGV[1] .. ':') or nil
for i = 1, #rec, 2 do
  local field = rec[i]
  local byte = string.byte(field, 1)
  if byte == 112 then -- 'p'
    local v = rec[i + 1]
    local fence, exp, acq, ren, ttl, ld, at = permit(v, true)
    if exp > now then
      live = live + 1
      fence = tonumber(fence)
      local n = #shown
      if n < SHOWN or fence < shown[n][1] then
        -- Insert in fence order; past SHOWN the highest drops out.
        local j = n
        while j > 0 and shown[j][1] > fence do
          shown[j + 1] = shown[j]
          j = j - 1
        end
        shown[j + 1] = {fence, exp - now, tonumber(acq), tonumber(ren), tonumber(ttl), string.sub(v, at), tonumber(ld)}
        if n + 1 > SHOWN then
          shown[n + 1] = nil
        end
      end
      if caller then
        if ARGV[2] ~= '' and field == caller .. ARGV[2] then
          held_by = 1
        elseif held_by ~= 1 and string.sub(field, 1, #caller) == caller then
          held_by = 2
        end
      end
    elseif exp + tonumber(ld) > now and exp + tonumber(ld) - now > delay then
      delay = exp + tonumber(ld) - now
    end
  elseif byte == 108 then -- 'l'
    l = tonumber(rec[i + 1])
  elseif byte == 109 then -- 'm'
    m = rec[i + 1]
  end
end
if caller and held_by == 0 and live > 0 then
  held_by = 3
end
if live == 0 then
  return {tag, changes, 0, 1, 'x', delay, 0}
end
local reply = {tag + 1, changes, live, l, m, delay, held_by}
for i = 1, #shown do
  local p = shown[i]
  reply[#reply + 1] = p[2]
  reply[#reply + 1] = p[1]
  reply[#reply + 1] = p[3]
  reply[#reply + 1] = p[4]
  reply[#reply + 1] = p[5]
  reply[#reply + 1] = p[6]
  reply[#reply + 1] = p[7]
end
return reply
