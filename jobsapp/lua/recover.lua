-- recover: move one job of a dead process's in-flight list back to the front of its queue, or,
-- when it has been recovered too often (poison), into the dead set.
-- Called by the orphan sweeper (under its lock) and by a process restarting in the same slot.
--
-- KEYS[1] -> the dead process's in-flight LIST
-- KEYS[2] -> destination: the job's queue LIST, or the dead ZSET
-- KEYS[3] -> queues SET
-- KEYS[4] -> recoveries HASH
-- ARGV[1] -> the raw job (exactly as in the in-flight list)
-- ARGV[2] -> 'queue' or 'dead'
-- ARGV[3] -> queue name (for 'queue'), or the dead member with its error fields (for 'dead')
-- ARGV[4] -> jid
-- ARGV[5] -> time of death (for 'dead')
-- ARGV[6] -> dead set: drop entries scored below this      ARGV[7] -> dead set: keep at most this many
-- ARGV[8] -> (queue) the job to push: the raw job marked as recovered ('' pushes ARGV[1] as is)
-- ARGV[9] -> (queue) 1 to count this recovery against the job, 0 when it was not running
-- returns -> the recovery count after this one (queue), -1 (dead), or 0 when the job was gone
-- cost    -> O(in-flight length)
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'queue' then
  local pushed = ARGV[1]
  if ARGV[8] and ARGV[8] ~= '' then pushed = ARGV[8] end
  redis.call('RPUSH', KEYS[2], pushed)
  redis.call('SADD', KEYS[3], ARGV[3])
  return redis.call('HINCRBY', KEYS[4], ARGV[4], tonumber(ARGV[9] or '1'))
end
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
redis.call('HDEL', KEYS[4], ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[7]) + 1))
return -1
