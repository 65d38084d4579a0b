-- limiter_release: give back one slot of a concurrent limiter, once, and wake one parked job.
-- Whichever path ends the holder (its block ending, the job-ended backstop, the shutdown putting
-- the job back, the sweeper dropping a dead process's permits), only the call whose ZREM removes
-- the token frees the slot and wakes a job: releasing again is a no-op.
-- A parked job is one refused by this limiter and rescheduled (limiter_park.lua): it is made due
-- now in the schedule set, so the scheduler pushes it to its queue within one poll. Entries whose
-- job left the schedule set meanwhile (due at its fallback time, deleted) are skipped.
--
-- KEYS[1] -> jobsapp:limiter:<name>:holders ZSET
-- KEYS[2] -> jobsapp:limiter:permits:<identity> HASH of the holder's process
-- KEYS[3] -> jobsapp:limiter:<name>:parked LIST of schedule members
-- KEYS[4] -> schedule ZSET
-- ARGV[1] -> the token
-- returns -> 0 already released; 1 released; 2 released and a parked job woken
-- cost    -> O(log N) plus at most 100 stale parked entries skipped

redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
for _ = 1, 100 do
  local member = redis.call('LPOP', KEYS[3])
  if not member then
    return 1
  end
  local score = redis.call('ZSCORE', KEYS[4], member)
  if score then
    if tonumber(score) > now then
      redis.call('ZADD', KEYS[4], 'XX', string.format('%.6f', now), member)
    end
    return 2
  end
end
return 1
