# Prints what Ruby Sidekiq's API sees in Redis, as one JSON object, so the Python tests can
# compare it with what our processes wrote. `ruby inspect.rb` prints it;
# `ruby inspect.rb quiet <identity>` first sends Process#quiet! (TSTP) to that process,
# `ruby inspect.rb stop <identity>` sends Process#stop! (TERM). Redis comes from $REDIS_URL.
require "sidekiq"
require "sidekiq/api"
require "json"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

def entry(record)
  {
    "jid" => record.jid, "class" => record.klass, "display_class" => record.display_class,
    "args" => record.args, "queue" => record.queue, "score" => (record.score if record.respond_to?(:score)),
    "error_message" => record["error_message"], "error_class" => record["error_class"],
    "failed_at" => record["failed_at"], "retried_at" => record["retried_at"],
    "retry_count" => record["retry_count"], "error_backtrace" => record.error_backtrace,
    "enqueued_at" => record.enqueued_at&.to_f, "created_at" => record.created_at&.to_f,
    "error?" => (record.error? if record.respond_to?(:error?)), "item" => record.item
  }
end

command, identity = ARGV
if command
  process = Sidekiq::ProcessSet.new.find { |candidate| candidate.identity == identity }
  abort "no process #{identity.inspect} in Sidekiq::ProcessSet" unless process
  case command
  when "quiet" then process.quiet!
  when "stop" then process.stop!
  else abort "unknown command #{command.inspect}"
  end
end

stats = Sidekiq::Stats.new
report = {
  "stats" => {
    "processed" => stats.processed, "failed" => stats.failed, "enqueued" => stats.enqueued,
    "scheduled_size" => stats.scheduled_size, "retry_size" => stats.retry_size,
    "dead_size" => stats.dead_size, "processes_size" => stats.processes_size,
    "workers_size" => stats.workers_size, "queues" => stats.queues,
    "history" => Sidekiq::Stats::History.new(1).processed.transform_keys(&:to_s)
  },
  "queues" => Sidekiq::Queue.all.map { |queue|
    {"name" => queue.name, "size" => queue.size, "latency" => queue.latency, "jids" => queue.map(&:jid)}
  },
  "scheduled" => Sidekiq::ScheduledSet.new.map { |record| entry(record) },
  "retries" => Sidekiq::RetrySet.new.map { |record| entry(record) },
  "dead" => Sidekiq::DeadSet.new.map { |record| entry(record) },
  "processes" => Sidekiq::ProcessSet.new.map { |process|
    %w[identity hostname pid tag concurrency queues labels busy beat quiet rss started_at].to_h { |key| [key, process[key]] }
      .merge("stopping?" => process.stopping?)
  },
  "workers" => Sidekiq::Workers.new.map { |process_id, thread_id, work|
    {"process_id" => process_id, "thread_id" => thread_id, "queue" => work["queue"], "run_at" => work["run_at"],
     "payload" => work["payload"]}
  }
}
puts JSON.generate(report)
