-- periodic_claim: claim one tick of a periodic job and push its job, atomically.
-- However many processes on however many hosts call this for the same tick, exactly one of
-- them pushes: the claim is the tick's ZADD NX into the job's "enqueued" set (the same member a
-- Ruby sidekiq-cron poller adds, so a Ruby poller and ours exclude each other too) together with
-- the "jobsapp_last_tick" high-water mark. A tick is never run before its time by the Redis
-- server's clock, whatever the caller's clock says. The push and the claim are one script, so
-- a crash can neither lose a claimed tick nor run it twice.
--
-- KEYS[1] -> cron_job:<name> HASH
-- KEYS[2] -> cron_job:<name>:enqueued ZSET
-- KEYS[3] -> cron_job:<name>:jid_history LIST
-- KEYS[4] -> queues SET
-- KEYS[5] -> queue:<queue> LIST
-- ARGV[1] -> the tick, epoch seconds (an integer)
-- ARGV[2] -> the tick as ISO 8601 UTC ("2026-11-22T16:05:00Z"), sidekiq-cron's member
-- ARGV[3] -> the job JSON without "enqueued_at" (compact, ends with "}")
-- ARGV[4] -> the queue name (for SADD queues)
-- ARGV[5] -> the jid inside the JSON
-- ARGV[6] -> "skip" to skip a tick found more than ARGV[7] seconds late, else it runs once
-- ARGV[7] -> seconds after which a tick counts as missed
-- ARGV[8] -> jid history entries kept
-- ARGV[9] -> the tick in sidekiq-cron's last_enqueue_time format ("2026-11-22 16:05:00 +0000")
-- returns -> {1 or 0, outcome}: outcome is "enqueued", "early" (tick not reached by the server
--            clock), "disabled", "done" (claimed before), "skipped" (a missed tick skipped)
-- cost    -> O(log(N)) plus the payload copy

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local tick = tonumber(ARGV[1])
if tick > now then
  return {0, 'early'}
end
if redis.call('HGET', KEYS[1], 'status') == 'disabled' then
  return {0, 'disabled'}
end
local last_tick = tonumber(redis.call('HGET', KEYS[1], 'jobsapp_last_tick') or '')
if last_tick and tick <= last_tick then
  return {0, 'done'}
end
if redis.call('ZADD', KEYS[2], 'NX', tick, ARGV[2]) == 0 then
  -- a Ruby poller claimed it: remember, so we do not ask again
  redis.call('HSET', KEYS[1], 'jobsapp_last_tick', tick)
  return {0, 'done'}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tick - 86400))
redis.call('HSET', KEYS[1], 'jobsapp_last_tick', tick)
if ARGV[6] == 'skip' and now - tick > tonumber(ARGV[7]) then
  return {0, 'skipped'}
end

local now_text = string.format('%d.%06d', tonumber(time[1]), tonumber(time[2]))
local job = string.sub(ARGV[3], 1, -2) .. ',"enqueued_at":' .. now_text .. '}'
redis.call('LPUSH', KEYS[5], job)
redis.call('SADD', KEYS[4], ARGV[4])
redis.call('HSET', KEYS[1],
  'last_enqueue_time', ARGV[9],
  'jobsapp_last_enqueued_at', now_text,
  'jobsapp_last_jid', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'jobsapp_enqueued_count', 1)
redis.call('LPUSH', KEYS[3], cjson.encode({jid = ARGV[5], enqueued = ARGV[2]}))
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[8]) - 1)
return {1, 'enqueued'}
