-- fetch: move up to N jobs from the given queues, in order, into this process's in-flight list.
-- Reliable fetch: a job is never only in a Python process's memory; until it is acknowledged
-- it sits in the in-flight list, where a restart or the orphan sweeper finds it.
--
-- KEYS[1]    -> in-flight LIST of this process (jobsapp:inflight:<identity>)
-- KEYS[2]    -> paused queue names SET (jobsapp:paused)
-- KEYS[3..n] -> queue LISTs (queue:<name>), in the order to take from
-- ARGV[1]    -> the most jobs to take
-- ARGV[2..]  -> the queue names of KEYS[3..n], for the paused check
-- returns    -> { {queue position (1-based), raw job, queue position, raw job, ...},
--                 {positions of paused queues} }
-- cost       -> O(queues + jobs taken); each queue's jobs are taken oldest first (right end)
local want = tonumber(ARGV[1])
local taken = {}
local paused = {}
for i = 3, #KEYS do
  local position = i - 2
  if redis.call('SISMEMBER', KEYS[2], ARGV[i - 1]) == 1 then
    paused[#paused + 1] = position
  elseif want > 0 then
    local jobs = redis.call('RPOP', KEYS[i], want)
    if jobs then
      for _, job in ipairs(jobs) do
        redis.call('LPUSH', KEYS[1], job)
        taken[#taken + 1] = position
        taken[#taken + 1] = job
      end
      want = want - #jobs
    end
  end
end
return {taken, paused}
