-- recover_requeue: move one job of a dead process's in-flight list back to the front of its
-- queue, counting the recovery against it (poison detection). recover_bury.lua is the other way
-- out. Called by the orphan sweeper (under its lock) and by a process restarting in the same slot.
--
-- KEYS[1] -> the dead process's in-flight LIST
-- KEYS[2] -> the job's queue LIST, or its priority ZSET for a prioritised job
-- KEYS[3] -> queues SET
-- KEYS[4] -> recoveries HASH
-- KEYS[5] -> prioritised queues SET (jobsapp:prioritised)
-- KEYS[6] -> priority sequence STRING
-- ARGV[1] -> the raw job (exactly as in the in-flight list)
-- ARGV[2] -> queue name (for the queues SET)
-- ARGV[3] -> jid
-- ARGV[4] -> the job to push: the raw job marked as recovered ('' pushes ARGV[1] as is)
-- ARGV[5] -> 1 to count this recovery against the job, 0 when it was not running
-- ARGV[6] -> the job's rank base (priority.rank_base), '' for a plain job: a prioritised job
--            goes in front of every job of its priority
-- returns -> the recovery count after this one, or 0 when the job was gone (nothing written)
-- cost    -> O(in-flight length)
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
local pushed = ARGV[1]
if ARGV[4] ~= '' then pushed = ARGV[4] end
if ARGV[6] == '' then
  redis.call('RPUSH', KEYS[2], pushed)
else
  redis.call('ZADD', KEYS[2], tonumber(ARGV[6]) - redis.call('INCR', KEYS[6]), pushed)
  redis.call('SADD', KEYS[5], ARGV[2])
end
redis.call('SADD', KEYS[3], ARGV[2])
return redis.call('HINCRBY', KEYS[4], ARGV[3], tonumber(ARGV[5]))
