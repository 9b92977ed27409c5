#include "atoll/run.h"

#include <caf/all.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <numbers>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors.h"
#include "run_hooks.h"
#include "atoll/atoms.h"
#include "atoll/cluster.h"
#include "atoll/cluster_token.h"
#include "atoll/incarnation.h"
#include "atoll/log.h"
#include "atoll/model_file.h"
#include "atoll/module_layout.h"
#include "atoll/syncer_core.h"
#include "atoll/transformer.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSnapshotTimeout = std::chrono::seconds(30);
// How long the end of a run waits for the syncer's last rounds (bounded by
// its own flush timeout, at most 30 s), and for a syncer that is not there.
constexpr auto kSealTimeout = std::chrono::seconds(45);
constexpr auto kNoSyncerTimeout = std::chrono::seconds(3);

// How long the end of a process waits for what its door still has to send
// (a last push, the syncer's Done).
constexpr double kDrainSeconds = 5.0;

struct Config : caf::actor_system_config {
  explicit Config(int threads) {
    register_types(*this);
    set("scheduler.max-threads", threads);
  }
};

// Which learners run in this process: all of them, none (the syncer's
// process) or the ones named (a learner process).
Result<std::vector<uint32_t>> local_learners(const Topology& topology, const RunOptions::Cluster& c) {
  const size_t m = topology.learners.size();
  if (!c.listen.empty()) return std::vector<uint32_t>{};
  std::vector<uint32_t> ids;
  if (c.join.empty()) {
    for (uint32_t id = 0; id < m; ++id) ids.push_back(id);
    return ids;
  }
  if (c.learner_ids.empty()) return Status::invalid_argument("a joining process needs at least one learner id");
  for (uint32_t id : c.learner_ids) {
    if (id >= m)
      return Status::invalid_argument("learner id " + std::to_string(id) + " is not in this topology of " +
                                      std::to_string(m) + " learners (ids 0.." + std::to_string(m - 1) + ")");
    if (std::find(ids.begin(), ids.end(), id) != ids.end())
      return Status::invalid_argument("learner id " + std::to_string(id) + " is given twice");
    ids.push_back(id);
  }
  return ids;
}

std::string default_run_name() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "run-%Y%m%d-%H%M%S", &tm);
  return std::string(buf) + "-" + std::to_string(::getpid());
}

// `theta` on the held-out data, on every core. Each thread builds its model
// again from the topology: a TorchScript file may have gone or changed since
// the run began, and then the loss is NaN, with the reason logged, never a
// model of another layout reading past `theta`.
EvalSums evaluate_global(const Topology& topology, const Job& job, std::span<const float> theta) {
  auto first = make_model(topology);
  if (!first.ok() || (*first)->layout().size() != theta.size()) {
    log_error("held-out evaluation skipped: " +
              (first.ok() ? std::string("the model's layout changed during the run") : first.status().to_string()));
    EvalSums none;
    none.loss_sum = std::numeric_limits<double>::quiet_NaN();
    none.count = 1;
    return none;
  }
  const uint64_t fingerprint = (*first)->layout().fingerprint();
  return evaluate_all(
      [&]() -> std::unique_ptr<Model> {
        auto m = make_model(topology);
        if (m.ok() && (*m)->layout().fingerprint() == fingerprint) return std::move(*m);
        return nullptr;
      },
      theta, job.eval_batches());
}

// The model's description for the report, or why it could not be built again.
std::string describe_model(const Result<std::unique_ptr<Model>>& model) {
  return model.ok() ? (*model)->describe() : "(model not rebuilt: " + model.status().to_string() + ")";
}

}  // namespace

