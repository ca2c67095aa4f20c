-- instances: the roster of the instances sharing the store (docs/storage.md,
-- "Keys"): one sorted set, each member "<instance>|<started ms>|<version>"
-- scored with the server time (ms) of that instance's latest beat. Every
-- instance beats every 5 s and removes its member when it stops cleanly.
-- KEYS[1] roster  <ns>:instances:v2:{instances}
-- ARGV[1] op: 'beat' (add or refresh the member), 'leave' (remove it) or
--         'read' (change nothing)
-- ARGV[2] member: "<instance>|<started ms>|<version>" ('' to read)
-- ARGV[3] stale ms: a member whose latest beat is older than this is gone
-- ARGV[4] cap: the most members the roster holds
-- ARGV[5] nonce; every reply starts with tag(status) = nonce * 16 + status + 9
-- (see acquire.lua).
-- Returns {tag(1), now ms, member, beat ms, member, beat ms, ...}: the
-- members that beat within the stale bound (at most cap of them); tag(2)
-- instead of tag(1) when a beat found the roster full (cap live members,
-- this one not among them) and did not add it. A beat or leave first
-- drops the stale members; a beat sets the key to expire `stale ms` after
-- it, so the roster outlives its latest beat by that much and no longer.
local tag = tonumber(ARGV[5]) * 16 + 9
--#include lib/time.lua
local op, member = ARGV[1], ARGV[2]
local stale, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local oldest = string.format('%d', now - stale)
local status = 1
if op ~= 'read' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
  if op == 'beat' then
    if redis.call('ZSCORE', KEYS[1], member) or redis.call('ZCARD', KEYS[1]) < cap then
      redis.call('ZADD', KEYS[1], string.format('%d', now), member)
      redis.call('PEXPIRE', KEYS[1], stale)
    else
      status = 2
    end
  elseif op == 'leave' then
    -- The last member gone, Redis deletes the key.
    redis.call('ZREM', KEYS[1], member)
  end
end
-- (Only commands docs/topologies.md's ACL rules allow.)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], oldest, '+inf', 'WITHSCORES', 'LIMIT', 0, cap)
local out = {tag + status, now}
for i = 1, #live do
  out[#out + 1] = live[i]
end
return out
