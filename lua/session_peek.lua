-- session_peek: the records of a batch of a session's leases as they are
-- (docs/design.md §18), for a session renew: the service builds each plain
-- lease's renewed record from its record and session_cas.lua writes it
-- where the record is still the one read here. Reads only.
-- KEYS[1] record (see acquire.lua): the first lease's; then each further
-- lease's record (one slot each call on a Cluster: the service batches per
-- slot)
-- ARGV[1] nonce; every reply starts with tag(status) = nonce * 16 +
-- status + 9 (see acquire.lua).
-- Returns {tag(1), r1, r2, ...}: per record its value, or false where it
-- holds no string (gone, or a hash of permits).
-- GET by GET, not MGET: the ACL the docs give (docs/topologies.md) has no
-- MGET, and a deployment that follows it must not lose session renews.
local got = {tonumber(ARGV[1]) * 16 + 10}
for i = 1, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) ~= 'string' then
    v = false
  end
  got[i + 1] = v
end
return got
