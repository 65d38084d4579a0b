# Ruby side of the interop tests: loaded by a real `sidekiq -r ./worker.rb -q default -c 2`.
#
# HardWorker records every run as JSON on the Redis list "interop:ruby:runs" (read by the
# Python tests), and raises when its first argument is "fail", so a Ruby-side failure lands in
# the retry set with Sidekiq's own error fields. Redis comes from $REDIS_URL.
require "sidekiq"
require "json"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

RUNS_KEY = "interop:ruby:runs"

Sidekiq.configure_server do |config|
  # The scheduler checks `schedule` and `retry` about every second instead of every ~5 s,
  # and skips its 5-15 s start-up wait, so scheduled jobs move within the tests' budget.
  # The move itself is Sidekiq's own code (Sidekiq::Scheduled::Enq).
  config.options[:poll_interval_average] = 1
end

module Sidekiq
  module Scheduled
    class Poller
      private

      def initial_wait; end
    end
  end
end

class HardWorker
  include Sidekiq::Worker

  def perform(*args)
    raise ArgumentError, "HardWorker was told to fail: #{args.inspect}" if args.first == "fail"

    Sidekiq.redis do |conn|
      conn.rpush(RUNS_KEY, JSON.generate(
        "jid" => jid, "class" => self.class.name, "args" => args, "ran_at" => Time.now.to_f
      ))
    end
  end
end
