// RunMetrics and StatusServer: a view's figures in the Prometheus text
// format, and the server's endpoints, token and refusals over a real socket.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/registry.h>

#include <cmath>
#include <string>

#include "atoll/probes.h"
#include "atoll/run_metrics.h"
#include "atoll/run_view.h"
#include "atoll/status_server.h"

namespace atl {
namespace {

RunView sample_view() {
  RunView v;
  v.mode = "decoupled";
  v.learners = 2;
  v.seconds = 12.5;
  v.tokens = 4096;
  v.train_loss = 1.25;
  v.goodput = 0.75;
  v.alive = 0.5;
  v.versions = {7, 6};
  v.bytes_up = 1000;
  v.bytes_down = 250;
  v.stats.rounds = 13;
  v.stats.merged_pushes = 26;
  v.stats.late = 3;
  v.stats.stale_refused = 1;
  v.stats.rejected = 2;
  v.gateway_refusals = 5;
  v.members = 2;
  v.present = 1;
  v.joins = 3;
  v.departures = 1;
  for (uint32_t id = 0; id < 2; ++id) {
    LearnerView l;
    l.id = id;
    l.state = id == 0 ? LearnerState::kUp : LearnerState::kDown;
    l.steps = 100 + id;
    l.staleness = id * 2;
    l.restarts = id;
    l.last_reintegration_seconds = id == 1 ? 1.5 : -1;
    l.record.member = id == 0;
    v.per_learner.push_back(l);
  }
  return v;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

// One HTTP/1.1 request over a fresh connection; the whole answer.
std::string http(uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{10, 0};  // bounded: a server that never answers fails the test
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  BOOST_REQUIRE(::send(fd, request.data(), request.size(), 0) == ssize_t(request.size()));
  // Read the head, then Content-Length bytes of body: kj keeps the
  // connection open for the next request a while, as HTTP/1.1 may.
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    answer.append(buf, static_cast<size_t>(n));
    const size_t head = answer.find("\r\n\r\n");
    if (head == std::string::npos) continue;
    const size_t at = answer.find("Content-Length: ");
    const size_t length = at < head ? std::stoul(answer.substr(at + 16)) : 0;
    if (answer.size() >= head + 4 + length) break;
  }
  ::close(fd);
  return answer;
}

std::string get(uint16_t port, const std::string& path, const std::string& extra = "") {
  return http(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + "\r\n");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_metrics_test)

BOOST_AUTO_TEST_CASE(a_view_becomes_prometheus_text_with_conventional_names) {
  prometheus::Registry registry;
  RunMetrics metrics(registry);
  metrics.update(sample_view());
  const std::string text = "\n" + prometheus_text(registry);
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK(has_line(text, "# TYPE atoll_tokens_total counter"));
  BOOST_CHECK(has_line(text, "atoll_tokens_total 4096"));
  BOOST_CHECK(has_line(text, "atoll_rounds_total 13"));
  BOOST_CHECK(has_line(text, "atoll_pushes_total{result=\"merged\"} 26"));
  BOOST_CHECK(has_line(text, "atoll_pushes_total{result=\"late\"} 3"));
  BOOST_CHECK(has_line(text, "atoll_pushes_total{result=\"refused\"} 7"));  // rejects and door refusals
  BOOST_CHECK(has_line(text, "atoll_fragment_version{fragment=\"1\"} 6"));
  BOOST_CHECK(has_line(text, "atoll_transfer_bytes_total{direction=\"up\"} 1000"));
  BOOST_CHECK(has_line(text, "# TYPE atoll_goodput_ratio gauge"));
  BOOST_CHECK(has_line(text, "atoll_goodput_ratio 0.75"));
  BOOST_CHECK(has_line(text, "atoll_learner_up{learner=\"0\"} 1"));
  BOOST_CHECK(has_line(text, "atoll_learner_up{learner=\"1\"} 0"));
  BOOST_CHECK(has_line(text, "atoll_learner_staleness_versions{learner=\"1\"} 2"));
  BOOST_CHECK(has_line(text, "atoll_learner_reintegration_seconds{learner=\"1\"} 1.5"));
  // Membership: who is a member, who is present, joins and departures.
  BOOST_CHECK(has_line(text, "atoll_learners_members 2"));
  BOOST_CHECK(has_line(text, "atoll_learners_present 1"));
  BOOST_CHECK(has_line(text, "atoll_joins_total 3"));
  BOOST_CHECK(has_line(text, "atoll_departures_total 1"));
  BOOST_CHECK(has_line(text, "atoll_learner_member{learner=\"0\"} 1"));
  BOOST_CHECK(has_line(text, "atoll_learner_member{learner=\"1\"} 0"));
  // Not there until it happened, or was evaluated; no shard series without shards.
  BOOST_CHECK(text.find("atoll_learner_reintegration_seconds{learner=\"0\"}") == std::string::npos);
  BOOST_CHECK(text.find("atoll_shard_") == std::string::npos);
  BOOST_CHECK(text.find("atoll_eval_loss ") == std::string::npos);
  // Every counter is *_total, every name atoll_*.
  for (size_t at = text.find("# TYPE "); at != std::string::npos; at = text.find("# TYPE ", at + 1)) {
    const std::string line = text.substr(at, text.find('\n', at) - at);
    BOOST_CHECK_MESSAGE(line.starts_with("# TYPE atoll_"), line);
    if (line.ends_with(" counter")) BOOST_CHECK_MESSAGE(line.find("_total counter") != std::string::npos, line);
  }
}

BOOST_AUTO_TEST_CASE(a_syncer_in_shards_shows_each_shard_beside_the_runs_figures) {
  prometheus::Registry registry;
  RunMetrics metrics(registry);
  RunView v = sample_view();
  v.shards = {ShardReport{.shard = 0, .parameters = 600, .fragments = 1, .rounds = 7},
              ShardReport{.shard = 1, .parameters = 580, .fragments = 1, .rounds = 6, .versions_min = 6,
                          .recovering = true}};
  v.shards[0].counts["merged_pushes"] = 14;
  v.shards[1].counts["merged_pushes"] = 12;
  metrics.update(v);
  const std::string text = "\n" + prometheus_text(registry);
  BOOST_CHECK(has_line(text, "atoll_rounds_total 13"));  // the run's: every shard's
  BOOST_CHECK(has_line(text, "atoll_shard_parameters{shard=\"0\"} 600"));
  BOOST_CHECK(has_line(text, "atoll_shard_parameters{shard=\"1\"} 580"));
  BOOST_CHECK(has_line(text, "atoll_shard_rounds_total{shard=\"1\"} 6"));
  BOOST_CHECK(has_line(text, "atoll_shard_merged_pushes_total{shard=\"0\"} 14"));
  BOOST_CHECK(has_line(text, "atoll_shard_version_min{shard=\"1\"} 6"));
  BOOST_CHECK(has_line(text, "atoll_shard_recovering{shard=\"1\"} 1"));
  const std::string json = view_json(v);
  BOOST_CHECK(json.find("\"shards\":[{\"shard\":0,\"parameters\":600") != std::string::npos);
  // Every count of the syncer's, under its name, in the view as in the report.
  for (const SyncerCount& c : kSyncerCounts) BOOST_CHECK(json.find("\"" + std::string(c.name) + "\":") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_syncer_count_is_a_counter_of_the_run_and_of_each_shard) {
  prometheus::Registry registry;
  RunMetrics metrics(registry);
  RunView v = sample_view();
  v.shards = {ShardReport{.shard = 0}, ShardReport{.shard = 1}};
  uint64_t n = 1;
  for (const SyncerCount& c : kSyncerCounts) {
    v.stats.*c.field = 100 * n;
    v.shards[0].counts[c.name] = 10 * n;
    v.shards[1].counts[c.name] = 10 * n + 1;
    ++n;
  }
  metrics.update(v);
  const std::string text = "\n" + prometheus_text(registry);
  n = 1;
  for (const SyncerCount& c : kSyncerCounts) {
    const std::string name = c.name;
    BOOST_CHECK_MESSAGE(has_line(text, "# TYPE atoll_" + name + "_total counter"), name);
    BOOST_CHECK_MESSAGE(has_line(text, "atoll_" + name + "_total " + std::to_string(100 * n)), name);
    BOOST_CHECK_MESSAGE(has_line(text, "atoll_shard_" + name + "_total{shard=\"1\"} " + std::to_string(10 * n + 1)), name);
    BOOST_CHECK_MESSAGE(text.find(c.meaning + 1) != std::string::npos, name);  // its meaning is the help
    ++n;
  }
}

BOOST_AUTO_TEST_CASE(counters_never_go_down_and_gauges_follow) {
  prometheus::Registry registry;
  RunMetrics metrics(registry);
  RunView v = sample_view();
  metrics.update(v);
  v.tokens = 10;  // a learner process starting over reports less
  v.goodput = 0.5;
  v.eval_loss = 0.9;
  metrics.update(v);
  const std::string text = "\n" + prometheus_text(registry);
  BOOST_CHECK(has_line(text, "atoll_tokens_total 4096"));
  BOOST_CHECK(has_line(text, "atoll_goodput_ratio 0.5"));
  BOOST_CHECK(has_line(text, "atoll_eval_loss 0.9"));
}

BOOST_AUTO_TEST_CASE(a_learners_evaluations_are_the_held_out_loss_of_the_view_metrics_and_report) {
  // A model atoll does not run: its learners' evaluators (atoll.Evaluator) report to the syncer.
  auto records = make_records(2);
  SyncerSample f;
  f.versions = {4, 4};
  f.learners.resize(2);
  f.stats.evaluations = {{1.0, 1000, 0, 2, 4, 2.5, 3.6, std::nan(""), 512},
                         {2.0, 2000, 1, 4, 8, 2.0, 2.9, 0.3, 512}};
  records->publish(f);
  Topology t;
  t.learners = {{1.0, 8}, {1.0, 8}};
  const RunView v = observe_run(*records, t);
  BOOST_CHECK_EQUAL(v.eval_loss, 2.0);
  BOOST_CHECK_EQUAL(v.eval_bits_per_byte, 2.9);
  BOOST_CHECK_EQUAL(v.point().eval_loss, 2.0);  // the series, and so the loss plot's held-out line
  prometheus::Registry registry;
  RunMetrics(registry).update(v);
  BOOST_CHECK(has_line("\n" + prometheus_text(registry), "atoll_eval_loss 2"));
  const Report r = report_from_view(v, 3.0);
  BOOST_CHECK_EQUAL(r.eval.loss, 2.0);
  BOOST_CHECK_EQUAL(r.eval.accuracy, 0.3);
  BOOST_CHECK_EQUAL(r.eval.by, "learner 1's evaluator, global versions from 4, at 2 s");
  BOOST_REQUIRE_EQUAL(r.curve.size(), 2u);
  BOOST_CHECK_EQUAL(r.curve[0].tokens, 1000u);
  BOOST_CHECK(r.to_json().find("\"by\":\"learner 1's evaluator") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_server_serves_the_page_the_json_and_the_metrics) {
  StatusServerOptions options;
  options.port = 0;
  StatusSource source;
  source.view = [] { return sample_view(); };
  auto server = StatusServer::start(options, source);
  BOOST_REQUIRE_MESSAGE(server.ok(), server.status().to_string());
  const uint16_t port = (*server)->port();
  BOOST_REQUIRE_GT(port, 0);

  const std::string page = get(port, "/");
  BOOST_CHECK(page.starts_with("HTTP/1.1 200"));
  BOOST_CHECK(page.find("<table id=\"learners\">") != std::string::npos);
  BOOST_CHECK(page.find("connect-src 'self'") != std::string::npos);  // no fetches elsewhere
  BOOST_CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));  // an XML namespace, not a fetch
  BOOST_CHECK(page.find("https://") == std::string::npos);
  BOOST_CHECK(page.find(" src=") == std::string::npos);

  const std::string json = get(port, "/status.json");
  BOOST_CHECK(json.starts_with("HTTP/1.1 200"));
  BOOST_CHECK(json.find("\"versions\":[7,6]") != std::string::npos);
  BOOST_CHECK(json.find("\"control\":false") != std::string::npos);

  const std::string metrics = get(port, "/metrics");
  BOOST_CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  BOOST_CHECK(metrics.find("\natoll_tokens_total 4096\n") != std::string::npos);

  BOOST_CHECK(get(port, "/etc/passwd").starts_with("HTTP/1.1 404"));
  BOOST_CHECK(http(port, "POST /control?action=kill&learner=0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Content-Length: 0\r\n\r\n")
                  .starts_with("HTTP/1.1 403"));  // read-only by default
  BOOST_CHECK_GE((*server)->requests(), 5u);
}

BOOST_AUTO_TEST_CASE(with_a_token_the_data_wants_it_and_control_goes_by_the_callback) {
  StatusServerOptions options;
  options.port = 0;
  options.token = "a-cluster-token-of-enough-bytes";
  options.allow_control = true;
  std::string asked;
  StatusSource source;
  source.view = [] { return sample_view(); };
  source.control = [&](const std::string& action, uint32_t learner) -> std::string {
    if (learner > 1) return "there is no learner " + std::to_string(learner);
    asked = action + " " + std::to_string(learner);
    return "";
  };
  auto server = StatusServer::start(options, source);
  BOOST_REQUIRE_MESSAGE(server.ok(), server.status().to_string());
  const uint16_t port = (*server)->port();
  BOOST_CHECK(get(port, "/").starts_with("HTTP/1.1 200"));  // the page holds no data
  BOOST_CHECK(get(port, "/metrics").starts_with("HTTP/1.1 401"));
  BOOST_CHECK(get(port, "/status.json", "Authorization: Bearer wrong-token-of-enough-bytes!!\r\n").starts_with("HTTP/1.1 401"));
  const std::string bearer = "Authorization: Bearer a-cluster-token-of-enough-bytes\r\n";
  BOOST_CHECK(get(port, "/metrics", bearer).starts_with("HTTP/1.1 200"));
  BOOST_CHECK(get(port, "/status.json", bearer).find("\"control\":true") != std::string::npos);
  const auto post = [&](const std::string& query, const std::string& auth) {
    return http(port, "POST /control?" + query + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n" +
                          auth + "\r\n");
  };
  BOOST_CHECK(post("action=kill&learner=1", "").starts_with("HTTP/1.1 401"));
  BOOST_CHECK(asked.empty());
  BOOST_CHECK(post("action=stall&learner=1", bearer).starts_with("HTTP/1.1 200"));
  BOOST_CHECK_EQUAL(asked, "stall 1");
  BOOST_CHECK(post("action=kill&learner=9", bearer).find("there is no learner 9") != std::string::npos);
  BOOST_CHECK(post("action=kill&learner=x", bearer).starts_with("HTTP/1.1 400"));
  BOOST_CHECK(post("learner=1", bearer).starts_with("HTTP/1.1 400"));
}

BOOST_AUTO_TEST_CASE(probes_answer_without_the_token_and_public_metrics_too) {
  StatusServerOptions options;
  options.port = 0;
  options.token = "a-cluster-token-of-enough-bytes";
  options.public_metrics = true;
  ProbeAnswer ready{false, "the syncer is restoring its checkpoint"};
  StatusSource source;
  source.view = [] { return sample_view(); };
  source.health = [] { return ProbeAnswer{true, "alive"}; };
  source.ready = [&] { return ready; };
  auto server = StatusServer::start(options, source);
  BOOST_REQUIRE_MESSAGE(server.ok(), server.status().to_string());
  const uint16_t port = (*server)->port();
  const std::string health = get(port, "/healthz");
  BOOST_CHECK(health.starts_with("HTTP/1.1 200"));
  BOOST_CHECK(health.ends_with("\r\n\r\nalive\n"));
  const std::string not_ready = get(port, "/readyz");
  BOOST_CHECK(not_ready.starts_with("HTTP/1.1 503"));
  BOOST_CHECK(not_ready.ends_with("\r\n\r\nthe syncer is restoring its checkpoint\n"));
  ready = {true, "ready: the syncer takes learners (2 up)"};
  BOOST_CHECK(get(port, "/readyz").starts_with("HTTP/1.1 200"));
  BOOST_CHECK(get(port, "/metrics").starts_with("HTTP/1.1 200"));       // public
  BOOST_CHECK(get(port, "/status.json").starts_with("HTTP/1.1 401"));   // still wants the token
}

BOOST_AUTO_TEST_CASE(probes_follow_the_run_from_start_to_end) {
  RunView v;
  v.holds_syncer = true;
  BOOST_CHECK(probe_health(RunPhase::kStarting, v).ok);
  BOOST_CHECK(!probe_ready(RunPhase::kStarting, v).ok);
  // A syncer: ready once it restored its checkpoint.
  auto r = probe_ready(RunPhase::kRunning, v);
  BOOST_CHECK(!r.ok);
  BOOST_CHECK_EQUAL(r.reason, "the syncer is restoring its checkpoint");
  v.syncer_serving = true;
  BOOST_CHECK(probe_ready(RunPhase::kRunning, v).ok);
  BOOST_CHECK(probe_health(RunPhase::kRunning, v).ok);
  // Learners: ready once every one here was welcomed.
  RunView l;
  l.local_learners = 2;
  l.local_welcomed = 1;
  r = probe_ready(RunPhase::kRunning, l);
  BOOST_CHECK(!r.ok);
  BOOST_CHECK_EQUAL(r.reason, "1 of 2 learners here not yet welcomed by the syncer");
  l.local_welcomed = 2;
  BOOST_CHECK(probe_ready(RunPhase::kRunning, l).ok);
  // The syncer away (a connection lost, reconnecting): alive, not ready, until it is back.
  l.syncer_links_down = 1;
  r = probe_ready(RunPhase::kRunning, l);
  BOOST_CHECK(!r.ok);
  BOOST_CHECK_EQUAL(r.reason, "the syncer is away: 1 connection(s) of learners here lost, reconnecting");
  BOOST_CHECK(probe_health(RunPhase::kRunning, l).ok);
  l.syncer_links_down = 0;
  BOOST_CHECK(probe_ready(RunPhase::kRunning, l).ok);
  // Over: alive, not ready.
  l.finished = true;
  BOOST_CHECK(!probe_ready(RunPhase::kRunning, l).ok);
  BOOST_CHECK(probe_health(RunPhase::kOver, l).ok);
  BOOST_CHECK(!probe_ready(RunPhase::kOver, l).ok);
  // A run that cannot go on, or an actor given up on: not alive, and says why.
  l.failure = "no syncer shard 0 at h:7070 for 61 s (refused)";
  auto h = probe_health(RunPhase::kRunning, l);
  BOOST_CHECK(!h.ok);
  BOOST_CHECK_EQUAL(h.reason, "the run cannot go on: no syncer shard 0 at h:7070 for 61 s (refused)");
  RunView g;
  g.gave_up = {"learner 3"};
  BOOST_CHECK_EQUAL(probe_health(RunPhase::kRunning, g).reason, "gave up on learner 3");
  BOOST_CHECK(probe_health(RunPhase::kRunning, g).reason.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_is_a_clear_error) {
  StatusServerOptions options;
  options.port = 0;
  StatusSource source;
  source.view = [] { return RunView{}; };
  auto first = StatusServer::start(options, source);
  BOOST_REQUIRE(first.ok());
  options.port = (*first)->port();
  auto second = StatusServer::start(options, source);
  BOOST_REQUIRE(!second.ok());
  BOOST_TEST_MESSAGE(second.status().to_string());
  BOOST_CHECK(second.status().to_string().find("cannot serve the status page on 127.0.0.1:" +
                                               std::to_string(options.port)) != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
