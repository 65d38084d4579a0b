-- unique_release: release a unique job's lock, only if this job still holds it.
-- A lock that expired and was taken by a later push belongs to that push: comparing the value
-- with our jid keeps us from releasing it.
--
-- KEYS[1] -> jobsapp:unique:<digest> STRING
-- ARGV[1] -> the jid of the job releasing it
-- returns -> 1 when released, 0 when not held by this jid
-- cost    -> O(1)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
