-- result_write: apply a batch of retained jobs' record changes (jobsapp.results.Writer) in order,
-- atomically, in one round trip.
--
-- A TTL is clamped to 1 .. the longest TTL (a payload from another client may ask for 1e300
-- seconds, which EXPIRE refuses: the whole batch would fail and its records stay "queued"). The
-- index keeps at most the cap's number of finished records: past it, the ones closest to
-- expiring leave the index and their jids are returned, so the caller deletes their hashes (a
-- script touches only the keys it is given: a cluster, or a proxy, refuses any other). A hash
-- whose delete never comes still expires with its TTL.
--
-- KEYS[1] -> jobsapp:results ZSET (finished jids scored by their record's expiry time)
-- KEYS[2 .. n+1] -> jobsapp:result:<jid> HASH of each change, in order (a jid may come twice)
-- ARGV[1] -> now, epoch seconds (index members that expired before it are trimmed)
-- ARGV[2] -> the longest TTL, seconds
-- ARGV[3] -> the most finished records kept (0: no cap)
-- then, per change, in the order of KEYS: jid, TTL seconds, kind ("start" of an attempt,
--   "finish" for a final outcome, "update" otherwise), m, then m field/value pairs
-- returns -> {n, jid...}: the number of changes applied, then the jids trimmed past the cap
-- cost    -> O(fields written + log(index size) per finish + members trimmed)
local now = tonumber(ARGV[1])
local longest = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
local position = 4
local trimmed = {#KEYS - 1}
local finished = false
for index = 2, #KEYS do
  local key = KEYS[index]
  local jid = ARGV[position]
  local ttl = tonumber(ARGV[position + 1])
  if ttl == nil or ttl ~= ttl or ttl < 1 then
    ttl = 1
  elseif ttl > longest then
    ttl = longest
  end
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
  if most > 0 then
    local excess = redis.call('ZCARD', KEYS[1]) - most
    if excess > 0 then
      for _, jid in ipairs(redis.call('ZRANGE', KEYS[1], 0, excess - 1)) do
        trimmed[#trimmed + 1] = jid
      end
      redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1)
    end
  end
end
return trimmed
