-- priority_push: push a job with a priority onto its queue's priority ZSET (jobsapp.priority),
-- ranked after every job of its priority pushed before it, and index the queue so fetch.lua
-- looks there. Ruby processes never read this ZSET; plain jobs never come here.
--
-- KEYS[1] -> queues SET
-- KEYS[2] -> prioritised queues SET (the index fetch.lua reads)
-- KEYS[3] -> priority sequence STRING (the arrival counter)
-- KEYS[4] -> the queue's priority ZSET (jobsapp:pqueue:<name>)
-- KEYS[5] -> the queue's wake LIST (jobsapp:pwake:<name>): one token wakes an idle worker
-- ARGV[1] -> queue name
-- ARGV[2] -> the rank base of the job's priority (priority.rank_base)
-- ARGV[3] -> the job JSON
-- returns -> 1
-- cost    -> O(log N)
local n = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], tonumber(ARGV[2]) + n, ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[5], '1')
redis.call('LTRIM', KEYS[5], 0, 0)
return 1
