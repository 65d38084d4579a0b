-- ack: acknowledge finished jobs (remove them from the in-flight list) and add to the stats
-- counters, in one round trip for a whole batch.
--
-- Removing comes first and never depends on a write Redis may refuse: LREM and HDEL only free
-- memory, which Redis allows at maxmemory (OOM), while SET and INCRBY are refused there until
-- the script has written something. The token and the counters are written after the removals
-- with redis.pcall: when Redis refuses them (full, and nothing was removed) the jobs are still
-- out of flight and the reply says the counters were not added, so the caller sends them again.
--
-- KEYS[1] -> in-flight LIST of this process (left out with basic fetch: nothing to remove)
-- KEYS[2] -> recoveries HASH (jid -> times recovered)
-- KEYS[3] -> stat:processed          KEYS[4] -> stat:processed:<UTC date>
-- KEYS[5] -> stat:failed             KEYS[6] -> stat:failed:<UTC date>
-- KEYS[7] -> the process's last-ack token STRING (left out: no duplicate check)
-- ARGV[1] -> processed to add        ARGV[2] -> failed to add
-- ARGV[3] -> TTL of the daily counters, seconds
-- ARGV[4] -> n, the number of jobs to acknowledge
-- ARGV[5 .. 4+n]    -> raw jobs exactly as fetched
-- ARGV[5+n .. 4+2n] -> their jids
-- ARGV[5+2n] -> this batch's token ('' or absent: no duplicate check). A batch is resent with
--               the same token when its reply was lost (a socket timeout): if the token is the
--               last one applied, the counters were already added and nothing is done again.
-- returns -> {removed, counted}: how many of the n were still in flight (fewer when a sweeper
--            took one back), and 1 when the counters were added (or had been, for a resent
--            batch), 0 when Redis refused the writes (out of memory): send the counts again
-- cost    -> O(n * in-flight length) for LREM; the in-flight list is short (concurrency + batch)
-- a KEYS entry left out is '' (standalone) or the hash tag alone, '{...}:' (cluster mode)
local function given(key) return key ~= nil and key ~= '' and string.sub(key, -2) ~= '}:' end
local processed = tonumber(ARGV[1])
local failed = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local removed = 0
local token = ARGV[5 + 2 * n]
local checked = given(KEYS[7]) and token and token ~= ''
if checked and redis.call('GET', KEYS[7]) == token then
  return {0, 1}
end
if given(KEYS[1]) then
  for i = 1, n do
    removed = removed + redis.call('LREM', KEYS[1], -1, ARGV[4 + i])
  end
end
if n > 0 then
  redis.call('HDEL', KEYS[2], unpack(ARGV, 5 + n, 4 + 2 * n))
end
if processed == 0 and failed == 0 then
  return {removed, 1}
end
-- the first write that may grow memory is refused only when Redis is full and nothing above was
-- removed; once one is accepted the script has written, and Redis accepts the rest
-- (processed counts failures too, so processed >= failed > 0 here)
if checked then
  local reply = redis.pcall('SET', KEYS[7], token, 'EX', 3600)
  if type(reply) == 'table' and reply.err then
    return {removed, 0}
  end
end
local reply = redis.pcall('INCRBY', KEYS[3], processed)
if type(reply) == 'table' and reply.err then
  return {removed, 0}
end
redis.call('INCRBY', KEYS[4], processed)
redis.call('EXPIRE', KEYS[4], ttl)
if failed > 0 then
  redis.call('INCRBY', KEYS[5], failed)
  redis.call('INCRBY', KEYS[6], failed)
  redis.call('EXPIRE', KEYS[6], ttl)
end
return {removed, 1}
