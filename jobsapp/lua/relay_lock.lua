-- relay_lock: take or keep the outbox relay's lock (one relay at a time across the fleet).
-- The holder renews it on every round; a holder that dies stops renewing, and the lock expires
-- after ARGV[2] ms (Redis's clock), when another relay takes it.
--
-- KEYS[1] -> jobsapp:lock:outbox_relay STRING (value = the holder's token)
-- ARGV[1] -> the caller's token
-- ARGV[2] -> the lock's time to live, milliseconds
-- returns -> 1 when the caller holds the lock now (taken or renewed), 0 when another does
-- cost    -> O(1)

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
