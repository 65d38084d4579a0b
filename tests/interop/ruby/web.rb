# Renders pages of Sidekiq 6.4's own Web UI (Sidekiq::Web, a Rack app) in-process with
# Rack::MockRequest, against $REDIS_URL, and prints {path: {"status": n, "body": html}} as JSON.
# Usage: ruby web.rb /busy /retries /morgue ...
require "json"
require "sidekiq"
require "sidekiq/web"
require "rack/mock"

Sidekiq.configure_client { |config| config.redis = { url: ENV.fetch("REDIS_URL") } }
app = Rack::Builder.new do
  use Rack::Session::Cookie, secret: "interop-test-only-" * 4, same_site: true, max_age: 3600
  run Sidekiq::Web
end
pages = ARGV.to_h do |path|
  response = Rack::MockRequest.new(app).get(path)
  [path, { "status" => response.status, "body" => response.body }]
end
puts JSON.generate(pages)
