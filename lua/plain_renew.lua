#!lua flags=allow-oom
-- plain_renew: the renew of the caller's own live plain lease (a string
-- record, see acquire.lua) that keeps its label, in the fewest Redis
-- calls and arguments; anything else is left to renew.lua (status 6,
-- below), which the service then runs (lua/README.md, "Slim scripts").
-- It writes what renew.lua writes in the same case: the record, with its
-- new expiresAt, renewedAt and TTL, in one SET with that TTL.
-- allow-oom: as renew.lua.
-- KEYS[1] record (see acquire.lua)
-- ARGV[1] permit field: "p:<owner token>:<operation id>"
-- ARGV[2] ttl ms
-- ARGV[3] nonce, given as the tag of status 1 (nonce * 16 + 10; see
-- plain_acquire.lua).
-- Returns {"<tag(1)> <fence> <acquiredAt> <now> <ttl granted>", holder
-- slot} renewed (renew.lua's answer, its integers packed as acquire.lua
-- packs them, the slot after them), {tag(-9), error} Redis refused,
-- "<tag(6)>" for
-- anything left to renew.lua: no record, a hash, another permit's,
-- expired, or a hold bound or another mark in its label slot. Nothing was
-- written then.
local t = redis.call('TIME')
local cur = redis.pcall('GET', KEYS[1])
local n = #ARGV[1]
if type(cur) ~= 'string' or string.byte(cur, n + 1) ~= 124 or string.sub(cur, 1, n) ~= ARGV[1] then
  return string.format('%d', tonumber(ARGV[3]) + 5)
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
  return string.format('%d', tonumber(ARGV[3]) + 5)
end
local holder = string.sub(cur, at)
local ttl = tonumber(ARGV[2])
local done = redis.pcall('SET', KEYS[1], ARGV[1] .. '|' .. fence .. '|' .. string.format('%d', now + ttl)
  .. '|' .. acq .. '|' .. now_text .. '|' .. ARGV[2] .. '|0|' .. holder, 'PX', ARGV[2])
if type(done) == 'table' and done.err then
  return {tonumber(ARGV[3]) - 10, done.err}
end
-- {tag(1), fence, acquiredAt, now, ttl granted} packed, then the holder
-- slot: no number made of text for the answer.
return {ARGV[3] .. ' ' .. fence .. ' ' .. acq .. ' ' .. now_text .. ' ' .. ARGV[2], holder}
