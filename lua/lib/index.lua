-- lib/index.lua: reading a hash record through its expiry index
-- (docs/decisions/storage-v2.md, "The expiry index": the sorted set
-- KEYS[4] of acquire.lua, one member per permit field scored by its
-- expiresAt, or -(expiresAt + lockDelayMs) once its expiry is in the
-- history). Needs the locals `IDX` (the index key), `now` and `recorded`
-- (the fields whose expiry is in the history already).
--#include lib/limits.lua
-- read_due(fields): the permits the index says are due (expired by their
-- score), and the recorded ones whose delay is over (read as due, and
-- marked in `recorded`, so that they are swept without their expiry
-- written again), read from the record KEYS[1] of `fields` fields.
-- Returns {field, value, ...} of those found (a member without its
-- permit leaves the index), the record's HMGET of 'l' and 'm', and
-- whether the index's member count agrees with the hash; nothing when
-- more than INDEX_DUE are due.
local function read_due(fields)
  local due = redis.call('ZRANGEBYSCORE', IDX, 0, now, 'LIMIT', 0, INDEX_DUE + 1)
  if #due > INDEX_DUE then
    return
  end
  local over = redis.call('ZRANGEBYSCORE', IDX, -now, '(0', 'LIMIT', 0, STALE_SWEEP)
  for i = 1, #over do
    recorded[over[i]] = true
    due[#due + 1] = over[i]
  end
  local lm = redis.call('HMGET', KEYS[1], 'l', 'm')
  local part, found = {}, 0
  for i = 1, #due do
    local v = redis.call('HGET', KEYS[1], due[i])
    if v then
      found = found + 1
      part[#part + 1] = due[i]
      part[#part + 1] = v
    else
      redis.pcall('ZREM', IDX, due[i])
    end
  end
  local members = redis.call('ZCARD', IDX) - (#due - found)
  return part, lm, fields - (lm[1] and 1 or 0) - (lm[2] and 1 or 0) == members
end
