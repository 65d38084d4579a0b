-- batch_update: count one outcome of a batch's job (or the batch's closing) and push the
-- batch's callbacks, each at most once, in the same script.
-- "pending" counts the jobs that have not run once yet, plus 1 for each jobs() block still
-- running, so no callback fires while jobs are still being added. A job
-- "has run once" when it succeeded or failed (the first failure of a retried job counts);
-- the failed SET holds the jobs whose last run failed, the succeeded SET the jobs that
-- succeeded. Each jid is counted once, however often its outcome is reported (delivery is at
-- least once: a job that finished just before its process died runs again): a second success
-- or failure of a jid changes nothing; a success after a failure moves it from failed to
-- succeeded (as Sidekiq Pro does); a failure after a success changes nothing (its work was
-- done). So pending never goes below 0, and succeeded never exceeds total.
-- on_complete fires when pending reaches 0; on_success when pending is 0 and no job's last run
-- failed (so it may fire later, once a retried job succeeds).
-- Once pending has reached 0 the batch is complete for good (the hash's completed_at, set then;
-- no block can reopen it): every jid of the batch is either in the failed SET or has
-- succeeded, so a success of a jid not in failed, or any failure, is a duplicate and changes
-- nothing. The succeeded SET, the bulk of a batch's memory, is no longer needed and is deleted
-- then. The hash and the failed SET live ARGV[6] seconds after each update while a job's last
-- run failed (a retry may still succeed and fire on_success), and ARGV[7] seconds once none has
-- (only duplicates can come): a report arriving after that finds no batch and changes nothing.
--
-- KEYS[1] -> jobsapp:batch:<bid> HASH
-- KEYS[2] -> jobsapp:batch:<bid>:failed SET
-- KEYS[3] -> queues SET
-- KEYS[4] -> queue:<on_complete queue> LIST, or its priority ZSET for a callback with a priority
--            (left out when none)
-- KEYS[5] -> queue:<on_success queue> LIST, or its priority ZSET (left out when none)
-- KEYS[6] -> jobsapp:batch:<bid>:succeeded SET
-- KEYS[7] -> prioritised queues SET (jobsapp:prioritised; left out when no callback has a priority)
-- KEYS[8] -> priority sequence STRING (left out when no callback has a priority)
-- KEYS[9] -> the on_complete queue's wake LIST (jobsapp:pwake:<queue>; left out without a priority)
-- KEYS[10] -> the on_success queue's wake LIST (left out without a priority)
-- ARGV[1] -> "succeeded", "failed", "close" (a jobs() block ended) or "withdrawn" (a refused push)
-- ARGV[2] -> the job's jid ('' for close)
-- ARGV[3] -> the batch id
-- ARGV[4] -> jid for an on_complete push
-- ARGV[5] -> jid for an on_success push
-- ARGV[6] -> seconds the batch's keys live after this update, while it is incomplete or a job's
--            last run failed
-- ARGV[7] -> seconds the hash and the failed SET live once the batch is complete without failures
-- ARGV[8] -> the on_complete callback's rank base (priority.rank_base), '' for a plain job
-- ARGV[9] -> its priority ('' for none), written in its payload
-- ARGV[10] -> the on_success callback's rank base, '' for a plain job
-- ARGV[11] -> its priority ('' for none)
-- ARGV[12..] -> more jids with the same outcome as ARGV[2] ("succeeded" or "failed"): a worker's
--            acker counts the successes of one ack batch in one call; the callbacks are pushed
--            once they are all counted (the succeeded SET is kept until then, so each jid is
--            still counted once)
-- returns -> {pending, fired: '' | 'complete' | 'success' | 'complete,success'}
-- cost    -> O(jids), the succeeded SET unlinked once at completion (freed in the background)

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, ''}
end
local event = ARGV[1]
local completed = redis.call('HEXISTS', KEYS[1], 'completed_at') == 1

