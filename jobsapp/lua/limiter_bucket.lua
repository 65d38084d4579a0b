-- limiter_bucket: admit one operation in the current clock-aligned interval, or say when the
-- next interval starts. Intervals are aligned on the epoch by the Redis server's clock (a
-- bucket of 60 s refills at every minute), as Sidekiq Enterprise's bucket limiter.
--
-- KEYS[1] -> jobsapp:limiter:<name> HASH ("interval" index, "count" admitted in it)
-- ARGV[1] -> count
-- ARGV[2] -> per, seconds
-- returns -> {1, server time} when admitted; {0, seconds until the next interval}
-- cost    -> O(1)

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local per = tonumber(ARGV[2])
local interval = tostring(math.floor(now / per))
if redis.call('HGET', KEYS[1], 'interval') ~= interval then
  redis.call('HSET', KEYS[1], 'interval', interval, 'count', 0)
end
if tonumber(redis.call('HGET', KEYS[1], 'count')) < tonumber(ARGV[1]) then
  redis.call('HINCRBY', KEYS[1], 'count', 1)
  return {1, string.format('%.6f', now)}
end
return {0, string.format('%.6f', (tonumber(interval) + 1) * per - now)}
