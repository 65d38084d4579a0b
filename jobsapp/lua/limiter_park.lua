-- limiter_park: after a job refused by a concurrent limiter was put in the schedule set (at a
-- fallback time), register it to be woken by the next release (limiter_release.lua). When a
-- slot freed between the refusal and this call, the job is made due now instead: no release
-- can be missed, as each script runs atomically.
--
-- KEYS[1] -> jobsapp:limiter:<name>:holders ZSET
-- KEYS[2] -> jobsapp:limiter:<name>:parked LIST of schedule members
-- KEYS[3] -> schedule ZSET
-- ARGV[1] -> the job's member in the schedule set, exactly as stored
-- ARGV[2] -> size (slots)
-- ARGV[3] -> the most entries the parked LIST keeps (the oldest beyond it wait for their fallback)
-- ARGV[4] -> seconds the parked LIST lives after its last write
-- returns -> 1 parked; 0 made due now (a slot is free); -1 the job is not in the schedule set
-- cost    -> O(log N)

local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not score then
  return -1
end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  if tonumber(score) > now then
    redis.call('ZADD', KEYS[3], 'XX', string.format('%.6f', now), ARGV[1])
  end
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return 1
