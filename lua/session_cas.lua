#!lua flags=allow-oom
-- session_cas: a session renew's light path for plain leases (docs/design.md
-- §18): writes each lease's renewed record, built by the service from what
-- session_peek.lua read, where the record is still exactly that one and its
-- permit has not expired; anything else is left to the service, which renews
-- that lease as one of its own (renew.lua answers why). No record is parsed
-- here: comparing two strings and one SET is all a lease costs.
-- allow-oom: as renew.lua (a permit rewritten in place).
-- KEYS[1] record (see acquire.lua): the first lease's; then each further
-- lease's record (one slot each call on a Cluster)
-- ARGV[1] expires at (ms, the session's new expiry)
-- ARGV[2] the first lease's record as read  ARGV[3] its renewed record
-- ARGV[4] its permit's expiry as in the record (ms, 13 digits); then the
-- same three for each further lease, in KEYS order
-- ARGV[#ARGV] nonce; every reply starts with tag(status) = nonce * 16 +
-- status + 9 (see acquire.lua).
-- Returns {tag(1), now, s1, s2, ...}: per lease 1 when renewed, 0 when left
-- to the service. Each write is under redis.pcall; the first one Redis
-- refuses ends the run with {tag(-9), error} and nothing after it is
-- written (those before it stand: each is a complete renew of its own).
--#include lib/time.lua
local tag = tonumber(ARGV[#ARGV]) * 16 + 9
local ttl = tonumber(ARGV[1]) - now
local out = {tag + 1, now}
-- A permit's expiry and the clock are both 13-digit ms: compared as text.
local now_text, px = string.format('%d', now), string.format('%d', ttl)
for i = 1, #KEYS do
  local a = 3 * i - 1
  local status = 0
  if ttl > 0 and ARGV[a + 2] > now_text and redis.pcall('GET', KEYS[i]) == ARGV[a] then
    local done = redis.pcall('SET', KEYS[i], ARGV[a + 1], 'PX', px)
    if type(done) == 'table' and done.err then
      return {tag - 9, done.err}
    end
    status = 1
  end
  out[i + 2] = status
end
return out
