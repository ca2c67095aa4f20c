-- lib/sequence.lua: sequence(seq), the parts of the sequence key's value
-- `seq` (KEYS[2]; acquire.lua's header: "<last fence>:<changes>:<watched
-- until>:<queue until>", the last part missing when an older release
-- wrote it), as text: last fence, changes, watched until, queue until
-- ('0' when missing). Nothing when `seq` is nil or not of that form.
local function sequence(seq)
  local a, b, c, d = string.match(seq or '', '^(%d+):(%d+):(%d+):?(%d*)')
  if a then
    return a, b, c, d ~= '' and d or '0'
  end
end
