-- limiter_concurrent: take one of a concurrent limiter's slots, or say when one may free up.
-- Holders are tokens scored by their lock's expiry: a holder whose process died without
-- releasing is dropped once its lock_timeout has passed, by the Redis server's clock.
--
-- KEYS[1] -> jobsapp:limiter:<name>:holders ZSET (token -> expiry, epoch seconds)
-- KEYS[2] -> jobsapp:limiter:<name> HASH (over_limit counter)
-- ARGV[1] -> the token of this attempt
-- ARGV[2] -> size (slots)
-- ARGV[3] -> lock_timeout in seconds
-- returns -> {1, server time} when taken; {0, seconds until the earliest lock expires}
-- cost    -> O(log N) with N <= size holders

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  local expiry = now + tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('EXPIREAT', KEYS[1], math.ceil(expiry) + 60)
  return {1, string.format('%.6f', now)}
end
redis.call('HINCRBY', KEYS[2], 'over_limit', 1)
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, string.format('%.6f', tonumber(earliest[2]) - now)}
