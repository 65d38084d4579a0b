-- retry: file a failed job in the retry set or the dead set, and acknowledge it, atomically.
-- A crash can leave the job in flight (recovered later) or filed, never both and never neither;
-- and a job a sweeper already took back (it will run again) is not filed a second time.
--
-- KEYS[1] -> in-flight LIST of this process (left out with basic fetch)
-- KEYS[2] -> destination ZSET: retry or dead
-- KEYS[3] -> recoveries HASH
-- ARGV[1] -> the raw job as fetched
-- ARGV[2] -> score (next attempt, or time of death)
-- ARGV[3] -> the member to add: the job JSON with its error fields
-- ARGV[4] -> jid
-- ARGV[5] -> for the dead set: drop entries scored below this ('' otherwise)
-- ARGV[6] -> for the dead set: keep at most this many entries
-- returns -> 1 when filed, 0 when the job was no longer in flight (nothing written)
-- cost    -> O(in-flight length + log(set size)); trimming the dead set is amortized O(1)
-- a KEYS entry left out is '' (standalone) or the hash tag alone, '{...}:' (cluster mode)
local function given(key) return key ~= nil and key ~= '' and string.sub(key, -2) ~= '}:' end
if given(KEYS[1]) and redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('HDEL', KEYS[3], ARGV[4])
if ARGV[5] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[6]) + 1))
end
return 1
