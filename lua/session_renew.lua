#!lua flags=allow-oom
-- session_renew: a session renew's light path (docs/design.md §18): gives each
-- of a batch of a session's leases the session's new expiry, as renew.lua
-- would with the TTL left, but only where nothing else needs deciding.
-- allow-oom: as renew.lua (a permit rewritten in place).
-- KEYS: for each lease of the batch in turn, its record (see acquire.lua)
-- and, unless the service remembers the record (below), its index (one
-- slot each call on a Cluster: the service batches per slot)
-- ARGV[1] owner token (the session's secret)  ARGV[2] expires at (ms, the
-- session's new expiry)  ARGV[3] fresh until (ms): every record the
-- service remembers below expires after it (0: it remembers none)
-- ARGV[4], ARGV[5] for the first lease, the next two for the next, and so
-- on: the record the service last saw written and the one to write in its
-- place (docs/sessions.md, "What a session renew costs Redis": the new
-- expiry, renewedAt the session's renewal, the session's TTL), sent only
-- when it is this owner's permit for the lease's operation id; or, where
-- it remembers none, the operation id and an empty string
-- ARGV[#ARGV] nonce; every reply starts with tag(status) = nonce * 16 +
-- status + 9 (see acquire.lua).
-- Returns {tag(1), now, s1, s2, ...}: per lease 1 when renewed as
-- remembered or a counting or shared lease's permit renewed, the record
-- written when a plain lease is renewed otherwise (for the service to
-- remember), 0 when the light path leaves it to renew.lua (gone, expired,
-- someone else's, a bounded hold, or a remembered record become a hash:
-- the service then renews it as a lease of its own, which answers why).
-- Each lease is rewritten under redis.pcall; the first write Redis refuses
-- ends the run with {tag(-9), error} and nothing after it is written
-- (those before it stand: each is a complete renew of its own).
--#include lib/time.lua
local last = #ARGV
local tag = tonumber(ARGV[last]) * 16 + 9
local fresh = now < tonumber(ARGV[3])
local ends = tonumber(ARGV[2])
local ttl = ends - now
local out = {tag + 1, now}
local ends_text, now_text, ttl_text = ARGV[2], string.format('%d', now), string.format('%d', ttl)
-- Each key and argument a run is given costs Redis about 2 200
-- instructions, each string it makes (a piece, a concatenation) 1 000 to
-- 3 000, a call 6 000 and more: a remembered record is compared whole (Lua
-- keeps one copy of each text, so a compare is one pointer's) and its
-- successor written as given; any other plain lease's record is checked
-- and rewritten with plain finds (which answer positions) and three pieces
-- of itself (docs/performance.md, "Sessions").
local pre = 'p:' .. ARGV[1] .. ':'
local np = #pre
local k = 0
for i = 1, (last - 4) / 2 do
  local seen, new = ARGV[2 * i + 2], ARGV[2 * i + 3]
  k = k + 1
  local rec, idx = KEYS[k], nil
  if new == '' then
    k = k + 1
    idx = KEYS[k]
  end
  local status = 0
  if ttl > 0 then
    local cur = redis.pcall('GET', rec)
    if new ~= '' and fresh and cur == seen then
      local done = redis.pcall('SET', rec, new, 'PX', ttl_text)
      if type(done) == 'table' and done.err then
        return {tag - 9, done.err}
      end
      status = 1
    else
      -- "p:<token>:<op>|fence|exp|acq|renewed|ttl|ld|slot" (acquire.lua);
      -- an operation id has no "|".
      local op = seen
      if new ~= '' then
        op = string.sub(seen, np + 1, (string.find(seen, '|', np + 1, true) or 0) - 1)
      end
      if type(cur) == 'string' then
        local n = np + #op
        if string.byte(cur, n + 1) == 124 and string.find(cur, pre, 1, true) == 1
            and string.find(cur, op, np + 1, true) == np + 1 then
          local b = string.find(cur, '|', n + 2, true)
          local c = b and string.find(cur, '|', b + 1, true)
          local d = c and string.find(cur, '|', c + 1, true)
          local e = d and string.find(cur, '|', d + 1, true)
          local f = e and string.find(cur, '|', e + 1, true)
          local g = f and string.find(cur, '|', f + 1, true)
          local exp = g and tonumber(string.sub(cur, b + 1, c - 1))
          -- A bounded hold (slot "\30<maxHoldMs>|") is renew.lua's to cap.
          if exp and exp > now and string.byte(cur, g + 1) ~= 30 then
            local written = string.sub(cur, 1, b) .. ends_text .. string.sub(cur, c, d)
              .. now_text .. '|' .. ttl_text .. string.sub(cur, f)
            local done = redis.pcall('SET', rec, written, 'PX', ttl_text)
            if type(done) == 'table' and done.err then
              return {tag - 9, done.err}
            end
            status = written
          end
        end
      elseif type(cur) == 'table' and cur.err and idx then
        -- WRONGTYPE: a counting or shared lease, a hash of permits (never
        -- remembered; a remembered key become a hash comes without its
        -- index and is left to renew.lua).
        local mine = pre .. op
        local v = redis.call('HGET', rec, mine)
        local fence, exp, acq, ld, at
        if v then
          fence, exp, acq, ld, at = string.match(v, '^(%d+)|(%d+)|(%d+)|%d+|%d+|(%d+)|()')
        end
        if fence and tonumber(exp) > now and string.byte(v, at) ~= 30 then
          local value = fence .. '|' .. ends_text .. '|' .. acq .. '|' .. now_text .. '|'
            .. ttl_text .. '|' .. ld .. '|' .. string.sub(v, at)
          local done = redis.pcall('HSET', rec, mine, value)
          if type(done) == 'table' and done.err then
            return {tag - 9, done.err}
          end
          -- As renew.lua: the record and its index live past the permit
          -- and its lock-delay; the index learns the new expiry.
          local left = ttl + tonumber(ld)
          local extend = redis.call('PTTL', rec) < left
          if extend then
            redis.pcall('PEXPIRE', rec, left)
          end
          local added = redis.pcall('ZADD', idx, ends_text, mine)
          if extend then
            redis.pcall('PEXPIRE', idx, left)
          elseif added == 1 then
            redis.pcall('PEXPIRE', idx, redis.call('PTTL', rec))
          end
          status = 1
        end
      end
    end
  end
  out[#out + 1] = status
end
return out
