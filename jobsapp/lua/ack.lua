-- ack: acknowledge finished jobs (remove them from the in-flight list) and add to the stats
-- counters, in one round trip for a whole batch.
--
-- KEYS[1] -> in-flight LIST of this process ('' with basic fetch: nothing to remove)
-- KEYS[2] -> recoveries HASH (jid -> times recovered)
-- KEYS[3] -> stat:processed          KEYS[4] -> stat:processed:<UTC date>
-- KEYS[5] -> stat:failed             KEYS[6] -> stat:failed:<UTC date>
-- ARGV[1] -> processed to add        ARGV[2] -> failed to add
-- ARGV[3] -> TTL of the daily counters, seconds
-- ARGV[4] -> n, the number of jobs to acknowledge
-- ARGV[5 .. 4+n]    -> raw jobs exactly as fetched
-- ARGV[5+n .. 4+2n] -> their jids
-- returns -> how many of the n were still in flight (fewer when a sweeper took one back)
-- cost    -> O(n * in-flight length) for LREM; the in-flight list is short (concurrency + batch)
local processed = tonumber(ARGV[1])
local failed = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local removed = 0
if KEYS[1] ~= '' then
  for i = 1, n do
    removed = removed + redis.call('LREM', KEYS[1], -1, ARGV[4 + i])
  end
end
if n > 0 then
  redis.call('HDEL', KEYS[2], unpack(ARGV, 5 + n, 4 + 2 * n))
end
if processed > 0 then
  redis.call('INCRBY', KEYS[3], processed)
  redis.call('INCRBY', KEYS[4], processed)
  redis.call('EXPIRE', KEYS[4], ttl)
end
if failed > 0 then
  redis.call('INCRBY', KEYS[5], failed)
  redis.call('INCRBY', KEYS[6], failed)
  redis.call('EXPIRE', KEYS[6], ttl)
end
return removed
