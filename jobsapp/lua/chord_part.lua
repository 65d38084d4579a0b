-- chord_part: record one header task's value of a Celery-style chord and, when it completes the
-- set, push the job that applies the chord's callback, in the same script. The marker and the
-- push cannot be separated by a crash or a lost reply: either both happened or neither did. A
-- rerun of a part already recorded (at-least-once delivery) changes nothing and pushes nothing,
-- so the callback job is pushed exactly once.
--
-- KEYS[1] -> jobsapp:chord:<chord id> HASH (header jid -> its JSON value)
-- KEYS[2] -> queues SET
-- KEYS[3] -> queue:<queue> LIST (where the callback job goes), or the queue's priority ZSET
--            (jobsapp:pqueue:<queue>) for a callback job with a priority (ARGV[7])
-- KEYS[4] -> prioritised queues SET (jobsapp:prioritised); left out for a plain job
-- KEYS[5] -> priority sequence STRING; left out for a plain job
-- KEYS[6] -> the queue's wake LIST (jobsapp:pwake:<queue>); left out for a plain job
-- ARGV[1] -> this header task's jid
-- ARGV[2] -> its value, as JSON
-- ARGV[3] -> how many header tasks the chord had when it was applied; the parts added since
--            (add_to_chord, a lazy header) are counted in the hash's '+added' field, which is not a part
-- ARGV[4] -> seconds the hash lives after this write
-- ARGV[5] -> the callback job's JSON (pushed when this part completes the set)
-- ARGV[6] -> the queue name
-- ARGV[7] -> the callback job's rank base (priority.rank_base), '' for a plain job
-- returns -> {added (1, or 0 for a part already recorded), parts recorded, pushed (1 or 0)}
-- cost    -> O(1)

local added = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
local count = redis.call('HLEN', KEYS[1])
local later = tonumber(redis.call('HGET', KEYS[1], '+added') or '0')
if later > 0 then
  count = count - 1
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
local pushed = 0
if added == 1 and count == tonumber(ARGV[3]) + later then
  if ARGV[7] == '' then
    redis.call('LPUSH', KEYS[3], ARGV[5])
  else
    -- after every job of its priority; a token wakes an idle worker that has seen priorities
    redis.call('ZADD', KEYS[3], tonumber(ARGV[7]) + redis.call('INCR', KEYS[5]), ARGV[5])
    redis.call('SADD', KEYS[4], ARGV[6])
    redis.call('LPUSH', KEYS[6], '1')
    redis.call('LTRIM', KEYS[6], 0, 0)
  end
  redis.call('SADD', KEYS[2], ARGV[6])
  pushed = 1
end
return {added, count, pushed}
