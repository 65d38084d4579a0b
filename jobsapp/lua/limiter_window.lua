-- limiter_window: admit one operation in a sliding window, or say when the window has room.
-- The window keeps the admission times of the last `per` seconds (by the Redis server's clock),
-- so no span of `per` seconds ever holds more than `count` admissions, however they align.
--
-- KEYS[1] -> jobsapp:limiter:<name>:holders ZSET (token -> admission time, epoch seconds)
-- ARGV[1] -> the token of this attempt
-- ARGV[2] -> count
-- ARGV[3] -> per, seconds
-- returns -> {1, server time} when admitted; {0, seconds until the oldest admission leaves}
-- cost    -> O(log N) with N <= count admissions kept

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local per = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - per)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('EXPIREAT', KEYS[1], math.ceil(now + per) + 60)
  return {1, string.format('%.6f', now)}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, string.format('%.6f', tonumber(oldest[2]) + per - now)}
