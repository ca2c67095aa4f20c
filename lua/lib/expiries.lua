-- lib/expiries.lua: the expiries a record script noticed, written once.
-- A permit that expired is written to the history ('x' at its expiresAt,
-- then 'd' when a lock-delay followed: acquire.lua's header, "History")
-- by the first run that reads it expired, and its score in the expiry
-- index becomes -(expiresAt + lockDelayMs) (`recorded_in`), so that no
-- later run writes it again or reads it as due. Needs the locals `now`,
-- `IDX` (the index key, once the record is a hash) and `HMAX` (the
-- history length); reads KEYS[1] (the record), the same in acquire.lua
-- and release.lua (and, through lib/history.lua, ARGV[7]).
--#include lib/reply.lua
--#include lib/history.lua
-- The permits of `list` (every `step` items: fence, expiresAt, lock-delay
-- ms, ..., the field last) whose expiries were just written: each scored
-- -(expiresAt + lockDelayMs) in the index, never due again; one whose
-- delay is over too goes now.
local function recorded_in(list, step)
  local add, gone = {}, {}
  for i = 1, #list, step do
    local ends = tonumber(list[i + 1]) + tonumber(list[i + 2])
    if ends > now then
      add[#add + 1] = string.format('%d', -ends)
      add[#add + 1] = list[i + step - 1]
    else
      gone[#gone + 1] = list[i + step - 1]
    end
    if #add == 200 or #gone == 100 or i + step > #list then
      if #add > 0 then
        redis.pcall('ZADD', IDX, unpack(add))
      end
      if #gone > 0 then
        redis.pcall('HDEL', KEYS[1], unpack(gone))
        redis.pcall('ZREM', IDX, unpack(gone))
      end
      add, gone = {}, {}
    end
  end
end
-- The expiries of `list` (six items a permit: fence, expiresAt (a
-- number), lock-delay ms, holder slot, acquiredAt, field) into the
-- history list `hist` under `version`: 'x' at its expiresAt, then 'd' when a
-- lock-delay followed. An entry already among the last 64 is not written
-- again (a string record read expired twice, an index a v2 script
-- rebuilt). Each 'x' written adds its hold time to `holds`.
local function write_expiries(hist, list, version)
  local recent = redis.call('LRANGE', hist, 0, 63)
  local known = {}
  for i = 1, #recent do
    local k, f = string.match(recent[i], '^(%a)|%d+|(%d+)|')
    if k then
      known[(k == 'X' and 'x' or k) .. f] = true
    end
  end
  local push = {}
  for i = 1, #list, 6 do
    local f, exp_at, ld, who = list[i], string.format('%d', list[i + 1]), list[i + 2], list[i + 3]
    if not known['x' .. f] then
      push[#push + 1] = 'x|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. who
      holds = holds or {}
      holds[#holds + 1] = list[i + 1] - tonumber(list[i + 4])
    end
    if ld ~= '0' and not known['d' .. f] then
      push[#push + 1] = 'd|' .. exp_at .. '|' .. f .. '|' .. version .. '|' .. ld .. '|' .. who
    end
  end
  -- (a whole read sees every permit: many entries)
  push_history(hist, push)
end
