-- unique_push: take a unique job's lock and push the job, atomically.
-- The lock is SET NX with a TTL: when it is already held (by an earlier push of the same class,
-- queue and arguments that has not been released or expired), nothing is written and the caller
-- tells its user the push was refused. Otherwise the job is pushed in the same script, so a lock
-- never exists without its job, nor a job without its lock.
--
-- KEYS[1] -> jobsapp:unique:<digest> STRING
-- KEYS[2] -> queues SET
-- KEYS[3] -> queue:<queue> LIST (immediate) or the schedule ZSET (scheduled)
-- ARGV[1] -> the jid (the lock's value)
-- ARGV[2] -> lock TTL in milliseconds
-- ARGV[3] -> the job JSON
-- ARGV[4] -> the queue name (immediate), or '' for a scheduled job
-- ARGV[5] -> the run-at score (scheduled), or '' for an immediate job
-- returns -> 1 when pushed, 0 when refused
-- cost    -> O(1) (O(log N) for a scheduled job)

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
else
  redis.call('LPUSH', KEYS[3], ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[4])
end
return 1
