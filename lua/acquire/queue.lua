-- acquire/queue.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/queue.lua`; it reads that script's locals): the
-- fair queue's verdict, which returns `refused` when the caller must wait
-- and sets wake_next.
-- Fair queue (only while some instance keeps waiters there): waiters go in
-- the order they entered; a caller without an entry goes only when nobody
-- live waits; an exclusive waiter when fewer live waiters are ahead of it
-- than there are free permits and no shared one; a shared waiter when no
-- exclusive one is ahead. An owner back within its own lock-delay skips it.
local wake_next = false
if queued > now and not returning then
  local QUEUE = KEYS[5]
  local free = (mode == 'x') and (limit - live) or 10000
  local entries = redis.call('ZRANGEBYSCORE', QUEUE, 0, '+inf', 'LIMIT', 0, 64)
  local alive, dead = {}, nil
  local ahead, ahead_x, found, lapse, behind = 0, 0, false, nil, 0
  for i = 1, #entries do
    local e = entries[i]
    if e == member then
      found = true
      behind = #entries - i
      break
    end
    local inst = string.match(e, '^%a:([^:]+):')
    local until_ms = alive[inst]
    if until_ms == nil then
      local s = redis.call('ZSCORE', QUEUE, '~' .. (inst or ''))
      until_ms = s and -tonumber(s) or 0
      alive[inst or ''] = until_ms
    end
    if until_ms > now then
      ahead = ahead + 1
      if string.byte(e, 1) == 120 then
        ahead_x = ahead_x + 1
      end
      if not lapse or until_ms < lapse then
        lapse = until_ms
      end
    else
      dead = dead or {}
      dead[#dead + 1] = e
      if alive[inst or ''] ~= -1 then
        -- The dead instance's heartbeat member goes too (once).
        dead[#dead + 1] = '~' .. (inst or '')
        alive[inst or ''] = -1
      end
    end
  end
  if dead then
    -- At most 64 entries plus as many heartbeat members were read above, so
    -- this unpack is bounded (Lua's C stack holds about 8 000). Their asks
    -- go with them (queue.lua keeps one per entry that asked).
    redis.pcall('ZREM', QUEUE, unpack(dead))
    redis.pcall('HDEL', KEYS[6], unpack(dead))
  end
  if member ~= '' and not found and not redis.call('ZSCORE', QUEUE, member) then
    return refused(1, 3)
  end
  local blocked
  if member ~= '' and not found and mode == 'x' and #entries == 64 then
    -- Queued past the first 64 entries read above. An exclusive waiter of a
    -- counting lease may still go when fewer entries than free permits are
    -- ahead of it (each counted as live: conservative) and none of them is
    -- shared; the entries between 64 and its rank are read only then, so
    -- at most `limit` of them (never more than 10 000).
    -- (Heartbeat members '~<instance>' score below every waiter: they
    -- come first by rank.)
    local beats = redis.call('ZCOUNT', QUEUE, '-inf', '(0')
    local rank = redis.call('ZRANK', QUEUE, member)
    rank = rank and rank - beats
    blocked = true
    if rank and rank < free and ahead_x == ahead then
      local rest = redis.call('ZRANGE', QUEUE, beats + 64, beats + rank - 1)
      blocked = false
      for i = 1, #rest do
        local b = string.byte(rest[i], 1)
        if b == 115 then -- 's': a shared waiter ahead
          blocked = true
          break
        end
      end
      behind = redis.call('ZCARD', QUEUE) - beats - rank - 1
      found = true
    end
  elseif member == '' or not found then
    blocked = ahead > 0 or (member ~= '' and not found)
  elseif mode == 'x' then
    -- (a shared waiter ahead waits for every exclusive permit to go: an
    -- exclusive waiter behind it must not take a free one meanwhile)
    blocked = ahead >= free or ahead > ahead_x
  else
    blocked = ahead_x > 0
  end
  if blocked then
    return refused((lapse or (now + 100)) - now, 2)
  end
  -- Waiters behind this one look again once it holds: the next may go
  -- now (a free permit, a shared turn), and the rest learn the new
  -- holder's expiry rather than sleeping until a heartbeat lapses.
  wake_next = found and behind > 0
end
