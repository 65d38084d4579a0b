-- schedule_move: move due jobs from the schedule or retry set into their queues, atomically.
-- Each job is removed from the set and pushed onto its queue in the same script, so a crash
-- can never lose one, and however many schedulers race, each job is enqueued exactly once
-- (only the caller whose ZREM succeeds pushes it). "Due" uses the Redis server's clock, so
-- hosts with skewed clocks agree on what is due.
--
-- KEYS[1] -> schedule or retry ZSET
-- KEYS[2] -> queues SET
-- ARGV[1] -> the most jobs to move in this call
-- ARGV[2] -> the queue key prefix ("queue:")
-- ARGV[3] -> the queue for a member whose JSON has no usable "queue" ("default")
-- returns -> {moved count, score of the earliest job still in the set or '' when empty,
--             server time as "seconds.microseconds"}
-- cost    -> O(log(N) + M * payload size) for M moved jobs
--
-- The pushed job gets "enqueued_at" = now, as Sidekiq's client sets it: the top-level key is
-- found with a small JSON scanner (strings and nesting are skipped), its number replaced, or
-- the key appended. Everything else in the member is kept byte for byte.

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local now_text = string.format('%d.%06d', tonumber(time[1]), tonumber(time[2]))

-- Returns the first and last index of the value of top-level key `name` in object text `s`
-- (a number or null), or nil when the key is absent at depth 1.
local function top_level_value(s, name)
  local wanted = '"' .. name .. '"'
  local depth = 0
  local i = 1
  local n = #s
  while i <= n do
    local j = string.find(s, '[\"{}%[%]]', i)
    if not j then return nil end
    local c = string.sub(s, j, j)
    if c == '"' then
      local k = j + 1
      while true do
        local q = string.find(s, '[\"\\]', k)
        if not q then return nil end
        if string.sub(s, q, q) == '\\' then
          k = q + 2
        else
          k = q
          break
        end
      end
      if depth == 1 and string.sub(s, j, k) == wanted then
        local value_start, value_end = string.find(s, '^%s*:%s*[%-%d%.eE%+nul]+', k + 1)
        if value_start then
          local colon = string.find(s, ':', k + 1, true)
          local first = string.find(s, '[^%s]', colon + 1)
          return first, value_end
        end
      end
      i = k + 1
    elseif c == '{' or c == '[' then
      depth = depth + 1
      i = j + 1
    else
      depth = depth - 1
      i = j + 1
    end
  end
  return nil
end

local function with_enqueued_at(job)
  local first, last = top_level_value(job, 'enqueued_at')
  if first then
    return string.sub(job, 1, first - 1) .. now_text .. string.sub(job, last + 1)
  end
  local close = string.find(job, '}%s*$')
  if not close then return job end
  local body = string.sub(job, 1, close - 1)
  local separator = ','
  if string.find(body, '^%s*{%s*$') then separator = '' end
  return body .. separator .. '"enqueued_at":' .. now_text .. '}'
end

local limit = tonumber(ARGV[1])
local jobs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local moved = 0
for _, job in ipairs(jobs) do
  if redis.call('ZREM', KEYS[1], job) == 1 then
    local queue = ARGV[3]
    local ok, decoded = pcall(cjson.decode, job)
    if ok and type(decoded) == 'table' and type(decoded['queue']) == 'string' and decoded['queue'] ~= '' then
      queue = decoded['queue']
    end
    local pushed = job
    if ok and type(decoded) == 'table' then
      pushed = with_enqueued_at(job)
    end
    redis.call('LPUSH', ARGV[2] .. queue, pushed)
    redis.call('SADD', KEYS[2], queue)
    moved = moved + 1
  end
end
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_score = ''
if earliest[2] then next_score = earliest[2] end
return {moved, next_score, now_text}
