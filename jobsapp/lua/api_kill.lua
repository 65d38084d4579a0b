-- Move one job from the schedule or retry set to the dead set, and trim the dead set in the same
-- step (as Sidekiq's DeadSet#kill): older than the timeout, then beyond the size cap, oldest first.
-- KEYS[1] -> the sorted set holding the job (schedule or retry)
-- KEYS[2] -> dead (ZSET, score = time of death)
-- ARGV[1] -> the member exactly as read from KEYS[1]; written to KEYS[2] unchanged
-- ARGV[2] -> now, epoch seconds (the new score)
-- ARGV[3] -> the oldest time of death kept (now - DEAD_TIMEOUT_SECONDS)
-- ARGV[4] -> DEAD_MAX_JOBS, the most entries the dead set keeps
-- returns 1 when moved, 0 when the member was no longer in KEYS[1] (nothing written)
-- cost O(log N) plus O(M log N) for the M entries trimmed
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[4]) + 1))
return 1
