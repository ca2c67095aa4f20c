-- lib/time.lua: the server's clock, read once per run. t: TIME's reply
-- (seconds and microseconds, as text); secs, micros: the same as numbers;
-- now: the clock in whole ms (exact as a Lua number), the time every
-- script compares expiries with.
local t = redis.call('TIME')
local secs, micros = tonumber(t[1]), tonumber(t[2])
local now = secs * 1000 + (micros - micros % 1000) / 1000
