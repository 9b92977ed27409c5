#include "atoll/status_server.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <openssl/crypto.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>

#include "atoll/event_loop_thread.h"
#include "atoll/log.h"
#include "atoll/run_metrics.h"

namespace atl {
namespace {

std::string describe(const kj::Exception& e) { return kj_reason(e); }

// "a=1&b=x" -> {a: 1, b: x}. Values are ids and words: no percent-decoding needed.
std::map<std::string, std::string> query_of(const std::string& url) {
  std::map<std::string, std::string> q;
  const size_t start = url.find('?');
  if (start == std::string::npos) return q;
  std::string rest = url.substr(start + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t amp = std::min(rest.find('&', pos), rest.size());
    const std::string pair = rest.substr(pos, amp - pos);
    const size_t eq = pair.find('=');
    if (eq != std::string::npos) q[pair.substr(0, eq)] = pair.substr(eq + 1);
    pos = amp + 1;
  }
  return q;
}

}  // namespace

struct StatusServer::Impl {
  StatusServerOptions opt;
  StatusSource source;
  std::unique_ptr<RunMetrics> metrics;
  uint16_t port = 0;
  std::atomic<uint64_t> requests{0};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"  // kj's interface; never deleted through it
  class Service final : public kj::HttpService {
   public:
    Service(Impl& impl, const kj::HttpHeaderTable& table, kj::HttpHeaderId authorization)
        : impl_(impl), table_(table), authorization_(authorization) {}

    kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                              kj::AsyncInputStream&, Response& response) override {
      ++impl_.requests;
      const bool get = method == kj::HttpMethod::GET || method == kj::HttpMethod::HEAD;  // kj drops HEAD's body
      const std::string full(url.cStr());
      const std::string path = full.substr(0, full.find('?'));
      if (get && (path == "/" || path == "/index.html"))
        return send(response, 200, "OK", "text/html; charset=utf-8", status_page_html());
      if (get && (path == "/healthz" || path == "/readyz")) {
        const auto& ask = path == "/healthz" ? impl_.source.health : impl_.source.ready;
        const ProbeAnswer a = ask ? ask() : ProbeAnswer{true, "serving"};
        return send(response, a.ok ? 200 : 503, a.ok ? "OK" : "Service Unavailable", "text/plain", a.reason + "\n");
      }
      if (path != "/status.json" && path != "/metrics" && path != "/control")
        return send(response, 404, "Not Found", "text/plain",
                    "not found: the page is at /, metrics at /metrics, probes at /healthz and /readyz\n");
      if (!(path == "/metrics" && impl_.opt.public_metrics) && !authorized(headers))
        return send(response, 401, "Unauthorized", "text/plain",
                    "this run wants its cluster token: Authorization: Bearer <token>\n");
      if (path == "/control") {
        if (method != kj::HttpMethod::POST) return send(response, 405, "Method Not Allowed", "text/plain", "POST only\n");
        return control(full, response);
      }
      if (!get) return send(response, 405, "Method Not Allowed", "text/plain", "GET only\n");
      const RunView view = impl_.source.view();
      if (path == "/status.json") {
        std::string json = view_json(view);
        // Whether the page may offer its controls.
        json.insert(json.size() - 1, std::string(",\"control\":") + (control_on() ? "true" : "false"));
        return send(response, 200, "OK", "application/json", json);
      }
      impl_.metrics->update(view);
      return send(response, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", prometheus_text(*impl_.opt.registry));
    }

   private:
    bool control_on() const { return impl_.opt.allow_control && impl_.source.control; }

    bool authorized(const kj::HttpHeaders& headers) const {
      const std::string& token = impl_.opt.token;
      if (token.empty()) return true;
      KJ_IF_MAYBE(value, headers.get(authorization_)) {
        const std::string expected = "Bearer " + token;
        const std::string given(value->cStr());
        return given.size() == expected.size() && CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
      }
      return false;
    }

    kj::Promise<void> control(const std::string& url, Response& response) {
      if (!control_on())
        return send(response, 403, "Forbidden", "text/plain",
                    "control is off: start the run with a fault plan and --allow-control\n");
      const auto q = query_of(url);
      const auto action = q.find("action"), learner = q.find("learner");
      if (action == q.end() || learner == q.end())
        return send(response, 400, "Bad Request", "text/plain", "want ?action=kill|stall&learner=N\n");
      char* end = nullptr;
      const unsigned long id = std::strtoul(learner->second.c_str(), &end, 10);
      if (learner->second.empty() || *end != '\0' || id > UINT32_MAX)
        return send(response, 400, "Bad Request", "text/plain", "learner must be a learner id\n");
      const std::string why = impl_.source.control(action->second, static_cast<uint32_t>(id));
      if (!why.empty()) return send(response, 409, "Conflict", "text/plain", why + "\n");
      log_warn("status page: " + action->second + " learner " + std::to_string(id));
      return send(response, 200, "OK", "application/json", "{\"done\":true}");
    }

    kj::Promise<void> send(Response& response, unsigned code, kj::StringPtr status, kj::StringPtr type,
                           const std::string& body) {
      kj::HttpHeaders headers(table_);
      headers.set(kj::HttpHeaderId::CONTENT_TYPE, type);
      headers.add("Cache-Control", "no-store");
      // The page runs no code from elsewhere and fetches only from here.
      headers.add("Content-Security-Policy",
                  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'");
      auto copy = kj::heapString(body.data(), body.size());
      auto out = response.send(code, status, headers, copy.size());
      auto written = out->write(copy.begin(), copy.size());
      return written.attach(kj::mv(out), kj::mv(copy));
    }

    Impl& impl_;
    const kj::HttpHeaderTable& table_;
    kj::HttpHeaderId authorization_;
  };
#pragma GCC diagnostic pop

  // Last: destroyed first, it ends the loop while the rest is still there.
  std::unique_ptr<EventLoopThread> thread;
};

StatusServer::StatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<StatusServer>> StatusServer::start(StatusServerOptions options, StatusSource source) {
  if (!source.view) return Status::invalid_argument("a status server needs a view of the run");
  auto impl = std::make_unique<Impl>();
  if (!options.registry) options.registry = std::make_shared<prometheus::Registry>();
  impl->metrics = std::make_unique<RunMetrics>(*options.registry);
  impl->opt = std::move(options);
  impl->source = std::move(source);

  Impl* raw = impl.get();
  auto thread = EventLoopThread::start("status server", [raw](kj::AsyncIoContext& io, const std::function<void()>& serve) {
    kj::HttpHeaderTable::Builder builder;
    const kj::HttpHeaderId authorization = builder.add("Authorization");
    auto table = builder.build();
    Impl::Service service(*raw, *table, authorization);
    kj::HttpServer server(io.provider->getTimer(), *table, service);
    const std::string host = raw->opt.host.empty() ? "*" : raw->opt.host;
    auto address = io.provider->getNetwork().parseAddress(host, raw->opt.port).wait(io.waitScope);
    auto listener = address->listen();
    raw->port = static_cast<uint16_t>(listener->getPort());
    auto serving = server.listenHttp(*listener).eagerlyEvaluate([](kj::Exception&& e) {
      log_error("status server: " + describe(e));
    });
    serve();
  });
  if (!thread.ok())
    return thread.status().with_context("cannot serve the status page on " + impl->opt.host + ":" +
                                        std::to_string(impl->opt.port));
  impl->thread = std::move(*thread);
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(impl)));
}

StatusServer::~StatusServer() { impl_->thread.reset(); }

uint16_t StatusServer::port() const { return impl_->port; }
uint64_t StatusServer::requests() const { return impl_->requests.load(); }

}  // namespace atl
