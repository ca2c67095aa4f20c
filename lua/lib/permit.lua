-- lib/permit.lua: permit(value, all), a permit's value read (acquire.lua's
-- header, "The record": "<fence>|<expiresAt>|<acquiredAt>|<renewedAt>|
-- <ttlMs>|<lockDelayMs>|<holder slot>"). Returns fence, its end (a
-- number), acquiredAt, renewedAt, ttlMs, lockDelayMs (text) and where the
-- holder slot starts in `value`; fence, renewedAt and ttlMs only when
-- `all` (each string captured is made, and collected, by Redis: a renew
-- needs none of them). The end is expiresAt, but a bounded
-- permit (slot "\30<maxHoldMs>|...", docs/decisions/storage-v2.md,
-- "Bounded holds") ends at acquiredAt + maxHoldMs at the latest: a renew
-- through a pod of the previous release, which knows no bound, moves its
-- expiresAt past it, and every script of this release still ends it there.
local function permit(value, all)
  local fence, exp, acq, ren, ttl_ms, ld, at
  if all then
    fence, exp, acq, ren, ttl_ms, ld, at = string.match(value, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  else
    exp, acq, ld, at = string.match(value, '^%d+|(%d+)|(%d+)|%d+|%d+|(%d+)|()')
  end
  exp = tonumber(exp)
  if string.byte(value, at) == 30 then
    local bound = tonumber(string.match(value, '^\30(%d+)|', at))
    if bound and tonumber(acq) + bound < exp then
      exp = tonumber(acq) + bound
    end
  end
  return fence, exp, acq, ren, ttl_ms, ld, at
end
