-- acquire/refused.lua, a part of acquire.lua (spliced in where it says
-- `--#include acquire/refused.lua`; it reads that script's locals).
--#include lib/queue_until.lua
-- No permit for the caller: {tag(0), retry, why}. A waiter not queued yet
-- (enter_as) takes its place at the back of the fair queue first, with its
-- ask when it has one, as queue.lua's 'enter' does (both mark the queue
-- with lib/queue_until.lua), and says so (why + 4). A refused write leaves no
-- entry: the caller enters with queue.lua then.
local function refused(retry, why)
  if leaving then
    -- The last look of a waiter: its entry and ask go in this run, so no
    -- release grants the attempt after it was told 'contended' (as
    -- queue.lua's 'leave'; the next waiter may go now). why + 8: left.
    local done = redis.pcall('ZREM', KEYS[5], member)
    if type(done) == 'table' and done.err then
      return answer({tag, retry, why})
    end
    redis.pcall('HDEL', KEYS[6], member)
    publish('\t\tqueue')
    return answer({tag, retry, why + 8})
  end
  if not enter_as then
    return answer({tag, retry, why})
  end
  local QUEUE = KEYS[5]
  local ASK = KEYS[6]
  local deadline = now + horizon
  local done = redis.pcall('ZADD', QUEUE, 'NX', secs * 1000000 + micros, enter_as)
  if type(done) == 'table' and done.err then
    return answer({tag, retry, why})
  end
  done = redis.pcall('ZADD', QUEUE, -deadline, '~' .. string.match(enter_as, '^%a:([^:]+):'))
  if type(done) == 'table' and done.err then
    redis.pcall('ZREM', QUEUE, enter_as)
    return answer({tag, retry, why})
  end
  if asks then
    redis.pcall('HSET', ASK, enter_as, ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[4])
  end
  redis.pcall('PEXPIRE', QUEUE, horizon + 1000)
  redis.pcall('PEXPIRE', ASK, horizon + 1000)
  done = mark_queue(deadline, horizon, SEQ_TTL)
  if type(done) == 'table' and done.err then
    redis.pcall('ZREM', QUEUE, enter_as)
    redis.pcall('HDEL', ASK, enter_as)
    return answer({tag, retry, why})
  end
  return answer({tag, retry, why + 4})
end
