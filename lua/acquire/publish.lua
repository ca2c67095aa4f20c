-- acquire/publish.lua, a part of acquire.lua (after its fast path, which
-- publishes only through `announce`): publish(text), an event on the
-- resource's channel <ns>:wake:v2 (derived from KEYS[1], as announce
-- derives it), "<purpose:digest>" .. text.
local function publish(text)
  redis.pcall('PUBLISH', (string.gsub(KEYS[1], ':lease:v2:{.*$', ':wake:v2')),
    string.match(KEYS[1], '{(.*)}$') .. text)
end
