-- lib/history.lua: push_history(hist, entries), the history list `hist`
-- (acquire.lua's header, "History": newest entry first) given `entries`,
-- oldest first: LPUSHed in slices of 200 (unpack puts every element on
-- Lua's C stack, about 8 000 at most), only the newest HMAX of them (the
-- trim would drop any older at once), the list trimmed to HMAX, and its
-- TTL (ARGV[7] ms, acquire.lua's and release.lua's history ttl) set with
-- the write: a script may return before writing the history again, and
-- a key without a TTL would never go. Needs the local `HMAX`.
local function push_history(hist, entries)
  local n
  for i = math.max(1, #entries - HMAX + 1), #entries, 200 do
    n = redis.pcall('LPUSH', hist, unpack(entries, i, math.min(i + 199, #entries)))
  end
  if type(n) == 'number' and n > HMAX then
    redis.pcall('LTRIM', hist, 0, HMAX - 1)
  end
  if n then
    redis.pcall('PEXPIRE', hist, ARGV[7])
  end
end