struct Run::Impl {
  Topology topology;
  RunOptions options;
  std::string checkpoint_dir;
  std::shared_ptr<const Job> job;
  std::shared_ptr<Directory> directory = std::make_shared<Directory>();
  std::shared_ptr<RunBoard> board = std::make_shared<RunBoard>();
  std::unique_ptr<Config> config;
  std::unique_ptr<caf::actor_system> system;
  // Declared after the system, so destroyed before it: no task may outlive it.
  std::unique_ptr<ComputePool> pool;
  caf::actor root;
  Clock::time_point started;
  bool waited = false;
  std::vector<uint32_t> local_ids;  // learners in this process
  bool joined = false;              // the syncer is in another process
  DoorService door;                 // across processes: the gateway or the link, and their door
  uint16_t port = 0;
  std::vector<float> theta;  // the global model at the end
  // Supervisors and the syncer record restarts and recoveries here: the
  // hooks' tape (a chaos run), else one in memory.
  std::shared_ptr<EventTape> tape;
  RunWatch watch;
  // Samples the run into `watch` until the run is waited for.
  std::thread sampler;
  std::mutex sampler_mu;
  std::condition_variable sampler_cv;
  bool sampling = false;

  RunView observe() const { return observe_run(*board, topology, tape.get()); }

  void start_sampler() {
    sampling = true;
    sampler = std::thread([this] {
      std::unique_lock lock(sampler_mu);
      while (sampling) {
        lock.unlock();
        watch.update(observe());
        lock.lock();
        sampler_cv.wait_for(lock, std::chrono::milliseconds(250), [this] { return !sampling; });
      }
    });
  }
  bool over = false;  // the sampler stopped: the watch holds the final view
  void stop_sampler() {
    if (over) return;
    {
      std::lock_guard lock(sampler_mu);
      sampling = false;
    }
    sampler_cv.notify_all();
    if (sampler.joinable()) sampler.join();
    watch.update(observe());  // the last word: the run's end is the series' last point
    over = true;
  }

