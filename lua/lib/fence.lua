-- lib/fence.lua: next_fence(after), the fencing token of a permit written
-- now: strictly increasing per resource (above `after`, the sequence's
-- last token, a number), also when the sequence key is gone (evicted,
-- expired, an empty restarted Redis): never below the server clock in
-- microseconds. 2^53 µs is in the year 2255, so the value stays an exact
-- JSON number. Returns the token, the token as text, and `now` as text.
-- Every number turned into text is a sprintf in Lua 5.1: the token and
-- the clock are cut from TIME's own strings, and the rest go through '%d'
-- (a C long: exact for these integers, and about 2 700 instructions
-- cheaper on Redis' side than '%.0f' or tostring, which format a double).
--#include lib/time.lua
local function next_fence(after)
  local us6 = t[2]
  if #us6 < 6 then
    us6 = string.sub('00000' .. us6, -6)
  end
  local token, token_text = secs * 1000000 + micros, t[1] .. us6
  if after >= token then
    token = after + 1
    token_text = string.format('%d', token)
  end
  return token, token_text, t[1] .. string.sub(us6, 1, 3)
end
