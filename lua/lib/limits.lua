-- lib/limits.lua: the bounds on one call's work over a hash record and
-- its expiry index (lib/index.lua), shared by acquire.lua and release.lua.
-- Records of at most SMALL_RECORD fields are read whole: one read costs
-- Redis less than the index's reads. At most INDEX_DUE due permits are
-- read through the index (more: the whole hash is read), and a call
-- deletes at most STALE_SWEEP long-expired permits (the rest go with
-- later calls), so that no call's work grows with the holders. A call
-- writes the expiries of at most SEEN_MAX permits it read expired (the
-- rest stay due for later calls; acquire.lua's own rules, "seen").
local INDEX_DUE, SMALL_RECORD, STALE_SWEEP, SEEN_MAX = 256, 32, 256, 256
