#!lua flags=allow-oom
-- session_renew: a session renew's light path (docs/design.md §18): gives each
-- of a batch of a session's leases the session's new expiry, as renew.lua
-- would with the TTL left, but only where nothing else needs deciding.
-- allow-oom: as renew.lua (a permit rewritten in place).
-- KEYS[1] record  KEYS[2] index (see acquire.lua): the first lease's; then
-- the same two for each further lease of the batch (one slot each call on
-- a Cluster: the service batches per slot)
-- ARGV[1] owner token (the session's secret)  ARGV[2] expires at (ms, the
-- session's new expiry)  ARGV[3] operation ids, "\31"-separated, one per
-- lease in KEYS order
-- ARGV[4] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1), now, s1, s2, ...}: per lease 1 when renewed, 0 when the
-- light path leaves it to renew.lua (gone, expired, someone else's, or a
-- bounded hold: the service then renews it as a lease of its own, which
-- answers why). Each lease is rewritten under redis.pcall; the first write
-- Redis refuses ends the run with {tag(-9), error} and nothing after it is
-- written (those before it stand: each is a complete renew of its own).
--#include lib/time.lua
local tag = tonumber(ARGV[4]) * 16 + 9
local ends = tonumber(ARGV[2])
local ttl = ends - now
local out = {tag + 1, now}
local ends_text, now_text, ttl_text = ARGV[2], string.format('%d', now), string.format('%d', ttl)
local i = 0
for op in string.gmatch(ARGV[3], '[^\31]+') do
  i = i + 1
  local rec, idx = KEYS[2 * i - 1], KEYS[2 * i]
  local mine = 'p:' .. ARGV[1] .. ':' .. op
  local status = 0
  if ttl > 0 then
    local cur = redis.pcall('GET', rec)
    local v, hashed
    if type(cur) == 'string' then
      if string.sub(cur, 1, #mine + 1) == mine .. '|' then
        v = string.sub(cur, #mine + 2)
      end
    elseif type(cur) == 'table' and cur.err then
      -- WRONGTYPE: a counting or shared lease, a hash of permits.
      hashed = true
      v = redis.call('HGET', rec, mine)
    end
    if v then
      local fence, exp, acq, ld, at = string.match(v, '^(%d+)|(%d+)|(%d+)|%d+|%d+|(%d+)|()')
      -- A bounded hold (slot "\30<maxHoldMs>|") is renew.lua's to cap.
      if fence and tonumber(exp) > now and string.byte(v, at) ~= 30 then
        local value = fence .. '|' .. ends_text .. '|' .. acq .. '|' .. now_text .. '|'
          .. ttl_text .. '|' .. ld .. '|' .. string.sub(v, at)
        local done
        if hashed then
          done = redis.pcall('HSET', rec, mine, value)
        else
          done = redis.pcall('SET', rec, mine .. '|' .. value, 'PX', ttl_text)
        end
        if type(done) == 'table' and done.err then
          return {tag - 9, done.err}
        end
        if hashed then
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
        end
        status = 1
      end
    end
  end
  out[#out + 1] = status
end
return out
