-- schedule_move: move given due jobs from the schedule or retry set onto their queues, atomically.
-- The caller (scheduler.py) read the due members, and did all the JSON work in Python: the queue
-- of each job and the payload to push (with a fresh "enqueued_at"). This script only removes and
-- pushes, so it holds Redis for about a copy of its arguments whatever the jobs' size (it used to
-- decode every job with cjson and scan it in Lua: 100 jobs of 1 MB held Redis for 5.6 s).
-- Each job is removed from the set and pushed in the same script, so a crash can never lose one,
-- and however many schedulers race, each job is enqueued exactly once (only the caller whose
-- ZREM succeeds pushes it).
--
-- KEYS[1]     -> schedule or retry ZSET
-- KEYS[2]     -> queues SET
-- KEYS[2+i]   -> the queue LIST of job i (i = 1..n), or its priority ZSET for a prioritised job
-- KEYS[3+n]   -> prioritised queues SET (jobsapp:prioritised)
-- KEYS[4+n]   -> priority sequence STRING
-- ARGV[1]     -> n, the number of jobs
-- ARGV[1+i]   -> job i's member exactly as stored in the set
-- ARGV[1+n+i] -> job i's payload to push
-- ARGV[1+2n+i] -> job i's queue name (for the queues SET)
-- ARGV[1+3n+i] -> job i's rank base (priority.rank_base), '' for a plain job
-- returns     -> how many of the n this call moved (fewer when another scheduler was first)
-- cost        -> O(n * log(N)) plus copying the arguments; the caller bounds a call by bytes
local n = tonumber(ARGV[1])
local moved = 0
for i = 1, n do
  if redis.call('ZREM', KEYS[1], ARGV[1 + i]) == 1 then
    local rank = ARGV[1 + 3 * n + i]
    if rank == '' then
      redis.call('LPUSH', KEYS[2 + i], ARGV[1 + n + i])
    else
      redis.call('ZADD', KEYS[2 + i], tonumber(rank) + redis.call('INCR', KEYS[4 + n]), ARGV[1 + n + i])
      redis.call('SADD', KEYS[3 + n], ARGV[1 + 2 * n + i])
    end
    redis.call('SADD', KEYS[2], ARGV[1 + 2 * n + i])
    moved = moved + 1
  end
end
return moved
