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
-- KEYS[5] -> queue:<queue> LIST, or the queue's priority ZSET (jobsapp:pqueue:<queue>) for a job
--            with a priority (ARGV[11])
-- KEYS[6] -> prioritised queues SET (jobsapp:prioritised); left out for a plain job
-- KEYS[7] -> priority sequence STRING; left out for a plain job
-- KEYS[8] -> the queue's wake LIST (jobsapp:pwake:<queue>); left out for a plain job
-- ARGV[1] -> the tick, epoch seconds (an integer)
-- ARGV[2] -> the tick as ISO 8601 UTC ("2026-11-22T16:05:00Z"), sidekiq-cron's member
-- ARGV[3] -> the job JSON without "enqueued_at" (compact, ends with "}")
-- ARGV[4] -> the queue name (for SADD queues)
-- ARGV[5] -> the jid inside the JSON
-- ARGV[6] -> "skip" to skip a missed tick, else it runs once
-- ARGV[7] -> the tick before ARGV[1]: when the last claimed tick is older, ticks were missed
-- ARGV[8] -> jid history entries kept
-- ARGV[9] -> the tick in sidekiq-cron's last_enqueue_time format ("2026-11-22 16:05:00 +0000")
-- ARGV[10] -> seconds after its time past which a claimed tick counts as missed
-- ARGV[11] -> the job's rank base (priority.rank_base), '' for a plain job
-- returns -> {1 or 0, outcome, ignored}: outcome is "enqueued", "early" (tick not reached by the
--            server clock), "disabled", "done" (claimed before), "skipped" (a missed tick
--            skipped); ignored is the malformed jobsapp_last_tick the claim replaced ('' if none)
--
-- A tick is missed when the tick before it was never claimed (a later tick, this one, became
-- due first: the workers were down) or when it is claimed more than ARGV[10] seconds late.
-- Fields another client may have broken are never trusted: a jobsapp_last_tick that is not a
-- past time (nan, inf, 400 digits) is ignored, the enqueued set still refuses a second claim of
-- the tick, and a count that is not a whole number restarts at 1.
-- cost    -> O(log(N)) plus the payload copy

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local tick = tonumber(ARGV[1])
if tick > now then
  return {0, 'early', ''}
end
if redis.call('HGET', KEYS[1], 'status') == 'disabled' then
  return {0, 'disabled', ''}
end
local last_tick_text = redis.call('HGET', KEYS[1], 'jobsapp_last_tick')
local last_tick = tonumber(last_tick_text or '')
local ignored = ''
if last_tick_text and (not last_tick or last_tick ~= last_tick or last_tick > now + 86400 or last_tick < 0) then
  ignored = last_tick_text
  last_tick = nil
end
if last_tick and tick <= last_tick then
  return {0, 'done', ignored}
end
if redis.call('ZADD', KEYS[2], 'NX', tick, ARGV[2]) == 0 then
  -- a Ruby poller claimed it: remember, so we do not ask again
  redis.call('HSET', KEYS[1], 'jobsapp_last_tick', tick)
  return {0, 'done', ignored}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tick - 86400))
redis.call('HSET', KEYS[1], 'jobsapp_last_tick', tick)
local missed = (last_tick and last_tick < tonumber(ARGV[7])) or now - tick > tonumber(ARGV[10])
if ARGV[6] == 'skip' and missed then
  return {0, 'skipped', ignored}
end

local now_text = string.format('%d.%06d', tonumber(time[1]), tonumber(time[2]))
local job = string.sub(ARGV[3], 1, -2) .. ',"enqueued_at":' .. now_text .. '}'
if ARGV[11] == '' then
  redis.call('LPUSH', KEYS[5], job)
else
  -- after every job of its priority; a token wakes an idle worker that has seen priorities
  redis.call('ZADD', KEYS[5], tonumber(ARGV[11]) + redis.call('INCR', KEYS[7]), job)
  redis.call('SADD', KEYS[6], ARGV[4])
  redis.call('LPUSH', KEYS[8], '1')
  redis.call('LTRIM', KEYS[8], 0, 0)
end
redis.call('SADD', KEYS[4], ARGV[4])
redis.call('HSET', KEYS[1],
  'last_enqueue_time', ARGV[9],
  'jobsapp_last_enqueued_at', now_text,
  'jobsapp_last_jid', ARGV[5])
local count = tonumber(redis.call('HGET', KEYS[1], 'jobsapp_enqueued_count') or '0')
if not count or count ~= count or count < 0 or count >= 9007199254740992 then
  count = 0
end
redis.call('HSET', KEYS[1], 'jobsapp_enqueued_count', string.format('%d', math.floor(count) + 1))
redis.call('LPUSH', KEYS[3], cjson.encode({jid = ARGV[5], enqueued = ARGV[2]}))
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[8]) - 1)
return {1, 'enqueued', ignored}
