-- requeue: put unfinished jobs back at the front (right end) of their queues, removing them
-- from the in-flight list. Used at shutdown for jobs still running after the timeout and for
-- fetched jobs that never started. A job no longer in flight (already filed in retry or
-- acknowledged by its thread in the meantime) is skipped, so it is never in two places.
--
-- KEYS[1]     -> in-flight LIST of this process (left out with basic fetch: push back unconditionally)
-- KEYS[2]     -> queues SET
-- KEYS[3..n]  -> the queue LIST of each job, or its priority ZSET for a prioritised job
-- KEYS[n+1]   -> prioritised queues SET (jobsapp:prioritised)
-- KEYS[n+2]   -> priority sequence STRING
-- ARGV[1..m]  -> the raw jobs, in the same order as KEYS[3..n]
-- ARGV[m+1..2m] -> the queue names, same order (re-added to the queues SET)
-- ARGV[2m+1..] -> each job's rank base (priority.rank_base), '' for a plain job: a prioritised
--               job goes in front of every job of its priority
-- returns     -> how many jobs were put back
-- cost        -> O(jobs * in-flight length)
-- a KEYS entry left out is '' (standalone) or the hash tag alone, '{...}:' (cluster mode)
local function given(key) return key ~= nil and key ~= '' and string.sub(key, -2) ~= '}:' end
local count = #KEYS - 4
local requeued = 0
for i = 1, count do
  local raw = ARGV[i]
  if not given(KEYS[1]) or redis.call('LREM', KEYS[1], -1, raw) > 0 then
    local rank = ARGV[2 * count + i]
    if rank == '' then
      redis.call('RPUSH', KEYS[2 + i], raw)
    else
      redis.call('ZADD', KEYS[2 + i], tonumber(rank) - redis.call('INCR', KEYS[count + 4]), raw)
      redis.call('SADD', KEYS[count + 3], ARGV[count + i])
    end
    redis.call('SADD', KEYS[2], ARGV[count + i])
    requeued = requeued + 1
  end
end
return requeued
