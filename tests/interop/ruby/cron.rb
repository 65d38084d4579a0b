# sidekiq-cron 1.8 (Debian's ruby-sidekiq-cron) on the test Redis ($REDIS_URL):
#   ruby cron.rb create NAME CRON CLASS QUEUE   saves a cron job as a Ruby app does
#   ruby cron.rb list                           prints Sidekiq::Cron::Job.all as JSON
#   ruby cron.rb tick NAME [EPOCH]              runs the poller's test for EPOCH (default: now),
#                                               prints "enqueued" or "skipped"
require "sidekiq"
require "sidekiq/api"
require "sidekiq/cron/job"
require "json"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

case ARGV.fetch(0)
when "create"
  name, cron, klass, queue = ARGV[1, 4]
  job = Sidekiq::Cron::Job.new("name" => name, "cron" => cron, "class" => klass, "queue" => queue, "args" => ["from ruby"])
  abort job.errors.join(", ") unless job.valid?
  job.save
when "list"
  puts JSON.generate(Sidekiq::Cron::Job.all.map do |job|
    { "name" => job.name, "cron" => job.cron, "status" => job.status, "klass" => job.klass.to_s, "valid" => job.valid?,
      "last_enqueue_time" => job.last_enqueue_time&.to_f }
  end)
when "tick"
  job = Sidekiq::Cron::Job.find(ARGV.fetch(1))
  before = Sidekiq::Queue.all.sum(&:size)
  at = ARGV[2] ? Time.at(Float(ARGV[2])).utc : Time.now.utc
  job.test_and_enque_for_time!(at)
  puts(Sidekiq::Queue.all.sum(&:size) > before ? "enqueued" : "skipped")
else
  abort "unknown command #{ARGV[0]}"
end
