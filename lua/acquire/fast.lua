-- acquire/fast.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/fast.lua`; it reads that script's locals): the fast
-- path, which returns when it acquires. Reads cur, seq0, dropped, ttl,
-- tag, H, HMAX, t, secs, micros, now.
if not cur and not dropped and (ARGV[5] == '' or string.byte(ARGV[5], 1) == 43) then -- '+'
  -- The fast path: a plain lease asked for a free resource that nobody
  -- queues for. It writes what the general path below writes in that case,
  -- in the fewest Lua steps: on the uncontended acquire every bytecode and
  -- every new string is paid by Redis per call (docs/decisions/storage-v2.md).
  -- So it calls no helper: each `local function` spliced before it would
  -- be a closure made (and collected) on every acquire, about 1 000 to
  -- 2 000 Redis instructions each (measured, lua/README.md). It reads the
  -- sequence as lib/sequence.lua does, takes the token as lib/fence.lua
  -- does and writes the entry and the event as acquire/announce.lua does:
  -- a change to those belongs here too.
  local seq = seq0
  local last, changes, watched, marks = 0, 0, 0, ':0:0'
  if seq then
    local a, b, c, d = string.match(seq, '^(%d+):(%d+):(%d+):?(%d*)')
    if a then
      if d ~= '' and tonumber(d) > now then
        last = nil -- a queue exists: the general path decides
      else
        last, changes, watched = tonumber(a), tonumber(b), tonumber(c)
        marks = ':' .. c .. ':' .. (d == '' and '0' or d)
      end
    end
  end
  if last then
    local us6 = t[2]
    if #us6 < 6 then
      us6 = string.sub('00000' .. us6, -6)
    end
    local fence, fence_text = secs * 1000000 + micros, t[1] .. us6
    if last >= fence then
      fence = last + 1
      fence_text = string.format('%d', fence)
    end
    changes = changes + 1
    local changes_text = changes == 1 and '1' or string.format('%d', changes)
    -- The sequence lives as the history (ARGV[7]), at least this TTL and
    -- a minute (see SEQ_TTL below).
    local hist_ms = tonumber(ARGV[7])
    local done = redis.pcall('SET', KEYS[2], fence_text .. ':' .. changes_text .. marks, 'PX',
      (ttl > hist_ms and ttl > 60000) and ARGV[3] or (hist_ms > 60000 and ARGV[7] or '60000'))
    if type(done) == 'table' and done.err then
      return {tag - 9, done.err}
    end
    local now_text = t[1] .. string.sub(us6, 1, 3)
    done = redis.pcall('SET', KEYS[1], 'p:' .. ARGV[1] .. ':' .. ARGV[2] .. '|' .. fence_text .. '|'
      .. string.format('%d', now + ttl) .. '|' .. now_text .. '|' .. now_text .. '|' .. ARGV[3] .. '|0|'
      .. ARGV[4], 'PX', ARGV[3])
    if type(done) == 'table' and done.err then
      return {tag - 9, done.err}
    end
    H = H or KEYS[3]
    done = redis.pcall('LPUSH', H, 'a|' .. now_text .. '|' .. fence_text .. '|' .. changes_text .. '.1|' .. ARGV[4])
    if type(done) == 'number' and done > HMAX then
      redis.pcall('LTRIM', H, 0, HMAX - 1)
    end
    redis.pcall('PEXPIRE', H, ARGV[7])
    if watched > now or ARGV[8] ~= '' then
      redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
        string.match(KEYS[1], '{(.*)}$') .. '\t' .. changes_text .. '.1\tacquired')
    end
    -- {tag + 1, fence, now}, packed as `answer` packs (fence_text is fence
    -- and now_text is now, in decimal).
    return string.format('%d ', tag + 1) .. fence_text .. ' ' .. now_text
  end
end
