-- plain_release: the caller's release of its own live plain lease (a
-- string record, see acquire.lua) while nobody queues for it, in the
-- fewest Redis calls and arguments; anything else is left to release.lua
-- (status 6, below), which the service then runs (lua/README.md, "Slim
-- scripts"). It writes what release.lua writes in the same case: the
-- event 'released' first (an ACL that denies the channel refuses the
-- release before anything is deleted), the record deleted, the history
-- entry 'r'.
-- KEYS[1] record  KEYS[2] sequence  KEYS[3] history (see acquire.lua)
-- ARGV[1] permit field: "p:<owner token>:<operation id>"
-- ARGV[2] event channel  ARGV[3] resource tag ("<purpose>:<digest>")
-- ARGV[4] history length  ARGV[5] history ttl ms (see acquire.lua)
-- ARGV[6] nonce, given as the tag of status 1 (nonce * 16 + 10; see
-- plain_acquire.lua).
-- Returns "<tag(1)> <heldMs>" released (packed as release.lua packs),
-- {tag(-9), error} Redis refused, "<tag(6)>" for anything left to
-- release.lua: no record, a hash, another permit's, expired, bounded or
-- marked in its label slot, or a queue (its hand-off). Nothing was
-- written then.
-- The history's TTL is set again only when due: every acquire sets it
-- to the history's age (plain_acquire.lua, acquire.lua), so it is set
-- here only when the permit was acquired more than half that age ago (or
-- the list is new): the history lives at least half its age past the
-- entry 'r' (docs/storage.md).
local t = redis.call('TIME')
local cur = redis.pcall('GET', KEYS[1])
local n = #ARGV[1]
if type(cur) ~= 'string' or string.byte(cur, n + 1) ~= 124 or string.sub(cur, 1, n) ~= ARGV[1] then
  return string.format('%d', tonumber(ARGV[6]) + 5)
end
local fence, exp, acq, at = string.match(cur, '^(%d+)|(%d+)|(%d+)|%d+|%d+|0|()', n + 2)
local b = at and string.byte(cur, at)
local us = t[2]
if #us < 6 then
  us = string.sub('00000' .. us, -6)
end
local now_text = t[1] .. string.sub(us, 1, 3)
local now = tonumber(now_text)
if not fence or (b and b < 32) or tonumber(exp) <= now then
  return string.format('%d', tonumber(ARGV[6]) + 5)
end
local seq = redis.call('GET', KEYS[2])
local changes = '0'
if seq then
  local a, c = string.match(seq, '^%d+:(%d+):%d+:?(%d*)')
  if a then
    if c ~= '' and c ~= '0' and tonumber(c) > now then
      return string.format('%d', tonumber(ARGV[6]) + 5) -- a queue: release.lua hands off
    end
    changes = a
  end
end
local done = redis.pcall('PUBLISH', ARGV[2], ARGV[3] .. '\t' .. changes .. '.0\treleased')
if type(done) == 'table' and done.err then
  return {tonumber(ARGV[6]) - 10, done.err}
end
done = redis.pcall('DEL', KEYS[1])
if type(done) == 'table' and done.err then
  return {tonumber(ARGV[6]) - 10, done.err}
end
local H = KEYS[3]
done = redis.pcall('LPUSH', H, 'r|' .. now_text .. '|' .. fence .. '|' .. changes .. '.0|' .. string.sub(cur, at))
local held = now - tonumber(acq)
-- A bound of n digits is at least 10^(n-1): below that, no number is
-- made of it (the list's length against the entries kept, the hold
-- against half the history's age).
if type(done) == 'number' then
  if done > 10 ^ (#ARGV[4] - 1) and done > tonumber(ARGV[4]) then
    redis.pcall('LTRIM', H, 0, tonumber(ARGV[4]) - 1)
  end
  if done == 1 or (held * 2 >= 10 ^ (#ARGV[5] - 1) and held * 2 > tonumber(ARGV[5])) then
    redis.pcall('PEXPIRE', H, ARGV[5])
  end
end
return ARGV[6] .. ' ' .. string.format('%d', held)
