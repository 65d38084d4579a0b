# Ruby producer of bench/side_by_side.py, with Sidekiq's own client. Redis from $REDIS_URL.
#
#   ruby producer.rb stage COUNT CLASS QUEUE ARGS_JSON   push_bulk COUNT jobs (1,000 per call)
#   ruby producer.rb single COUNT                        prints jobs/s and CPU us per push of one NoopJob perform_async at a time
#   ruby producer.rb bulk COUNT                          prints jobs/s of push_bulk, 1,000 per call
#   ruby producer.rb timed COUNT                         prints p50 and p99 microseconds of one NoopJob.perform_async
#   ruby producer.rb steady RATE SECONDS QUEUE           LatencyProbe at a steady rate, arg = now
#   ruby producer.rb calibrate MICROSECONDS              prints Bench.spin iterations taking that long
require "sidekiq"
require "json"
require_relative "jobs"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

def clock
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def push_in_batches(count, klass, queue, args)
  count.times.each_slice(1000) do |slice|
    Sidekiq::Client.push_bulk("class" => klass, "queue" => queue, "args" => Array.new(slice.size) { args })
  end
end

case ARGV[0]
when "stage"
  push_in_batches(Integer(ARGV[1]), ARGV[2], ARGV[3], JSON.parse(ARGV[4]))
when "single"
  # as bench/side_by_side.py's own loop: the setter made once, then perform_async one at a time
  count = Integer(ARGV[1])
  producer = NoopJob.set(queue: "enqueue")
  producer.perform_async(-1) # connects, as the Python side's client has already
  cpu_started = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  started = clock
  count.times { |index| producer.perform_async(index) }
  elapsed = clock - started
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu_started
  puts "#{count / elapsed} #{cpu * 1_000_000 / count}"
when "bulk"
  count = Integer(ARGV[1])
  started = clock
  count.times.each_slice(1000) do |slice|
    Sidekiq::Client.push_bulk("class" => "NoopJob", "queue" => "enqueue", "args" => slice.map { |index| [index] })
  end
  puts count / (clock - started)
when "timed"
  count = Integer(ARGV[1])
  producer = NoopJob.set(queue: "enqueue")
  producer.perform_async(-1)
  samples = Array.new(count) do |index|
    started = clock
    producer.perform_async(index)
    (clock - started) * 1_000_000
  end
  samples.sort!
  puts "#{samples[(0.5 * (count - 1)).round]} #{samples[(0.99 * (count - 1)).round]}"
when "steady"
  rate = Float(ARGV[1])
  total = (rate * Float(ARGV[2])).to_i
  started = clock
  total.times do |index|
    delay = started + index / rate - clock
    sleep delay if delay > 0
    Sidekiq::Client.push("class" => "LatencyProbe", "queue" => ARGV[3], "args" => [Time.now.to_f])
  end
when "calibrate"
  seconds = Float(ARGV[1]) / 1_000_000
  iterations = 10_000
  Bench.spin(iterations) # warm up
  runs = 200
  started = clock
  runs.times { Bench.spin(iterations) }
  per_run = (clock - started) / runs
  puts (iterations * seconds / per_run).round
else
  abort "unknown mode #{ARGV[0].inspect}"
end
