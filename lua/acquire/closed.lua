-- acquire/closed.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/closed.lua`; it reads that script's locals): the
-- expiries of holders whose record Redis dropped, when the newest history
-- entry says some were live (`dropped`, read before the fast path, which
-- then leaves the acquire to the general path). Reads H (set then), HMAX,
-- seq0, now.
--#include lib/history.lua
if dropped then
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
  -- (a counting lease may leave up to HMAX open)
  push_history(H, push)
end
