-- result_write: apply a batch of retained jobs' record changes (jobsapp.results.Writer) in order,
-- atomically, in one round trip.
--
-- KEYS[1] -> jobsapp:results ZSET (finished jids scored by their record's expiry time)
-- KEYS[2 .. n+1] -> jobsapp:result:<jid> HASH of each change, in order (a jid may come twice)
-- ARGV[1] -> now, epoch seconds (index members that expired before it are trimmed)
-- then, per change, in the order of KEYS: jid, TTL seconds, kind ("start" of an attempt,
--   "finish" for a final outcome, "update" otherwise), m, then m field/value pairs
-- returns -> n, the number of changes applied
-- cost    -> O(fields written + log(index size) per finish + members trimmed)
local now = tonumber(ARGV[1])
local position = 2
local finished = false
for index = 2, #KEYS do
  local key = KEYS[index]
  local jid = ARGV[position]
  local ttl = tonumber(ARGV[position + 1])
  local kind = ARGV[position + 2]
  local count = tonumber(ARGV[position + 3])
  position = position + 4
  if count > 0 then
    local fields = {}
    for offset = 0, 2 * count - 1 do
      fields[#fields + 1] = ARGV[position + offset]
    end
    redis.call('HSET', key, unpack(fields))
  end
  position = position + 2 * count
  if kind == 'start' then
    local attempted = redis.call('HGET', key, 'last_attempted_at')
    if attempted then
      redis.call('HSETNX', key, 'started_at', attempted)
    end
    redis.call('HINCRBY', key, 'attempts', 1)
  elseif kind == 'finish' then
    redis.call('HDEL', key, 'next_attempt_at')
    redis.call('ZADD', KEYS[1], now + ttl, jid)
    finished = true
  end
  redis.call('EXPIRE', key, math.max(1, math.ceil(ttl)))
end
if finished then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end
return #KEYS - 1
