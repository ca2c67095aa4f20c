-- lib/queue_until.lua: mark_queue(deadline, beat_ms, seq_ttl), which tells
-- acquire that the fair queue exists until `deadline` (ms, now + the
-- heartbeat horizon `beat_ms`): the sequence key's fourth part, "queue until"
-- (KEYS[2] of acquire.lua and queue.lua), moved forward when it says
-- less; the sequence keeps its TTL when that lasts past the mark (by a
-- second), else (it may be near its end, or new) it lives `seq_ttl` ms.
-- Returns Redis' answer to the write (a table with `err`
-- when refused), or nil when the mark said enough already.
--#include lib/sequence.lua
local function mark_queue(deadline, beat_ms, seq_ttl)
  local seq = redis.call('GET', KEYS[2])
  local a, b, c, d = sequence(seq)
  if not a then
    a, b, c, d = '0', '0', '0', '0'
  end
  if tonumber(d) < deadline then
    local mark = a .. ':' .. b .. ':' .. c .. ':' .. string.format('%d', deadline)
    if seq and redis.call('PTTL', KEYS[2]) > beat_ms + 1000 then
      return redis.pcall('SET', KEYS[2], mark, 'KEEPTTL')
    end
    return redis.pcall('SET', KEYS[2], mark, 'PX', seq_ttl)
  end
end
