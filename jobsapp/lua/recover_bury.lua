-- recover_bury: move one job of a dead process's in-flight list into the dead set: a poison job
-- (recovered too often) or an entry that is not a usable job (then ARGV[2] wraps its raw text).
-- recover_requeue.lua is the other way out. Called by the orphan sweeper (under its lock) and by
-- a process restarting in the same slot.
--
-- KEYS[1] -> the dead process's in-flight LIST
-- KEYS[2] -> dead ZSET
-- KEYS[3] -> recoveries HASH
-- ARGV[1] -> the raw job (exactly as in the in-flight list)
-- ARGV[2] -> the dead member, with its error fields
-- ARGV[3] -> jid ('' for a malformed entry)
-- ARGV[4] -> time of death (the score)
-- ARGV[5] -> dead set: drop entries scored below this      ARGV[6] -> dead set: keep at most this many
-- returns -> -1 when buried, 0 when the job was gone (nothing written)
-- cost    -> O(in-flight length) + O(log(dead) + trimmed)
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[6]) + 1))
return -1
