// StatusServer: a run seen over HTTP, on one port (kj-http, its own thread).
//
//   GET  /             the status page: plain HTML and JS, no external fetches
//   GET  /status.json  the newest RunView (atoll/run_view.h) as the page reads it
//   GET  /metrics      Prometheus text format (atoll/run_metrics.h)
//   GET  /healthz      an engine's probes (atoll/probes.h): 200 or 503 and
//   GET  /readyz       a one-line reason; no token wanted
//   POST /control?action=kill&learner=N
//                      only with allow_control (a chaos run that allows it)
//
// Read-only by default. With a token, /status.json, /metrics and /control
// want "Authorization: Bearer <token>" (the page asks for it once); the page
// itself holds no data. public_metrics lets /metrics go without it, for a
// Prometheus that scrapes by annotation. Why kj-http rather than prometheus-cpp's exposer:
// the exposer serves metrics only, and the page, its JSON and the token check
// share the port (docs/observing.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "atoll/probes.h"
#include "atoll/run_view.h"
#include "atoll/status.h"

namespace prometheus {
class Registry;
}

namespace atl {

struct StatusServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 9464;  // 0: any free port (see StatusServer::port())
  // Non-empty: every data endpoint wants it as a bearer token.
  std::string token;
  // Serve POST /control (kill or stall a learner).
  bool allow_control = false;
  // Serve /metrics without the token (the page's data and control still want it).
  bool public_metrics = false;
  // The registry /metrics serves; atoll's metrics are registered in it. Null:
  // a registry of the server's own. An embedder passes theirs to serve both.
  std::shared_ptr<prometheus::Registry> registry;
};

struct StatusSource {
  std::function<RunView()> view;  // called on the server's thread
  // "kill" or "stall" learner N; returns "" when done, else why not.
  std::function<std::string(const std::string& action, uint32_t learner)> control;
  // GET /healthz and /readyz; null: ok whenever the server answers.
  std::function<ProbeAnswer()> health, ready;
};

class StatusServer {
 public:
  // Listens on host:port; fails naming the address (in use, not local, ...).
  static Result<std::unique_ptr<StatusServer>> start(StatusServerOptions options, StatusSource source);
  ~StatusServer();  // stops listening and joins the thread
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  uint16_t port() const;
  uint64_t requests() const;  // answered, refusals included

 private:
  struct Impl;
  explicit StatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The status page (runtime/status_page.html).
const std::string& status_page_html();

}  // namespace atl
