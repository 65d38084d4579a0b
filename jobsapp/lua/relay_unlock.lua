-- relay_unlock: give up the outbox relay's lock, only if the caller still holds it (a lock
-- that expired and was taken by another relay is that relay's).
--
-- KEYS[1] -> jobsapp:lock:outbox_relay STRING
-- ARGV[1] -> the caller's token
-- returns -> 1 when released, 0 when the caller did not hold it
-- cost    -> O(1)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
