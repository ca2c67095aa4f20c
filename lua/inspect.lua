-- inspect: read a lease without changing it; never returns an owner token.
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
-- Returns {tag(0), changes} free, or
-- {tag(1), changes, remaining, fence, held_by, acquiredAt, renewedAt, ttlMs, holder}
-- where held_by is 0 not asked, 1 caller, 2 caller other operation (or the
-- caller's token, when no operation was sent), 3 other. The version is
-- "<changes>.<live permits>".
local tag = tonumber(ARGV[5]) * 16 + 9
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local changes, watched = 0, 0
local seq = redis.call('GET', KEYS[2])
local a, b, c
if seq then
  a, b, c = string.match(seq, '^(%d+):(%d+):(%d+)$')
  if a then
    changes, watched = tonumber(b), tonumber(c)
  end
end
local watch = tonumber(ARGV[3])
if watch > 0 and watched < now + watch / 2 then
  local mark = string.format('%.0f', now + watch)
  if a then
    redis.pcall('SET', KEYS[2], a .. ':' .. b .. ':' .. mark, 'KEEPTTL')
  else
    redis.pcall('SET', KEYS[2], '0:0:' .. mark, 'PX', ARGV[4])
  end
end
local rec = redis.call('HGETALL', KEYS[1])
for i = 1, #rec, 2 do
  local field = rec[i]
  if string.byte(field, 1) == 112 then -- 'p'
    local v = rec[i + 1]
    local fence, exp, acq, ren, ttl, at = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|%d+|()')
    exp = tonumber(exp)
    if exp > now then
      local held_by = 0
      if ARGV[1] ~= '' then
        if ARGV[2] ~= '' and field == 'p:' .. ARGV[1] .. ':' .. ARGV[2] then
          held_by = 1
        elseif string.sub(field, 1, #ARGV[1] + 3) == 'p:' .. ARGV[1] .. ':' then
          held_by = 2
        else
          held_by = 3
        end
      end
      return {tag + 1, changes, exp - now, tonumber(fence), held_by, tonumber(acq),
        tonumber(ren), tonumber(ttl), string.sub(v, at)}
    end
  end
end
return {tag, changes}