  void shut_down() {
    stop_sampler();
    if (!system) return;
    if (door.actor) caf::anon_send_exit(door.actor, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    system->await_all_actors_done();
    pool->wait_idle();
    // Every actor is done, so nothing more is queued: what is, goes out.
    if (door.door) door.door->drain(kDrainSeconds);
    door = {};
  }

  Result<Report> learner_side_report(double wall);
};

Run::Run(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Run::~Run() {
  if (impl_ && !impl_->waited) impl_->shut_down();
}

Result<std::unique_ptr<Run>> Run::start(const Topology& topology, RunOptions options, const RunHooks* hooks) {
  const RunHooks none;
  const RunHooks& h = hooks ? *hooks : none;
  ATOLL_RETURN_IF_ERROR(validate(topology));
  // Build the syncer's core once here, so that a topology the model cannot
  // satisfy fails now, with its reason, rather than in a restart loop. A
  // learner trained outside atoll brings its layout: this process may not be
  // able to build the model (a TorchScript run, and no libtorch here).
  size_t max_message_bytes = 0;
  std::vector<NamedShape> layout;  // told to learners that ask for the topology
  if (options.external) {
    max_message_bytes = SyncerCore::max_message_bytes(options.external->layout().size());
  } else {
    auto probe = SyncerCore::create(topology, Clock::now());
    if (!probe.ok()) return probe.status();
    max_message_bytes = (*probe)->max_message_bytes();
    layout = shapes_of((*probe)->layout());
  }
  const auto& cluster = options.cluster;
  if (!cluster.listen.empty() && !cluster.join.empty())
    return Status::invalid_argument("a process either listens (it holds the syncer) or joins (it holds learners), not both");
  std::optional<Endpoint> listen_at, join_at;
  if (!cluster.listen.empty() || !cluster.join.empty()) {
    if (cluster.token.size() < kMinTokenBytes)
      return Status::invalid_argument("a run across processes needs a cluster token of at least " +
                                      std::to_string(kMinTokenBytes) + " bytes");
    auto endpoint = parse_endpoint(cluster.listen.empty() ? cluster.join : cluster.listen);
    if (!endpoint.ok()) return endpoint.status();
    (cluster.listen.empty() ? join_at : listen_at) = *endpoint;
  }
  auto local_ids = local_learners(topology, cluster);
  if (!local_ids.ok()) return local_ids.status();
  if (options.external && (!join_at || local_ids->size() != 1))
    return Status::invalid_argument("a learner trained outside atoll joins a syncer in another process, alone");
  if (!options.external && !local_ids->empty() && topology.model.kind == ModelKind::kExternal)
    return Status::invalid_argument("model.kind = \"external\": atoll runs no learner of this model; run `atoll "
                                    "syncer` and start Python learners (atoll.Learner) that join it");
  auto impl = std::make_unique<Impl>();
  impl->local_ids = *local_ids;
  impl->joined = join_at.has_value();
  impl->topology = topology;
  impl->options = options;
  if (impl->options.data_root.empty()) impl->options.data_root = default_data_root();
  if (options.external) {
    impl->job = Job::without_data(topology, "the learner's own (trained outside atoll)");
  } else {
    auto job = Job::load(topology, impl->options.data_root);
    if (!job.ok()) return job.status();
    impl->job = std::move(*job);
  }
  const int m = static_cast<int>(topology.learners.size());
  impl->pool = std::make_unique<ComputePool>(options.compute_threads);
  impl->config = std::make_unique<Config>(std::max(1, options.control_threads));
  impl->system = std::make_unique<caf::actor_system>(*impl->config);
  auto& sys = *impl->system;

  std::shared_ptr<CheckpointStore> store;
  if (!topology.checkpoint.dir.empty() && !impl->joined) {
    impl->checkpoint_dir =
        topology.checkpoint.dir + "/" + (options.run_name.empty() ? default_run_name() : options.run_name);
    auto opened = CheckpointStore::open(impl->checkpoint_dir, topology.checkpoint.keep);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  }

  const auto supervisor_spec = [&](const char* name, SupervisorSpec::Strategy strategy) {
    SupervisorSpec spec;
    spec.name = name;
    spec.strategy = strategy;
    spec.max_restarts = options.max_restarts;
    spec.window_seconds = options.restart_window_seconds;
    spec.board = impl->board;
    spec.tape = impl->tape;
    spec.restart_hold = h.restart_hold;
    spec.directory = impl->directory;
    return spec;
  };
  impl->board->plan_snapshots(options.curve_points, topology.tokens,
                              options.seconds > 0 ? options.seconds : topology.seconds);
  impl->started = Clock::now();
  const auto started = impl->started;
  if (h.tape) {
    impl->tape = h.tape;
  } else {
    auto tape = EventTape::open("", started);
    if (!tape.ok()) return tape.status();
    impl->tape = std::move(*tape);
  }
  SupervisorSpec syncers = supervisor_spec("syncer supervisor", SupervisorSpec::Strategy::kRestForOne);
  if (store)
    syncers.children.push_back({"checkpointer", [store, dir = impl->directory, board = impl->board](
                                                    caf::actor_system& s, uint64_t) {
                                  return spawn_checkpointer(s, store, dir, board);
                                }});
  syncers.children.push_back({"syncer", [t = topology, dir = impl->directory, board = impl->board, started,
                                         faults = h.message_faults, tape = impl->tape,
                                         token = cluster.token](caf::actor_system& s, uint64_t) {
                                return spawn_syncer(s, SyncerArgs{t, dir, board, true, 0.1, started, faults, tape, token});
                              }});

  SupervisorSpec learners = supervisor_spec("learner supervisor", SupervisorSpec::Strategy::kOneForOne);
  // Incarnations count for the whole run, even if the learner supervisor
  // itself is restarted: the syncer tells incarnations apart by number. A
  // learner process starts above any process before it (atoll/incarnation.h).
  const uint64_t first_incarnation = impl->joined ? incarnation_base() : 0;
  for (uint32_t id : impl->local_ids) {
    auto incarnations = std::make_shared<std::atomic<uint64_t>>(first_incarnation);
    learners.children.push_back({Directory::learner(id), [id, job = impl->job, dir = impl->directory,
                                                          pool = impl->pool.get(), incarnations, board = impl->board,
                                                          faults = h.message_faults, token = cluster.token,
                                                          external = options.external](caf::actor_system& s, uint64_t) {
                                   return spawn_learner(s, LearnerArgs{id, ++*incarnations, job, dir, pool, board,
                                                                       faults, token, external});
                                 }});
  }

  SupervisorSpec root = supervisor_spec("root supervisor", SupervisorSpec::Strategy::kOneForOne);
  if (!impl->joined)
    root.children.push_back({"syncer supervisor", [syncers](caf::actor_system& s, uint64_t) {
                               return spawn_supervisor(s, syncers);
                             }});
  if (!impl->local_ids.empty())
    root.children.push_back({"learner supervisor", [learners](caf::actor_system& s, uint64_t) {
                               return spawn_supervisor(s, learners);
                             }});
  const RunContext context{topology, impl->directory, impl->board, started};
  for (const auto& [name, spawn] : h.children)
    root.children.push_back({name, [spawn, context](caf::actor_system& s, uint64_t) { return spawn(s, context); }});
  impl->root = spawn_supervisor(sys, std::move(root));
  if (listen_at) {
    if (!cluster.tls())
      log_warn("serving learners over plain TCP: anyone on the path can read and alter the traffic "
               "(the cluster token still decides who joins); give --tls-cert, --tls-key and --tls-ca, or run inside a VPN");
    auto served = serve_learners(sys, GatewayArgs{topology, layout, impl->directory, impl->board, max_message_bytes, nullptr},
                                 *listen_at, cluster);
    if (!served.ok()) {
      impl->shut_down();
      return served.status();
    }
    impl->door = std::move(*served);
    impl->port = impl->door.port;
    log_info("serving learners on " + listen_at->host + ":" + std::to_string(impl->port) +
             (cluster.tls() ? " (TLS 1.3, learner certificates required)" : " (plain TCP)") +
             (cluster.link.active() ? "; emulated link " + cluster.link.to_string() : ""));
  }
  if (join_at) {
    auto joined = join_syncer(sys,
                              SyncerLinkArgs{join_at->host, join_at->port, impl->local_ids, impl->directory,
                                             impl->board, cluster.give_up_seconds, max_message_bytes, nullptr},
                              cluster, static_cast<uint32_t>(m));
    if (!joined.ok()) {
      impl->shut_down();
      return joined.status();
    }
    impl->door = std::move(*joined);
    if (!cluster.tls()) log_warn("joining over plain TCP: the traffic is not encrypted");
  }
  impl->start_sampler();
  log_info("run started: " + std::to_string(impl->local_ids.size()) + " of " + std::to_string(m) + " learners here, " + mode_name(topology.mode) + ", " +
           impl->job->description() + (store ? ", checkpoints in " + impl->checkpoint_dir : ""));
  return std::unique_ptr<Run>(new Run(std::move(impl)));
}

const Topology& Run::topology() const { return impl_->topology; }
std::string Run::failure() const { return impl_->board->failure(); }
uint16_t Run::port() const { return impl_->port; }
const std::string& Run::checkpoint_dir() const { return impl_->checkpoint_dir; }
RunView Run::view() const {
  if (impl_->over) return impl_->watch.view();  // the final view, with the held-out evaluation
  RunView v = impl_->observe();
  v.series = impl_->watch.series();
  return v;
}
bool Run::finished() const { return impl_->board->finished(); }
void Run::stop() {
  impl_->board->finish();
  if (caf::actor syncer = impl_->directory->get(Directory::kSyncer))
    caf::anon_send(syncer, end_atom_v, std::string("the run was stopped"));
}

const std::vector<float>& Run::parameters() const { return impl_->theta; }

// A kill or stall from outside the run is a fault like a planned one: on the
// tape, so that a chaos run's verdict and the plots account for it.
bool Run::kill_learner(uint32_t id) {
  caf::actor learner = impl_->directory->get(Directory::learner(id));
  if (!learner) return false;
  impl_->tape->record("inject", {{"kind", std::string("kill")}, {"hit", int64_t{1}}, {"learner", int64_t{id}},
                                 {"by", std::string("Run::kill_learner")}});
  caf::anon_send_exit(learner, caf::exit_reason::kill);
  return true;
}

bool Run::stall_learner(uint32_t id, double seconds) {
  caf::actor learner = impl_->directory->get(Directory::learner(id));
  if (!learner) return false;
  impl_->tape->record("inject", {{"kind", std::string("stall")}, {"hit", int64_t{1}}, {"learner", int64_t{id}},
                                 {"duration", seconds}, {"by", std::string("Run::stall_learner")}});
  caf::anon_send(learner, stall_atom_v, seconds);
  return true;
}

// A learner process knows what its learners adopted and how often they
// restarted; training totals and quality are the syncer's to report.
Result<Report> Run::Impl::learner_side_report(double wall) {
  Impl& s = *this;
  s.shut_down();
  if (const std::string failure = s.board->failure(); !failure.empty()) return Status::unavailable(failure);
  Report r;
  r.mode = mode_name(s.topology.mode);
  r.data = s.job->description();
  r.learners = static_cast<int>(s.local_ids.size());
  r.wall_seconds = wall;
  r.restarts = s.board->restarts();
  r.regressions_refused = s.board->regressions_refused.load();
  r.max_adopted_versions = s.board->max_adopted();
  r.gave_up = s.board->gave_up();
  for (uint32_t id : s.local_ids) {
    LearnerReport l;
    l.id = id;
    l.speed = s.topology.learners[id].speed;
    l.batch_size = s.topology.learners[id].batch_size;
    l.restarts = s.board->restarts_of(Directory::learner(id));
    l.gave_up = std::find(r.gave_up.begin(), r.gave_up.end(), Directory::learner(id)) != r.gave_up.end();
    r.per_learner.push_back(l);
  }
  r.model = describe_model(make_model(s.topology));
  r.eval.loss = r.eval.accuracy = std::numeric_limits<double>::quiet_NaN();
  return r;
}

Result<Report> Run::wait() {
  Impl& s = *impl_;
  if (s.waited) return Status::invalid_argument("Run::wait() was already called");
  s.waited = true;
  const double limit = s.options.seconds > 0 ? s.options.seconds : s.topology.seconds;
  const auto deadline = limit > 0 ? s.started + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(limit))
                                  : Clock::time_point::max();
  // Also end when the run cannot go on: the syncer, or every learner, given up.
  for (;;) {
    const auto step = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
    if (s.board->wait_finished_until(step) || Clock::now() >= deadline) break;
    const auto gave_up = s.board->gave_up();
    size_t learners_lost = 0;
    bool syncer_lost = false;
    for (const auto& g : gave_up) {
      learners_lost += g.starts_with("learner ") ? 1 : 0;
      syncer_lost |= g == "syncer" || g == "checkpointer" || g.ends_with("supervisor");
    }
    if (syncer_lost || (!s.local_ids.empty() && learners_lost == s.local_ids.size())) {
      log_error("the run cannot go on: gave up on " + std::string(syncer_lost ? "the syncer" : "every learner"));
      break;
    }
  }
  s.board->finish();  // also when the time limit ended the run
  // The syncer's last rounds merge what the learners did since their last
  // push; then the model is final (sealed).
  if (!s.joined) {
    // Told by message; a syncer restarted since is told again.
    const auto give_up = Clock::now() + kSealTimeout;
    auto syncer_seen = Clock::now();
    caf::actor told;
    do {
      if (caf::actor syncer = s.directory->get(Directory::kSyncer)) {
        syncer_seen = Clock::now();
        if (syncer != told) caf::anon_send(syncer, end_atom_v, std::string("the run was stopped"));
        told = syncer;
      } else if (Clock::now() - syncer_seen > kNoSyncerTimeout) {
        break;
      }
    } while (!s.board->wait_sealed_until(std::min(give_up, Clock::now() + std::chrono::milliseconds(50))) &&
             Clock::now() < give_up);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - s.started).count();

  // Learners stop first, so that no round closes after the global model is read.
  if (caf::actor learners = s.directory->get("learner supervisor")) {
    caf::anon_send_exit(learners, caf::exit_reason::user_shutdown);
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    const auto any_learner = [&] {
      for (uint32_t id = 0; id < s.topology.learners.size(); ++id)
        if (s.directory->get(Directory::learner(id))) return true;
      return false;
    };
    while ((s.directory->get("learner supervisor") || any_learner()) && Clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  if (s.joined) return s.learner_side_report(wall);

  // The global model, straight from the syncer.
  std::vector<float>& theta = s.theta;
  std::vector<uint64_t> versions;
  if (caf::actor syncer = s.directory->get(Directory::kSyncer)) {
    caf::scoped_actor self{*s.system};
    self->send(syncer, seal_atom_v);  // before the snapshot: one sender, in order
    self->request(syncer, kSnapshotTimeout, snapshot_atom_v)
        .receive(
            [&](Packet& p) {
              auto msg = decode_message(p.bytes);
              if (!msg.ok() || !std::holds_alternative<Welcome>(*msg)) return;
              auto model = make_model(s.topology);
              if (!model.ok()) return;  // its file went away: no snapshot
              auto fragments = plan_fragments((*model)->layout(), static_cast<int>(std::get<Welcome>(*msg).fragments.size()));
              if (!fragments.ok()) return;
              theta.assign((*model)->layout().size(), 0.0f);
              for (const auto& fv : std::get<Welcome>(*msg).fragments) {
                if (fv.fragment >= fragments->size()) continue;
                std::vector<float> values((*fragments)[fv.fragment].size);
                if (decode_payload(fv.values, values).ok()) scatter((*fragments)[fv.fragment], values, theta);
              }
            },
            [&](caf::error& e) { log_error("no snapshot from the syncer: " + to_string(e)); });
  } else {
    log_error("the syncer is not running at the end of the run");
  }
  s.shut_down();

  // The run's last view (shut_down() took it): the report's figures come from it.
  const RunView view = s.watch.view();
  Report r = report_from_view(view, wall);
  r.data = s.job->description();
  auto model = make_model(s.topology);
  r.model = describe_model(model);
  if (!s.options.save_model.empty()) {
    if (theta.empty() || !model.ok()) {
      log_error("the final model is not saved to " + s.options.save_model + ": the syncer's model was not read");
    } else {
      ModelFile file{shapes_of((*model)->layout()), theta, r.model + " after " + std::to_string(r.tokens) + " tokens"};
      if (Status saved = save_model_file(s.options.save_model, file); !saved.ok())
        log_error("the final model is not saved: " + saved.to_string());
      else
        log_info("the final model is saved in " + s.options.save_model);
    }
  }
  // A model atoll does not run is evaluated by its learners during the run (report_from_view took that).
  const bool external = s.topology.model.kind == ModelKind::kExternal;
  if (!theta.empty() && !external) {
    // atoll measures a model it runs itself: on its own held-out data, after
    // the run. What learners' evaluators said is in the metrics and series.
    r.curve.clear();
    r.eval.by.clear();
    const bool text = s.topology.data.kind == DataKind::kText;
    for (const auto& snap : s.board->snapshots()) {
      const EvalSums e = evaluate_global(s.topology, *s.job, snap.theta);
      r.curve.push_back({snap.seconds, snap.tokens, e.loss(), text ? e.bits_per_byte() : 0.0, e.accuracy()});
    }
    const EvalSums e = evaluate_global(s.topology, *s.job, theta);
    r.eval.loss = e.loss();
    r.eval.accuracy = e.accuracy();
    r.eval.count = e.count;
    r.eval.batches = e.batches;
    r.eval.loss_stderr = e.loss_stderr();
    if (text) {
      r.eval.bits_per_byte = e.bits_per_byte();
      r.eval.bits_per_byte_stderr = e.loss_stderr() / std::numbers::ln2;
      for (const auto& b : s.job->eval_batches()) r.eval.windows += b.rows;
    }
    if (s.options.curve_points > 1)
      r.curve.push_back({wall, r.tokens, r.eval.loss, r.eval.bits_per_byte, r.eval.accuracy});
    s.watch.set_eval(r.eval.loss, text ? r.eval.bits_per_byte : std::numeric_limits<double>::quiet_NaN());
    if (auto* lm = model.ok() ? dynamic_cast<Transformer*>(model->get()) : nullptr)
      r.sample = lm->sample(theta, "Fellow-Citizens of the Senate and House of Representatives: ", 160, 0.8,
                            s.topology.seed);
  } else if (!external || view.stats.evaluations.empty()) {
    r.eval.loss = r.eval.accuracy = std::numeric_limits<double>::quiet_NaN();
  }
  r.series = s.watch.series();
  r.events = observe_run(*s.board, s.topology, s.tape.get(), SIZE_MAX).events;  // all of them, for the plots
  return r;
}

}  // namespace atl
