-- acquire/announce.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/announce.lua`; it reads that script's locals H,
-- HMAX and now). announce(fence_text, now_text, version, watched): what every
-- acquisition writes besides its permit: its history entry 'a' (the list
-- kept at HMAX entries, ARGV[7] ms past its last write) and, while the
-- resource is watched (`watched`: its sequence's "watched until") or its
-- purpose is (ARGV[8]), the event 'acquired'; nobody pays for the event
-- otherwise.
local function announce(fence_text, now_text, version, watched)
  H = H or KEYS[3]
  local n = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. version .. '|' .. ARGV[4])
  if type(n) == 'number' and n > HMAX then
    redis.pcall('LTRIM', H, 0, HMAX - 1)
  end
  redis.pcall('PEXPIRE', H, ARGV[7])
  if watched > now or ARGV[8] ~= '' then
    redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
      string.match(KEYS[1], '{(.*)}$') .. '\t' .. version .. '\tacquired')
  end
end
