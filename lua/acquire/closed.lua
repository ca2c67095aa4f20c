-- acquire/closed.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/closed.lua`; it reads that script's locals): the
-- expiries of holders whose record Redis dropped, written when the
-- record is gone and the sequence says some were live. Reads seq0, now,
-- HMAX; sets H when it reads the history.
if seq0 then
  -- No record, but a sequence: when the newest history entry left holders
  -- live (its version "<changes>.<live>" counts some), their permits ran
  -- out since and Redis dropped the record: their expiries are written now
  -- ('X'), for every acquire or holder change nothing closed. One LINDEX
  -- on the fast path; the rest only then. (No sequence: nothing was
  -- acquired here for 7 days, so no holder is left to close.)
  H = KEYS[3]
  local head = redis.call('LINDEX', H, 0)
  local left = head and string.match(head, '^%a|%d+|%d+|%d+%.(%d+)|')
  if left and left ~= '0' then
    local all = redis.call('LRANGE', H, 0, -1)
    local open, order = {}, {}
    for i = #all, 1, -1 do
      local k, f, at = string.match(all[i], '^(%a)|%d+|(%d+)|[^|]*|()')
      if k == 'a' or k == 'h' then
        if not open[f] then
          order[#order + 1] = f
        end
        open[f] = string.sub(all[i], at)
      elseif k and k ~= 'd' then
        open[f] = false
      end
    end
    local _, changes0 = sequence(seq0)
    local version = (changes0 or '0') .. '.0'
    local at_text = string.format('%d', now)
    local push = {}
    for i = 1, #order do
      if open[order[i]] then
        push[#push + 1] = 'X|' .. at_text .. '|' .. order[i] .. '|' .. version .. '|' .. open[order[i]]
        open[order[i]] = false
      end
    end
    -- In slices of 200: unpack puts every element on Lua's C stack (about
    -- 8 000 at most), and a counting lease may leave up to HMAX open.
    local n
    for i = 1, #push, 200 do
      n = redis.pcall('LPUSH', H, unpack(push, i, math.min(i + 199, #push)))
    end
    if type(n) == 'number' and n > HMAX then
      redis.pcall('LTRIM', H, 0, HMAX - 1)
    end
    -- Every path below may return before writing the history again: the
    -- TTL is set here, with the write (a key without one would never go).
    if n then
      redis.pcall('PEXPIRE', H, ARGV[7])
    end
  end
end
