-- lib/prune.lua: prune_ended(T, cutoff, written). Fields "p:..." = "<end
-- ms>|..." of the hash T (the tombstones of break.lua and renew.lua, the
-- grant marks of release.lua) that have ended by `cutoff` (now) go:
-- each write that adds some looks at the next slice of the hash (HSCAN
-- from the cursor kept in its field 'c', 64 + twice the `written`
-- fields), so the hash holds about its live fields, at most twice as
-- many (docs/storage.md).
local function prune_ended(T, cutoff, written)
  -- (pcall: this runs after the write it follows, and must not turn a
  -- write that was applied into an error answer, e.g. under an ACL
  -- written before HSCAN was needed; the next write prunes then)
  local cursor = redis.pcall('HGET', T, 'c')
  cursor = type(cursor) == 'string' and cursor or '0'
  local scan = redis.pcall('HSCAN', T, cursor, 'COUNT', 64 + 2 * written)
  if type(scan) ~= 'table' or scan.err then
    return
  end
  local kv, gone = scan[2], {}
  for i = 1, #kv, 2 do
    local ends = string.byte(kv[i], 1) == 112 and string.match(kv[i + 1], '^(%d+)|')
    if ends and tonumber(ends) <= cutoff then
      gone[#gone + 1] = kv[i]
      if #gone == 200 then -- unpack's C stack (about 8 000)
        redis.pcall('HDEL', T, unpack(gone))
        gone = {}
      end
    end
  end
  if #gone > 0 then
    redis.pcall('HDEL', T, unpack(gone))
  end
  if scan[1] ~= cursor then
    redis.pcall('HSET', T, 'c', scan[1])
  end
end
