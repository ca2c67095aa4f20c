-- acquire/read.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/read.lua`; it reads that script's locals): the
-- record read, a string whole, a hash through its expiry index. Sets
-- rec, hashed, IDX, mine, recorded, delays, extra and the limits below.
local rec, hashed = nil, false
-- A hash record's expiry index (docs/decisions/storage-v2.md, "The expiry index"):
-- the sorted set <ns>:exp:v2:T, one member per permit field, scored by its
-- expiresAt. With it a call reads only the permits due (expired by their
-- score, at most INDEX_DUE), the caller's own, and counts, so its work does
-- not grow with the live holders. `extra` counts the live permits the loop
-- below does not see; `rebuild` says the index could not be trusted (more
-- due than INDEX_DUE, or it disagrees with the hash: written by a v2
-- script, evicted): the whole hash is read, as before, and the index
-- written anew from it.
-- Once a run wrote a permit's expiry to the history, the permit's score
-- becomes -(expiresAt + lockDelayMs) (`recorded`, below): never due again,
-- so each expiry is written once, and a long lock-delay of many permits
-- is not read by every call. Below -now: its delay runs (`delays`);
-- from -now to 0: over, swept like a long-expired permit.
local IDX
local extra, extra_soonest, extra_latest, rebuild = 0, nil, 0, false
local mine = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
-- recorded: permit fields whose expiry is in the history already (a
-- negative index score). delays: "<field>, <ends>" of recorded permits in
-- their lock-delay that the loop below does not read; delays_top: the
-- latest end of them all when there are too many to read, with
-- delays_others set when some are not the caller's owner's.
local recorded, delays, delays_top, delays_others = {}, nil, nil, false
--#include lib/index.lua
if type(cur) == 'string' then
  local cut = string.find(cur, '|', 1, true)
  rec = {string.sub(cur, 1, cut - 1), string.sub(cur, cut + 1)}
elseif cur then
  hashed = true
  IDX = KEYS[4]
  local fields = redis.call('HLEN', KEYS[1])
  local own = fields > SMALL_RECORD and redis.call('HGET', KEYS[1], mine)
  if fields <= SMALL_RECORD then
    -- A small record: one read of all of it costs Redis less than the
    -- index's reads. The index is only counted against it, and written
    -- anew when they differ, so that it is right when the record grows.
    rec = redis.call('HGETALL', KEYS[1])
    local permits = 0
    for i = 1, #rec, 2 do
      if string.byte(rec[i], 1) == 112 then -- 'p'
        permits = permits + 1
      end
    end
    local scores = redis.call('ZRANGE', IDX, 0, SMALL_RECORD, 'WITHSCORES')
    for i = 1, #scores, 2 do
      if string.byte(scores[i + 1], 1) == 45 then -- '-': recorded
        recorded[scores[i]] = true
      end
    end
    rebuild = #scores / 2 ~= permits
  elseif own and select(2, permit(own)) > now then
    -- The same attempt holds a permit: the loop answers the replay.
    rec = {mine, own}
  else
    local part, lm, agrees = read_due(fields)
    if part then
      rec = part
      if lm[1] then
        rec[#rec + 1] = 'l'
        rec[#rec + 1] = lm[1]
      end
      if lm[2] then
        rec[#rec + 1] = 'm'
        rec[#rec + 1] = lm[2]
      end
      if not agrees then
        rebuild = true
      else
        -- The live permits not due: counted, and read only when few (an
        -- owner's other operation matters only for a plain-sized lease).
        local ahead = redis.call('ZCOUNT', IDX, '(' .. now, '+inf')
        if ahead <= 8 then
          local live_fields = redis.call('ZRANGEBYSCORE', IDX, '(' .. now, '+inf')
          for i = 1, #live_fields do
            local v = redis.call('HGET', KEYS[1], live_fields[i])
            if not v then
              rebuild = true -- a member without its permit
              break
            end
            rec[#rec + 1] = live_fields[i]
            rec[#rec + 1] = v
          end
        else
          extra = ahead
          extra_soonest = tonumber(redis.call('ZRANGEBYSCORE', IDX, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
          -- The record's PTTL already covers every permit's end and delay.
          extra_latest = now + redis.call('PTTL', KEYS[1])
        end
      end
      -- Recorded permits in their lock-delay: read when few; when many,
      -- the latest end stands for them all and only the caller's owner's
      -- are looked for (a scan of the index in C, no Lua per member).
      local top = not rebuild and redis.call('ZRANGE', IDX, 0, 0, 'WITHSCORES')
      if top and top[2] and -tonumber(top[2]) > now then
        local n = redis.call('ZCOUNT', IDX, '-inf', '(' .. -now)
        delays = {}
        if n <= INDEX_DUE then
          local d = redis.call('ZRANGEBYSCORE', IDX, '-inf', '(' .. -now, 'WITHSCORES')
          for i = 1, #d, 2 do
            delays[#delays + 1] = d[i]
            delays[#delays + 1] = -tonumber(d[i + 1])
          end
        else
          delays_top = -tonumber(top[2])
          local own_n, met = 0, {}
          local function meet(field, score)
            local ends = -tonumber(score)
            if ends > now and not met[field] then
              met[field] = true
              own_n = own_n + 1
              delays[#delays + 1] = field
              delays[#delays + 1] = ends
            end
          end
          -- The caller's own permit is looked up directly; its owner's
          -- other operations by a scan bounded as every call's work is
          -- (docs/design.md §14): 2 scans of about 256 members. One
          -- beyond them is taken for another owner's, whose delay the
          -- caller waits out (a wait, never a second holder).
          local score = redis.call('ZSCORE', IDX, mine)
          if score then
            meet(mine, score)
          end
          local cursor, scans = '0', 0
          repeat
            local r = redis.call('ZSCAN', IDX, cursor, 'MATCH', 'p:' .. ARGV[1] .. ':*', 'COUNT', 256)
            cursor, scans = r[1], scans + 1
            for i = 1, #r[2], 2 do
              meet(r[2][i], r[2][i + 1])
            end
          until cursor == '0' or scans == 2
          delays_others = n > own_n
        end
      end
    else
      rebuild = true
    end
  end
  if rebuild then
    if fields > SMALL_RECORD then
      rec = redis.call('HGETALL', KEYS[1])
    end
    -- Whatever the index holds of recorded expiries stays known.
    recorded, delays, delays_top = {}, nil, nil
    local neg = redis.call('ZRANGEBYSCORE', IDX, '-inf', '(0')
    for i = 1, #neg do
      recorded[neg[i]] = true
    end
  end
end
