# Ruby side of bench/side_by_side.py: loaded by real `sidekiq -r ./jobs.rb -q bench -c N` processes.
#
# The job bodies are the same as bench/jobs.py's: empty; one Redis INCR on the job's own pool
# connection; one INCR through a pool of plain Redis.new clients made in this file; a 1 ms sleep;
# a fixed CPU loop (calibrated by the benchmark to ~100 us in each language) plus one INCR; a
# latency probe. Logging is at WARN, as in Sidekiq's own load test, unless
# BENCH_LOGGING asks for Sidekiq's default (INFO: a start and a done line per job).
#
# Completion: Sidekiq flushes its `stat:processed` counter only every 5 s, so a server middleware
# counts finished jobs in memory and one thread per process writes the count to
# `bench:sidekiq:done:<pid>` every 5 ms (about one microsecond per job; no Redis call per job).
require "sidekiq"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

# The job file's own client, made as a Ruby user of threaded jobs makes one: a pool of plain
# Redis.new clients (the connection_pool gem, which Sidekiq itself depends on), one connection per
# thread that needs one, as redis-py's pool gives each thread of the Python side its own socket.
# Not Sidekiq's pool (the incr job uses that), and not one Redis.new shared by every thread (one
# socket behind a mutex: the threads would queue for it). The pool opens connections as they are
# needed, so its size is only a bound, above any -c the benchmark runs.
require "connection_pool"

USER_REDIS = ConnectionPool.new(size: 64, timeout: 5) { Redis.new(url: ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0")) }

module Bench
  LOCK = Mutex.new
  @done = 0

  def self.done
    @done
  end

  def self.finished
    LOCK.synchronize { @done += 1 }
  end

  class Counting
    def call(_worker, _job, _queue)
      yield
    ensure
      Bench.finished
    end
  end

  def self.spin(iterations)
    total = 0
    index = 0
    while index < iterations
      total += index * index
      index += 1
    end
    total
  end
end

Sidekiq.configure_server do |config|
  Sidekiq.logger.level = Logger::WARN if ENV.fetch("BENCH_LOGGING", "quiet") == "quiet" # else its default, INFO
  config.server_middleware { |chain| chain.add Bench::Counting }
  config.on(:startup) do
    Thread.new do
      key = "bench:sidekiq:done:#{Process.pid}"
      last = -1
      loop do
        value = Bench.done
        if value != last
          Sidekiq.redis { |conn| conn.set(key, value) }
          last = value
        end
        sleep 0.005
      end
    end
  end
end

class NoopJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(*_args); end
end

class IncrJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(*_args)
    Sidekiq.redis { |conn| conn.incr("bench:counter") }
  end
end

class PlainIncrJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(*_args)
    USER_REDIS.with { |conn| conn.incr("bench:counter") }
  end
end

class SleepJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(*_args)
    sleep 0.001
  end
end

class CpuJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(iterations)
    Bench.spin(iterations)
    Sidekiq.redis { |conn| conn.incr("bench:counter") }
  end
end

class LatencyProbe
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(enqueued_at)
    started = Time.now.to_f
    Sidekiq.redis { |conn| conn.rpush("bench:latency", (started - enqueued_at).to_s) }
  end
end
