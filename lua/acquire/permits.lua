-- acquire/permits.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/permits.lua`; it reads that script's locals): the
-- permits read, each live, expired (its expiry noted in `seen`), in a
-- lock-delay or long expired (`stale`); the caller's own answers a
-- replay here. Then the index rebuilt when it could not be trusted.
local owner = rec and string.sub(mine, 1, #ARGV[1] + 3)
local l, m = 1, 'x'
local live, soonest, same_owner, latest = 0, nil, false, 0
local stale, delay_end, returning
-- Expired permits this run read whose expiry is not in the history yet
-- (six items each): each is written once (the index remembers it), at
-- most SEEN_MAX a call (the rest stay due for later calls), but all of
-- them when the run reads the whole hash anyway (a rebuild): left due,
-- more than INDEX_DUE of them would make the next call rebuild again, so
-- 2 000 permits expiring at once cost 2 000 / SEEN_MAX whole reads in a
-- row instead of one (each of the next calls blocked Redis for tens of
-- ms while survivors acquired and released).
local seen
for i = 1, rec and #rec or 0, 2 do
  local field = rec[i]
  local b = string.byte(field, 1)
  if b == 112 then -- 'p'
    local v = rec[i + 1]
    local fence, exp, acq, ren, granted, ld, at = permit(v, true)
    if exp > now then
      if field == mine then
        -- 1 when the caller waits and a release granted its entry this
        -- permit (release.lua sets the grant mark to the granted member):
        -- its acquisition.
        local handed = 0
        if member ~= '' then
          local until_ms, to = string.match(redis.call('HGET', KEYS[8], mine) or '', '^(%d+)|(.*)$')
          handed = (to == member and tonumber(until_ms) > now) and 1 or 0
        end
        -- A replay tells its caller that it holds this permit: the permit
        -- is marked claimed for as long as it lives, so that the clean-up
        -- release of a waiter of the same attempt that left (release.lua,
        -- mode 'a') leaves it alone (docs/design.md §14). The answer is
        -- decided first, before any write; the mark is written only when
        -- it is needed: not when the permit was renewed (the clean-up
        -- keeps it anyway) or is claimed already, and not for a waiter's
        -- look at its own grant (`handed`): should that waiter have gone,
        -- its own clean-up must find the grant unclaimed (the mark names
        -- this entry: no other entry's clean-up takes it). A Redis that
        -- refuses the mark (full, NOREPLICAS, READONLY: the SET is this
        -- run's first write) still gets the replay answered, as the
        -- previous release answered it: the clean-up's own first write is
        -- the same kind of SET (release.lua, mode 'a'), refused by the
        -- same refusal, so no clean-up takes the permit while the mark
        -- could not be written. (v2 scripts ignore the key: additive.)
        if handed == 0 and acq == ren then
          local C = KEYS[7]
          if redis.call('EXISTS', C) == 0 then
            redis.pcall('SET', C, '1', 'PX', exp - now)
          end
        end
        return {tag + 2, exp - now, tonumber(fence), tonumber(acq), tonumber(ren), tonumber(granted),
          string.sub(v, at), handed}
      end
      live = live + 1
      if not soonest or exp < soonest then
        soonest = exp
      end
      if string.sub(field, 1, #owner) == owner then
        same_owner = true
      end
      local ends = exp + tonumber(ld)
      if ends > latest then
        latest = ends
      end
    else
      local ends = exp + tonumber(ld)
      local owned = string.sub(field, 1, #owner) == owner
      -- noted: its expiry is in the history, or goes there in this run (at
      -- most SEEN_MAX a call, and the caller's owner's own always: they
      -- go with the write). Only a noted permit is swept.
      local noted = recorded[field]
      if not noted and (owned or rebuild or not seen or #seen < SEEN_MAX * 6) then
        seen = seen or {}
        seen[#seen + 1] = fence
        seen[#seen + 1] = exp
        seen[#seen + 1] = ld
        seen[#seen + 1] = string.sub(v, at)
        seen[#seen + 1] = acq
        seen[#seen + 1] = field
        noted = true
        -- A rebuild (below) indexes it as written already (or drops it
        -- when its delay is over), in the index it writes anyway.
        recorded[field] = rebuild or nil
      end
      if ends > now and owned then
        -- The caller's owner token let this permit expire: it may come
        -- back at once (ahead of any queue), and coming back ends the
        -- delay its expiry started (the old permit goes with the write).
        returning = true
        stale = stale or {}
        stale[#stale + 1] = field
      elseif ends > now then
        -- Another owner's lock-delay runs: the permit stays until it is over.
        if ends > latest then
          latest = ends
        end
        if not delay_end or ends > delay_end then
          delay_end = ends
        end
      elseif noted and (not stale or #stale < STALE_SWEEP) then
        -- Long expired: swept, at most STALE_SWEEP a call (the rest by
        -- later calls), so that no call's deletes grow with the holders.
        stale = stale or {}
        stale[#stale + 1] = field
      end
    end
  elseif b == 108 then -- 'l'
    l = tonumber(rec[i + 1])
  elseif b == 109 then -- 'm'
    m = rec[i + 1]
  end
end
-- The recorded lock-delays the loop did not read: the caller's owner's
-- may come back (and end), another owner's hold the resource.
for i = 1, delays and #delays or 0, 2 do
  local ends = delays[i + 1]
  if string.sub(delays[i], 1, #owner) == owner then
    returning = true
    stale = stale or {}
    stale[#stale + 1] = delays[i]
  else
    if ends > latest then
      latest = ends
    end
    if not delay_end or ends > delay_end then
      delay_end = ends
    end
  end
end
if delays_top then
  if delays_top > latest then
    latest = delays_top
  end
  if delays_others and (not delay_end or delays_top > delay_end) then
    delay_end = delays_top -- at most this: one of them ends last
  end
end
live = live + extra
if extra_soonest and (not soonest or extra_soonest < soonest) then
  soonest = extra_soonest
end
if extra_latest > latest then
  latest = extra_latest
end
if rebuild then
  -- The index anew from the whole hash: every permit not long expired
  -- (those whose expiry is written go now, all of them, so that the next
  -- call finds few due).
  redis.pcall('DEL', IDX)
  local add, gone = {}, {}
  for i = 1, #rec, 2 do
    if string.byte(rec[i], 1) == 112 then -- 'p'
      local _, exp, _, _, _, ld = permit(rec[i + 1])
      if exp + tonumber(ld) > now or not recorded[rec[i]] then
        -- (a long-expired permit whose expiry is not written yet stays,
        -- due: this run or a later one writes it, then sweeps it)
        add[#add + 1] = string.format('%d', recorded[rec[i]] and -(exp + tonumber(ld)) or exp)
        add[#add + 1] = rec[i]
        if #add == 200 then
          redis.pcall('ZADD', IDX, unpack(add))
          add = {}
        end
      else
        gone[#gone + 1] = rec[i]
        if #gone == 200 then
          redis.pcall('HDEL', KEYS[1], unpack(gone))
          gone = {}
        end
      end
    end
  end
  if #add > 0 then
    redis.pcall('ZADD', IDX, unpack(add))
  end
  if #gone > 0 then
    redis.pcall('HDEL', KEYS[1], unpack(gone))
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.pcall('PEXPIRE', IDX, pttl)
  end
end
