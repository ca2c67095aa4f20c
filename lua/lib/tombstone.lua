-- lib/tombstone.lua: tombstone(), read only when the caller's permit is
-- not found: why it ended early ('revoked': an operator broke it,
-- break.lua; 'max_hold': renew.lua capped it at its hold bound), from its
-- tombstone in the hash KEYS[3] until it would have expired, else nil.
-- Needs the locals `mine` (the caller's permit field) and `now`.
local function tombstone()
  local tomb = redis.call('HGET', KEYS[3], mine)
  local ends, why = string.match(tomb or '', '^(%d+)|(.*)$')
  if ends and tonumber(ends) > now then
    return why
  end
end
