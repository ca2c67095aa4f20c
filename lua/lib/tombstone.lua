-- lib/tombstone.lua: not_held(others), the answer of renew.lua and
-- release.lua when the caller's permit is not found (absent, expired or
-- someone else's): {tag(-2), why} while its tombstone in the hash KEYS[3]
-- says why it ended early ('revoked': an operator broke it, break.lua;
-- 'max_hold': renew.lua capped it at its hold bound), until it would
-- have expired; else {tag(-1)} when `live_others` live permits hold the
-- resource, {tag(0)} when none. Needs the locals `tag`, `mine` (the
-- caller's permit field) and `now`.
local function not_held(live_others)
  local tomb = redis.call('HGET', KEYS[3], mine)
  local ends, why = string.match(tomb or '', '^(%d+)|(.*)$')
  if ends and tonumber(ends) > now then
    return {tag - 2, why}
  end
  return {live_others > 0 and tag - 1 or tag}
end
