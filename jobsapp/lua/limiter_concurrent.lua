-- limiter_concurrent: take one of a concurrent limiter's slots, or say when one may free up.
-- Holders are tokens ("<jid>:<random>") scored by their lock's expiry: a holder whose process
-- died without releasing is dropped once its lock_timeout has passed, by the Redis server's clock
-- (sooner when the sweeper drops the dead process's permits: limiter_release.lua). A granted
-- slot is also recorded in its process's permits HASH, in the same script, so the process's
-- shutdown and the sweeper find every slot it holds, whatever the moment it stopped.
--
-- KEYS[1] -> jobsapp:limiter:<name>:holders ZSET (token -> expiry, epoch seconds)
-- KEYS[2] -> jobsapp:limiter:permits:<identity> HASH (token -> limiter name) of the holder's process
-- ARGV[1] -> the token of this attempt
-- ARGV[2] -> size (slots)
-- ARGV[3] -> lock_timeout in seconds
-- ARGV[4] -> the limiter's name (the permits HASH's value)
-- returns -> {1, server time} when taken; {0, seconds until the earliest lock expires}
-- cost    -> O(log N) with N <= size holders

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  local expiry = now + tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('EXPIREAT', KEYS[1], math.ceil(expiry) + 60)
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
  local keep = math.ceil(tonumber(ARGV[3])) + 60
  if redis.call('TTL', KEYS[2]) < keep then
    redis.call('EXPIRE', KEYS[2], keep)
  end
  return {1, string.format('%.6f', now)}
end
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, string.format('%.6f', tonumber(earliest[2]) - now)}
