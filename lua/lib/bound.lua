-- lib/bound.lua: capped(value, at, acq, exp), a permit's end under its
-- hold bound. A bounded permit (label slot "\30<maxHoldMs>|...",
-- docs/decisions/storage-v2.md, "Bounded holds") ends at acquiredAt +
-- maxHoldMs at the latest: a renew through a pod of the previous release,
-- which knows no bound, moves its expiresAt past it, and every script of
-- this release still ends it there. `value` is the permit's value, `at`
-- where its label slot starts (called only when that slot starts with
-- \30), `acq` its acquiredAt (text), `exp` its expiresAt (a number).
local function capped(value, at, acq, exp)
  local bound = tonumber(string.match(value, '^\30(%d+)|', at))
  if bound and tonumber(acq) + bound < exp then
    return tonumber(acq) + bound
  end
  return exp
end
