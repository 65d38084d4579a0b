# Pushes one job with Ruby's own client: `ruby push.rb '<item JSON>'`; prints the jid.
# Redis comes from $REDIS_URL.
require "sidekiq"
require "json"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

item = JSON.parse(ARGV.fetch(0))
jid = Sidekiq::Client.push(item)
abort "Sidekiq::Client.push returned nil (stopped by middleware?)" unless jid
puts jid
