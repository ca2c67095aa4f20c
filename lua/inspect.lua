-- inspect: read a lease without changing it; never returns the holder's token.
-- KEYS[1] lease key   ARGV[1] caller's owner token or ''  ARGV[2] operation id or ''
-- ARGV[3] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(0)} free, or {tag(1), pttl, fencing token, held_by} where
-- held_by is 0 not asked (no attempt sent), 1 caller, 2 caller other
-- operation, 3 other.
local tag = tonumber(ARGV[3]) * 16 + 9
local current = redis.call('GET', KEYS[1])
if not current then
  return {tag}
end
local pttl = redis.call('PTTL', KEYS[1])
local cut = string.find(current, ':[^:]*$')
local holder = string.sub(current, 1, cut - 1)
local fence = tonumber(string.sub(current, cut + 1))
local held_by = 0
if ARGV[1] ~= '' then
  if holder == ARGV[1] .. ':' .. ARGV[2] then
    held_by = 1
  elseif string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
    held_by = 2
  else
    held_by = 3
  end
end
return {tag + 1, pttl, fence, held_by}
