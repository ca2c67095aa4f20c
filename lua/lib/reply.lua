-- lib/reply.lua: answer(reply), a record script's reply. `holds`: how
-- long each permit whose expiry this run writes to the history was held
-- (expiresAt - acquiredAt, ms; lib/expiries.lua fills it), for the
-- hold-time histogram (end "expired"), appended to every answer after
-- its own items. An answer of integers only is packed into one string,
-- "<tag> <item> ...", which the service reads as this array
-- (src/store/redis/reply.rs, `open`): a reply element costs its client
-- far more than a few digits do. Any other answer goes as it is.
local holds
local function answer(reply)
  for i = 1, holds and #holds or 0 do
    reply[#reply + 1] = holds[i]
  end
  local packed = {}
  for i = 1, #reply do
    local n = tonumber(reply[i])
    if not n then
      return reply
    end
    packed[i] = string.format('%d', n)
  end
  return table.concat(packed, ' ')
end
