-- Move one job from a sorted set (schedule, retry or dead) to the front of its queue:
-- the dashboard's "retry now" / "add to queue". Exactly once: when two operators click at the
-- same time, or a scheduler moves the job first, only one ZREM succeeds.
-- KEYS[1] -> the sorted set holding the job (schedule, retry or dead)
-- KEYS[2] -> queues (SET of queue names)
-- KEYS[3] -> queue:<name> (LIST) the job goes to, or its priority ZSET for a prioritised job
-- KEYS[4] -> prioritised queues SET (jobsapp:prioritised)
-- KEYS[5] -> priority sequence STRING
-- ARGV[1] -> the member exactly as read from KEYS[1] (raw bytes, never re-serialized)
-- ARGV[2] -> the queue name (SADD to KEYS[2])
-- ARGV[3] -> the job JSON to push (enqueued_at set; retry_count adjusted by the caller)
-- ARGV[4] -> the job's rank base (priority.rank_base), '' for a plain job
-- returns 1 when moved, 0 when the member was no longer in the set (nothing written)
-- cost O(log N) for the ZREM, O(1) for the rest
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[2])
if ARGV[4] == '' then
  redis.call('LPUSH', KEYS[3], ARGV[3])
else
  redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + redis.call('INCR', KEYS[5]), ARGV[3])
  redis.call('SADD', KEYS[4], ARGV[2])
end
return 1