local function count(jid)
  if completed and (event == 'succeeded' or event == 'failed') then
    -- every jid has been counted: only a retried failure's success changes anything
    if event == 'succeeded' and redis.call('SREM', KEYS[2], jid) == 1 then
      redis.call('HINCRBY', KEYS[1], 'succeeded', 1)
    end
  elseif event == 'close' then
    -- the end of one jobs() block: its own pending unit goes
    redis.call('HINCRBY', KEYS[1], 'pending', -1)
  elseif event == 'withdrawn' then
    -- a job counted with its push that was refused (a unique job's lock): never pushed
    redis.call('HINCRBY', KEYS[1], 'total', -1)
    redis.call('HINCRBY', KEYS[1], 'pending', -1)
  elseif event == 'succeeded' then
    if redis.call('SADD', KEYS[6], jid) == 1 then
      -- its first success: counted; it leaves failed, or it had not run yet
      redis.call('HINCRBY', KEYS[1], 'succeeded', 1)
      if redis.call('SREM', KEYS[2], jid) == 0 then
        redis.call('HINCRBY', KEYS[1], 'pending', -1)
      end
    end
  elseif redis.call('SISMEMBER', KEYS[6], jid) == 0 then
    -- failed, and never succeeded: its first failure counts as its run
    if redis.call('SADD', KEYS[2], jid) == 1 then
      redis.call('HINCRBY', KEYS[1], 'pending', -1)
    end
  end
end

count(ARGV[2])
if event == 'succeeded' or event == 'failed' then
  for index = 12, #ARGV do
    count(ARGV[index])
  end
end
-- a KEYS entry left out is '' (standalone) or the hash tag alone, '{...}:' (cluster mode)
local function given(key) return key ~= nil and key ~= '' and string.sub(key, -2) ~= '}:' end

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local pending = tonumber(redis.call('HGET', KEYS[1], 'pending'))
local failures = redis.call('SCARD', KEYS[2])
local fired = {}

local function push(kind, queue_key, jid, rank, level, wake_key)
  local class = redis.call('HGET', KEYS[1], 'on_' .. kind)
  if not class or class == '' or not given(queue_key) then return end
  if redis.call('HSETNX', KEYS[1], kind .. '_fired', '1') == 0 then return end
  local queue = redis.call('HGET', KEYS[1], 'on_' .. kind .. '_queue')
  local counts = {
    total = tonumber(redis.call('HGET', KEYS[1], 'total') or '0'),
    succeeded = tonumber(redis.call('HGET', KEYS[1], 'succeeded') or '0'),
    failed = failures,
  }
  local item = {class = class, args = {ARGV[3], counts}, queue = queue, jid = jid, retry = true,
    created_at = now, enqueued_at = now}
  if rank == '' then
    redis.call('LPUSH', queue_key, cjson.encode(item))
  else
    -- after every job of its priority; a token wakes an idle worker that has seen priorities
    item.priority = tonumber(level)
    redis.call('ZADD', queue_key, tonumber(rank) + redis.call('INCR', KEYS[8]), cjson.encode(item))
    redis.call('SADD', KEYS[7], queue)
    redis.call('LPUSH', wake_key, '1')
    redis.call('LTRIM', wake_key, 0, 0)
  end
  redis.call('SADD', KEYS[3], queue)
  table.insert(fired, kind)
end

if pending <= 0 then
  push('complete', KEYS[4], ARGV[4], ARGV[8], ARGV[9], KEYS[9])
  if failures == 0 then
    push('success', KEYS[5], ARGV[5], ARGV[10], ARGV[11], KEYS[10])
  end
  if not completed then
    redis.call('HSET', KEYS[1], 'completed_at', tostring(now))
    redis.call('UNLINK', KEYS[6])  -- freed off the main thread
  end
  if failures == 0 then
    -- nothing but a duplicate can come: the bookkeeping lingers ARGV[7] seconds, not extended
    local linger = tonumber(ARGV[7])
    local ttl = redis.call('TTL', KEYS[1])
    if ttl < 0 or ttl > linger then
      redis.call('EXPIRE', KEYS[1], linger)
    end
  else
    redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
    redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
  end
else
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
  redis.call('EXPIRE', KEYS[6], tonumber(ARGV[6]))
end
return {pending, table.concat(fired, ',')}
