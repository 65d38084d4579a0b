-- fetch: move up to N jobs from the given queues, in order, into this process's in-flight list.
-- Reliable fetch: a job is never only in a Python process's memory; until it is acknowledged
-- it sits in the in-flight list, where a restart or the orphan sweeper finds it.
--
-- KEYS[1]    -> in-flight LIST of this process (jobsapp:inflight:<identity>)
-- KEYS[2]    -> paused queue names SET (jobsapp:paused)
-- KEYS[3..n] -> queue LISTs (queue:<name>), in the order to take from
-- KEYS[n+1]  -> prioritised queues SET (jobsapp:prioritised: queues whose priority ZSET has jobs)
-- KEYS[n+2..]-> the priority ZSET of each queue (jobsapp:pqueue:<name>), same order
-- ARGV[1]    -> the most jobs to take
-- ARGV[2..]  -> the queue names of KEYS[3..n], for the paused check
-- ARGV[last] -> the rank of priority 0 (priority.ZERO_RANK): a queue's ZSET jobs ranked below it
--               are taken before its LIST, the others after it
-- returns    -> { {queue position (1-based), raw job, queue position, raw job, ...},
--                 {positions of paused queues}, 1 when some queue had prioritised jobs else 0 }
-- cost       -> O(queues + jobs taken); each queue's jobs are taken oldest first (right end);
--               a queue of plain jobs pays one SCARD per call while no queue is prioritised
local want = tonumber(ARGV[1])
local taken = {}
local paused = {}
local queues = (#KEYS - 3) / 2
local index = KEYS[3 + queues]
local prioritised = redis.call('SCARD', index) > 0
local zero_rank = ARGV[2 + queues]
-- a queue's prioritised jobs ranked below max_rank, oldest of each priority first
local function take_ranked(position, max_rank)
  local zset = KEYS[3 + queues + position]
  local jobs = redis.call('ZRANGEBYSCORE', zset, '-inf', max_rank, 'LIMIT', 0, want)
  for _, job in ipairs(jobs) do
    redis.call('ZREM', zset, job)
    redis.call('LPUSH', KEYS[1], job)
    taken[#taken + 1] = position
    taken[#taken + 1] = job
  end
  want = want - #jobs
  if redis.call('EXISTS', zset) == 0 then redis.call('SREM', index, ARGV[1 + position]) end
end
for i = 3, 2 + queues do
  local position = i - 2
  if redis.call('SISMEMBER', KEYS[2], ARGV[i - 1]) == 1 then
    paused[#paused + 1] = position
  elseif want > 0 then
    local ranked = prioritised and redis.call('SISMEMBER', index, ARGV[i - 1]) == 1
    if ranked then take_ranked(position, '(' .. zero_rank) end
    if want > 0 then
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
    if ranked and want > 0 then take_ranked(position, '+inf') end
  end
end
return {taken, paused, prioritised and 1 or 0}
