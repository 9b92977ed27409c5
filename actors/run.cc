#include "atoll/run.h"

#include <caf/all.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "actors.h"
#include "run_hooks.h"
#include "timespan.h"
#include "atoll/atoms.h"
#include "atoll/cluster.h"
#include "atoll/cluster_token.h"
#include "atoll/evaluation.h"
#include "atoll/incarnation.h"
#include "atoll/log.h"
#include "atoll/machine_load.h"
#include "atoll/model_file.h"
#include "atoll/module_layout.h"
#include "atoll/syncer_core.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSnapshotTimeout = std::chrono::seconds(30);
constexpr double kFinalCheckpointSeconds = 120.0;  // encoding and fsync of a large model's last checkpoint
// How long the end of a run waits for the syncer's last rounds (bounded by
// its own flush timeout, at most 30 s) and then for its learners' evaluations
// of the final model (kFinalEvaluationSeconds), and for a syncer
// that is not there.
constexpr auto kSealTimeout = std::chrono::seconds(30 + static_cast<int>(kFinalEvaluationSeconds) + 15);
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

// Which learners run in this process: all the fixed ones, none (the
// syncer's process) or the ones named (a learner process, fixed or open slots).
Result<std::vector<uint32_t>> local_learners(const Topology& topology, const RunOptions::Cluster& c) {
  const size_t m = topology.learners.size();
  const size_t slots = learner_slots(topology);
  if (!c.listen.empty()) return std::vector<uint32_t>{};
  std::vector<uint32_t> ids;
  if (c.join.empty()) {
    for (uint32_t id = 0; id < m; ++id) ids.push_back(id);
    return ids;
  }
  if (c.learner_ids.empty()) return Status::invalid_argument("a joining process needs at least one learner id");
  for (uint32_t id : c.learner_ids) {
    if (id >= slots)
      return Status::invalid_argument("learner id " + std::to_string(id) + " is not in this topology of " +
                                      std::to_string(slots) + " learner slots (ids 0.." + std::to_string(slots - 1) + ")");
    if (std::find(ids.begin(), ids.end(), id) != ids.end())
      return Status::invalid_argument("learner id " + std::to_string(id) + " is given twice");
    ids.push_back(id);
  }
  return ids;
}

// Incarnations per learner id for the whole run, even if the learner
// supervisor itself is restarted: a restart, and the next member of an open
// slot, register above every incarnation of the id before them. A learner
// process starts above any process before it (atoll/incarnation.h).
class Incarnations {
 public:
  explicit Incarnations(uint64_t first) : first_(first) {}
  uint64_t next(uint32_t id) {
    std::lock_guard lock(mu_);
    return ++counts_.try_emplace(id, first_).first->second;
  }

 private:
  std::mutex mu_;
  uint64_t first_;
  std::map<uint32_t, uint64_t> counts_;
};

std::string default_run_name() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "run-%Y%m%d-%H%M%S", &tm);
  return std::string(buf) + "-" + std::to_string(::getpid());
}

// `theta` on the held-out data (atoll/evaluation.h); NaN, with the reason
// logged, when the model cannot be built again with theta's layout.
EvalSums evaluate_global(const Topology& topology, const Job& job, std::span<const float> theta) {
  auto sums = evaluate_held_out(topology, job, theta);
  if (sums.ok()) return *sums;
  log_error("held-out evaluation skipped: " + sums.status().to_string());
  EvalSums none;
  none.loss_sum = std::numeric_limits<double>::quiet_NaN();
  none.count = 1;
  return none;
}

// The model's description for the report, or why it could not be built again.
std::string describe_model(const Result<std::unique_ptr<Model>>& model) {
  return model.ok() ? (*model)->describe() : "(model not rebuilt: " + model.status().to_string() + ")";
}

// The whole model from the parameters of the syncer's shards: shard s holds
// the fragments p with shard_of(p) == s (zeros elsewhere). Empty when a
// shard's are missing.
std::vector<float> assemble_model(const std::vector<Fragment>& fragments, int shards,
                                  const std::vector<std::vector<float>>& by_shard) {
  if (by_shard.empty()) return {};
  const size_t size = by_shard.front().size();
  for (const auto& theta : by_shard)
    if (theta.size() != size) return {};
  if (by_shard.size() == 1) return by_shard.front();
  if (fragments.empty()) return {};
  std::vector<float> theta(size);
  std::vector<float> values;
  for (const Fragment& f : fragments) {
    values.resize(f.size);
    gather(f, by_shard[shard_of(static_cast<uint32_t>(f.id), shards)], values);
    scatter(f, values, theta);
  }
  return theta;
}

// What this process of the run is: where it listens or joins, which
// learners and syncer shards it holds, and what the model says about messages.
struct ProcessPlan {
  std::optional<Endpoint> listen_at;  // shard k of `shards` at its port + k (every one at a free port: 0)
  std::vector<Endpoint> join_at;  // one per syncer shard, shard 0 first
  std::vector<uint32_t> local_ids;
  // The syncer's shards held here: none (a learner process), one (`atoll
  // syncer --shard i/S`), or all of syncer.shards (the whole syncer).
  std::vector<uint32_t> shards;
  size_t max_message_bytes = 0;
  std::vector<NamedShape> layout;  // told to learners that ask for the topology
  size_t fragments = 0;
  std::vector<Fragment> fragment_plan;  // atoll's own models: how the shards' parts make the model
  int syncer_shards = 1;  // the topology's
  bool whole_syncer() const { return shards.size() == static_cast<size_t>(syncer_shards); }
};

Result<ProcessPlan> plan_process(const Topology& topology, const RunOptions& options) {
  ATOLL_RETURN_IF_ERROR(validate(topology));
  ProcessPlan plan;
  // Build the model once here, so that a topology the model cannot satisfy
  // (or a model file with a bad value) fails now, with its reason, rather
  // than in a restart loop. A learner trained outside atoll brings its
  // layout: this process may not be able to build the model (a TorchScript
  // run, and no libtorch here).
  if (options.external) {
    plan.max_message_bytes = SyncerCore::max_message_bytes(options.external->layout().size());
    plan.fragments = options.external->fragments().size();
  } else {
    auto model = make_model(topology);
    if (!model.ok()) return model.status();
    auto fragments = plan_fragments((*model)->layout(), topology);
    if (!fragments.ok()) return fragments.status();
    plan.max_message_bytes = SyncerCore::max_message_bytes((*model)->layout().size());
    plan.layout = shapes_of((*model)->layout());
    plan.fragments = fragments->size();
    plan.fragment_plan = std::move(*fragments);
  }
  const auto& cluster = options.cluster;
  if (!cluster.listen.empty() && !cluster.join.empty())
    return Status::invalid_argument("a process either listens (it holds the syncer) or joins (it holds learners), not both");
  if (!cluster.listen.empty() || !cluster.join.empty()) {
    if (cluster.token.size() < kMinTokenBytes)
      return Status::invalid_argument("a run across processes needs a cluster token of at least " +
                                      std::to_string(kMinTokenBytes) + " bytes");
    if (!cluster.listen.empty()) {
      auto endpoint = parse_endpoint(cluster.listen);
      if (!endpoint.ok()) return endpoint.status();
      plan.listen_at = *endpoint;
    }
    for (size_t begin = 0; begin < cluster.join.size();) {
      const size_t end = std::min(cluster.join.find(',', begin), cluster.join.size());
      auto endpoint = parse_endpoint(std::string_view(cluster.join).substr(begin, end - begin));
      if (!endpoint.ok()) return endpoint.status();
      plan.join_at.push_back(*endpoint);
      begin = end + 1;
    }
  }
  const auto shards = static_cast<uint32_t>(topology.syncer.shards);
  plan.syncer_shards = topology.syncer.shards;
  if (cluster.shard && *cluster.shard >= shards)
    return Status::invalid_argument("syncer shard " + std::to_string(*cluster.shard) + " of " + std::to_string(shards) +
                                    ": shards count from 0 to syncer.shards - 1");
  if (!plan.join_at.empty() && plan.join_at.size() != shards)
    return Status::invalid_argument("the syncer runs as " + std::to_string(shards) + " shard" +
                                    (shards == 1 ? "" : "s") + " (syncer.shards), and " +
                                    std::to_string(plan.join_at.size()) +
                                    " addresses were given to join: give one per shard, comma-separated, shard 0 first");
  if (plan.join_at.empty()) {
    if (cluster.shard) plan.shards = {*cluster.shard};
    else
      for (uint32_t s = 0; s < shards; ++s) plan.shards.push_back(s);
  }
  if (!plan.whole_syncer() && !plan.shards.empty() && !options.save_model.empty())
    return Status::invalid_argument("--save-model with syncer shard " + std::to_string(plan.shards.front()) + " of " +
                                    std::to_string(shards) + ": this process holds only that shard's fragments; " +
                                    "a syncer that holds every shard (`atoll syncer` without --shard) saves the model, "
                                    "or `atoll assemble --save-model` puts it together from the shards' final checkpoints");
  auto local_ids = local_learners(topology, cluster);
  if (!local_ids.ok()) return local_ids.status();
  plan.local_ids = std::move(*local_ids);
  if (options.external && (plan.join_at.empty() || plan.local_ids.size() != 1))
    return Status::invalid_argument("a learner trained outside atoll joins a syncer in another process, alone");
  if (!options.external && !plan.local_ids.empty() && topology.model.kind == ModelKind::kExternal)
    return Status::invalid_argument("model.kind = \"external\": atoll runs no learner of this model; run `atoll "
                                    "syncer` and start Python learners (atoll.Learner) that join it");
  return plan;
}

// Which children the run cannot go on without have been given up on: the
// syncer's side, or every learner of a process that holds some (one by one,
// or their supervisor).
std::string lost_beyond_repair(const std::vector<TimedEvent>& events, size_t local_learners) {
  size_t learners_lost = 0;
  for (const auto& e : events) {
    const auto* g = std::get_if<event::GaveUp>(&e.event);
    if (!g) continue;
    if (g->child.holds_syncer()) return "the syncer";
    if (g->child.role == Child::Role::kLearnerSupervisor && local_learners > 0) return "every learner";
    learners_lost += g->child.role == Child::Role::kLearner ? 1 : 0;
  }
  return local_learners > 0 && learners_lost >= local_learners ? "every learner" : "";
}

}  // namespace

struct Run::Impl {
  Topology topology;
  RunOptions options;
  ProcessPlan plan;
  std::string checkpoint_dir;
  std::shared_ptr<const Job> job;
  std::shared_ptr<Directory> directory = std::make_shared<Directory>();
  std::shared_ptr<RunRecords> records;
  std::unique_ptr<Config> config;
  std::unique_ptr<caf::actor_system> system;
  // Declared after the system, so destroyed before it: no task may outlive it.
  std::unique_ptr<ComputePool> pool;
  std::shared_ptr<StepPacer> pacer;  // hardware = "dedicated" (null: shared)
  caf::actor root;
  Clock::time_point started;
  std::optional<CpuSample> cpu_at_start;  // the machine's CPU counters when the run started
  bool waited = false;
  bool joined() const { return !plan.join_at.empty(); }  // the syncer is in another process
  // Across processes: the gateway, or one link per syncer shard, and their doors.
  std::vector<DoorService> doors;
  std::vector<uint16_t> ports;  // where learners are served, by shard held here
  std::vector<float> theta;  // the global model at the end (every shard's part)
  RunWatch watch;
  // Samples the run into `watch` until the run is waited for.
  std::thread sampler;
  std::mutex sampler_mu;
  std::condition_variable sampler_cv;
  bool sampling = false;
  std::atomic<bool> over{false};  // the sampler stopped: the watch holds the final view (read by any thread)
  // leave(): the run is over here once this process's learners are gone, or by this time.
  std::atomic<bool> leaving{false};
  std::atomic<Clock::rep> leave_deadline{0};
  bool any_local_learner() const;

  RunView observe(size_t max_events = 50) const {
    RunView v = observe_run(*records, topology, max_events);
    v.holds_syncer = !joined();
    v.local_learners = static_cast<int>(plan.local_ids.size());
    return v;
  }

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

  // The final view is taken last, once every actor is done: the records hold
  // all they will (a checkpoint written at the very end included).
  void shut_down() {
    if (system) {
      for (auto& d : doors)
        if (d.actor) caf::anon_send_exit(d.actor, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      system->await_all_actors_done();
      pool->wait_idle();
      // Every actor is done, so nothing more is queued: what is, goes out.
      for (auto& d : doors)
        if (d.door) d.door->drain(kDrainSeconds);
      doors.clear();
    }
    stop_sampler();
  }

  Status open_checkpoints(std::vector<std::shared_ptr<CheckpointStore>>& stores);
  SupervisorSpec supervisor_spec(Child::Role role, SupervisorSpec::Strategy strategy, const RunHooks& h) const;
  caf::actor spawn_tree(const RunHooks& h, const std::vector<std::shared_ptr<CheckpointStore>>& stores);
  Status open_door();
  void wait_until_over();
  void seal_syncer();
  void stop_learners();
  void read_final_model();
  void save_final_model(const Report& r, const Result<std::unique_ptr<Model>>& model) const;
  void evaluate(Report& r, const Result<std::unique_ptr<Model>>& model);
  Result<Report> learner_side_report(double wall);
  Result<std::shared_ptr<StepPacer>> make_pacer() const;
  void report_hardware(Report& r) const;
  Result<Report> syncer_side_report(double wall);
};

std::string checkpoint_folder(const Topology& topology, const std::string& run_name, uint32_t shard) {
  if (topology.checkpoint.dir.empty()) return "";
  std::string folder = topology.checkpoint.dir + "/" + run_name;
  if (topology.syncer.shards > 1) folder += "/shard-" + std::to_string(shard);
  return folder;
}

Run::Run(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Run::~Run() {
  if (impl_ && !impl_->waited) impl_->shut_down();
}

// One store per shard held here, each in its own folder with its own lock.
Status Run::Impl::open_checkpoints(std::vector<std::shared_ptr<CheckpointStore>>& stores) {
  stores.assign(plan.shards.size(), nullptr);
  if (topology.checkpoint.dir.empty() || joined()) return Status();
  const std::string run_name = options.run_name.empty() ? default_run_name() : options.run_name;
  for (size_t k = 0; k < plan.shards.size(); ++k) {
    const std::string folder = checkpoint_folder(topology, run_name, plan.shards[k]);
    auto opened = CheckpointStore::open(folder, topology.checkpoint.keep);
    if (!opened.ok()) return opened.status();
    stores[k] = std::move(*opened);
    checkpoint_dir = folder;
  }
  if (plan.shards.size() > 1) checkpoint_dir = topology.checkpoint.dir + "/" + run_name;  // theirs are in it
  return Status();
}

SupervisorSpec Run::Impl::supervisor_spec(Child::Role role, SupervisorSpec::Strategy strategy,
                                          const RunHooks& h) const {
  SupervisorSpec spec;
  spec.name = Child{role, 0, {}}.name();
  spec.strategy = strategy;
  spec.max_restarts = options.max_restarts;
  spec.window_seconds = options.restart_window_seconds;
  spec.records = records;
  spec.restart_hold = h.restart_hold;
  spec.directory = directory;
  return spec;
}

// root (one_for_one): a syncer supervisor (rest_for_one: checkpointer,
// syncer) per syncer shard held here, the learners' where learners run, and
// the hooks' extra children. Shards share nothing: one that fails restarts alone.
caf::actor Run::Impl::spawn_tree(const RunHooks& h, const std::vector<std::shared_ptr<CheckpointStore>>& stores) {
  using Strategy = SupervisorSpec::Strategy;
  std::vector<SupervisorSpec> shard_supervisors;
  for (size_t k = 0; k < plan.shards.size(); ++k) {
    const uint32_t shard = plan.shards[k];
    SupervisorSpec syncers = supervisor_spec(Child::Role::kSyncerSupervisor, Strategy::kRestForOne, h);
    syncers.name = Child::of_shard(Child::Role::kSyncerSupervisor, shard).name();
    if (auto store = stores[k])
      syncers.children.push_back({Child::of_shard(Child::Role::kCheckpointer, shard),
                                  [store, shard, dir = directory, records = records](caf::actor_system& s, uint64_t) {
                                    return spawn_checkpointer(s, store, dir, records, shard);
                                  }});
    const SyncerArgs syncer_args{.topology = topology,
                                 .directory = directory,
                                 .records = records,
                                 .use_checkpointer = true,
                                 .tick_seconds = 0.1,
                                 .run_started = started,
                                 .faults = h.message_faults,
                                 .cluster_token = options.cluster.token,
                                 .shard = shard,
                                 .shards_here = plan.shards.size()};
    syncers.children.push_back({Child::of_shard(Child::Role::kSyncer, shard),
                                [args = syncer_args](caf::actor_system& s, uint64_t) { return spawn_syncer(s, args); }});
    shard_supervisors.push_back(std::move(syncers));
  }
  SupervisorSpec learners = supervisor_spec(Child::Role::kLearnerSupervisor, Strategy::kOneForOne, h);
  auto incarnations = std::make_shared<Incarnations>(joined() ? incarnation_base() : 0);
  const LearnerArgs base{.id = 0,
                         .incarnation = 0,
                         .job = job,
                         .directory = directory,
                         .pool = pool.get(),
                         .records = records,
                         .faults = h.message_faults,
                         .cluster_token = options.cluster.token,
                         .external = options.external,
                         .spec = options.learner_spec,
                         .restarted = false,
                         .pacer = pacer};
  const auto learner_child = [base, incarnations](uint32_t id, std::optional<LearnerSpec> spec) {
    LearnerArgs args = base;
    args.id = id;
    if (spec) args.spec = spec;
    return ChildSpec{Child::of_learner(id), [args, incarnations](caf::actor_system& s, uint64_t starts) mutable {
                       args.incarnation = incarnations->next(args.id);
                       args.restarted = starts > 1;
                       return spawn_learner(s, args);
                     }};
  };
  for (uint32_t id : plan.local_ids) learners.children.push_back(learner_child(id, std::nullopt));
  // Newcomers join where the syncer runs (Run::add_learner, a chaos plan's joins).
  if (!joined()) learners.make_learner = [learner_child](uint32_t id, const LearnerSpec& spec) { return learner_child(id, spec); };
  SupervisorSpec top = supervisor_spec(Child::Role::kRootSupervisor, Strategy::kOneForOne, h);
  for (size_t k = 0; k < shard_supervisors.size(); ++k)
    top.children.push_back({Child::of_shard(Child::Role::kSyncerSupervisor, plan.shards[k]),
                            [syncers = shard_supervisors[k]](caf::actor_system& s, uint64_t) {
                              return spawn_supervisor(s, syncers);
                            }});
  if (!plan.local_ids.empty())
    top.children.push_back({{Child::Role::kLearnerSupervisor, 0, {}}, [learners](caf::actor_system& s, uint64_t) {
                               return spawn_supervisor(s, learners);
                             }});
  const RunContext context{topology, directory, records, started};
  for (const auto& [name, spawn] : h.children)
    top.children.push_back({Child::named(name), [spawn, context](caf::actor_system& s, uint64_t) {
                               return spawn(s, context);
                             }});
  return spawn_supervisor(*system, std::move(top));
}

// Across processes: the syncer's process serves learners, a learner process joins the syncer.
Status Run::Impl::open_door() {
  const auto& cluster = options.cluster;
  const uint32_t m = learner_slots(topology);
  if (plan.listen_at) {
    if (!cluster.tls())
      log_warn("serving learners over plain TCP: anyone on the path can read and alter the traffic "
               "(the cluster token still decides who joins); give --tls-cert, --tls-key and --tls-ca, or run inside a VPN");
    for (size_t k = 0; k < plan.shards.size(); ++k) {
      Endpoint at = *plan.listen_at;
      if (at.port != 0) at.port = static_cast<uint16_t>(at.port + k);
      auto served = serve_learners(*system,
                                   GatewayArgs{topology, plan.shards[k], plan.layout, directory, records,
                                               plan.max_message_bytes, nullptr},
                                   at, cluster);
      if (!served.ok()) return served.status().with_context(Directory::syncer_name(plan.shards[k]));
      ports.push_back(served->port);
      doors.push_back(std::move(*served));
      const std::string who = topology.syncer.shards > 1 ? " for the " + Directory::syncer_name(plan.shards[k]) : "";
      log_info("serving learners" + who + " on " + at.host + ":" + std::to_string(ports.back()) +
               (cluster.tls() ? " (TLS 1.3, learner certificates required)" : " (plain TCP)") +
               (cluster.link.active() ? "; emulated link " + cluster.link.to_string() : ""));
    }
  }
  for (uint32_t shard = 0; shard < plan.join_at.size(); ++shard) {
    const Endpoint& at = plan.join_at[shard];
    auto joined_syncer = join_syncer(*system,
                                     SyncerLinkArgs{at.host, at.port, plan.local_ids, directory, records,
                                                    cluster.give_up_seconds, plan.max_message_bytes, nullptr, shard},
                                     cluster, m);
    if (!joined_syncer.ok()) return joined_syncer.status();
    doors.push_back(std::move(*joined_syncer));
  }
  if (joined() && !cluster.tls()) log_warn("joining over plain TCP: the traffic is not encrypted");
  return Status();
}

Result<std::unique_ptr<Run>> Run::start(const Topology& topology, RunOptions options, const RunHooks* hooks) {
  const RunHooks none;
  const RunHooks& h = hooks ? *hooks : none;
  auto plan = plan_process(topology, options);
  if (!plan.ok()) return plan.status();
  auto impl = std::make_unique<Impl>();
  impl->topology = topology;
  impl->options = std::move(options);
  impl->plan = std::move(*plan);
  RunOptions& o = impl->options;
  if (o.data_root.empty()) o.data_root = default_data_root();
  if (o.external) {
    impl->job = Job::without_data(topology, "the learner's own (trained outside atoll)");
  } else {
    auto job = Job::load(topology, o.data_root);
    if (!job.ok()) return job.status();
    impl->job = std::move(*job);
  }
  std::vector<std::shared_ptr<CheckpointStore>> stores;
  ATOLL_RETURN_IF_ERROR(impl->open_checkpoints(stores));
  impl->pool = std::make_unique<ComputePool>(o.compute_threads);
  if (topology.hardware == Hardware::kDedicated && !o.external && !impl->plan.local_ids.empty()) {
    auto pacer = impl->make_pacer();
    if (!pacer.ok()) return pacer.status().with_context("hardware = \"dedicated\": measuring a step");
    impl->pacer = std::move(*pacer);
  }
  impl->config = std::make_unique<Config>(std::max(1, o.control_threads));
  impl->system = std::make_unique<caf::actor_system>(*impl->config);
  impl->started = Clock::now();  // the run's clock: its time limit, its wall time
  impl->cpu_at_start = sample_cpu();
  impl->records = std::make_shared<RunRecords>(h.log ? h.log : std::move(*RunLog::open("", impl->started)),
                                               impl->plan.fragments, topology.syncer.shards);
  impl->records->snapshots.plan(o.curve_points, topology.tokens, o.seconds > 0 ? o.seconds : topology.seconds);
  impl->root = impl->spawn_tree(h, stores);
  if (Status s = impl->open_door(); !s.ok()) {
    impl->shut_down();
    return s;
  }
  impl->start_sampler();
  log_info("run started: " + std::to_string(impl->plan.local_ids.size()) + " of " +
           std::to_string(topology.learners.size()) + " learners here, " + mode_name(topology.mode) + ", " +
           impl->job->description() + (impl->checkpoint_dir.empty() ? "" : ", checkpoints in " + impl->checkpoint_dir));
  return std::unique_ptr<Run>(new Run(std::move(impl)));
}

const Topology& Run::topology() const { return impl_->topology; }
std::string Run::failure() const { return std::string(impl_->records->latch.failure().message()); }
uint16_t Run::port() const { return impl_->ports.empty() ? 0 : impl_->ports.front(); }
const std::vector<uint16_t>& Run::ports() const { return impl_->ports; }
const std::string& Run::checkpoint_dir() const { return impl_->checkpoint_dir; }
RunView Run::view() const {
  if (impl_->over) return impl_->watch.view();  // the final view, with the held-out evaluation
  RunView v = impl_->observe();
  v.series = impl_->watch.series();
  return v;
}
bool Run::finished() const { return impl_->records->latch.finished(); }
void Run::stop() {
  impl_->records->latch.finish();
  for (uint32_t shard : impl_->plan.shards)
    if (caf::actor syncer = impl_->directory->get(Directory::syncer_name(shard)))
      caf::anon_send(syncer, end_atom_v, std::string("the run was stopped"));
}

const std::vector<float>& Run::parameters() const { return impl_->theta; }

// A kill, stall, join or leave from outside the run is a fault like a
// planned one: in the event log, so that a chaos run's verdict and the plots
// account for it.
namespace {
event::Injected from_outside(FaultKind kind, int64_t learner, const char* by) {
  event::Injected e;
  e.kind = kind;
  e.hit = true;
  e.learner = learner;
  e.by = by;
  return e;
}
}  // namespace

bool Run::kill_learner(uint32_t id) {
  caf::actor learner = impl_->directory->get(Directory::learner(id));
  if (!learner) return false;
  impl_->records->log->append(from_outside(FaultKind::kKill, id, "Run::kill_learner"));
  caf::anon_send_exit(learner, caf::exit_reason::kill);
  return true;
}

Result<uint32_t> Run::add_learner(const LearnerSpec& spec) {
  if (impl_->joined()) return Status::unavailable("a learner process takes no newcomers: start one with `atoll learner`");
  event::Injected e = from_outside(FaultKind::kJoin, -1, "Run::add_learner");
  e.speed = spec.speed;
  e.batch_size = static_cast<uint32_t>(spec.batch_size);
  Result<uint32_t> out = Status::unavailable("no learner supervisor here to start a newcomer");
  caf::scoped_actor self{*impl_->system};
  // The supervisor or the syncer may not be up yet (right after start), or
  // restarting: ask again for a few seconds.
  const std::string supervisor = Child{Child::Role::kLearnerSupervisor, 0, {}}.name();
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  for (bool again = true; again;) {
    again = false;
    caf::actor learners = impl_->directory->get(supervisor);
    if (!learners) {
      again = Clock::now() < give_up;
    } else {
      self->request(learners, std::chrono::seconds(10), join_atom_v, spec.speed,
                    static_cast<int32_t>(spec.batch_size))
          .receive([&](uint32_t id) { out = id; },
                   [&](caf::error& err) {
                     const bool down = err == caf::sec::request_receiver_down;
                     again = down && Clock::now() < give_up;
                     const caf::message& why = err.context();
                     out = down ? Status::unavailable("the syncer is not running")
                                : Status::refused(why.match_elements<std::string>() ? why.get_as<std::string>(0)
                                                                                    : caf::to_string(err));
                   });
    }
    if (again) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  e.hit = out.ok();
  e.learner = out.ok() ? int64_t{*out} : -1;
  impl_->records->log->append(std::move(e));
  return out;
}

bool Run::leave_learner(uint32_t id, const std::string& reason, double drain_seconds) {
  caf::actor learner = impl_->directory->get(Directory::learner(id));
  if (!learner) return false;
  impl_->records->log->append(from_outside(FaultKind::kLeave, id, "Run::leave_learner"));
  caf::anon_send(learner, leave_atom_v, reason, drain_seconds);
  return true;
}

Status Run::checkpoint_now(double seconds) {
  if (impl_->plan.shards.empty()) return Status::unavailable("no syncer runs in this process");
  if (impl_->topology.checkpoint.dir.empty()) return Status::unavailable("checkpoints are off (checkpoint.dir is empty)");
  const auto timeout = timespan_of(seconds);
  caf::scoped_actor self{*impl_->system};
  for (uint32_t shard : impl_->plan.shards) {  // each shard writes its own
    const std::string name = Directory::syncer_name(shard);
    caf::actor syncer = impl_->directory->get(name);
    caf::actor checkpointer = impl_->directory->get(Directory::checkpointer_name(shard));
    if (!syncer) return Status::unavailable("the " + name + " is not running");
    if (!checkpointer) return Status::unavailable("the " + Directory::checkpointer_name(shard) + " is not running");
    const uint64_t written = impl_->records->counters.checkpoints.load();
    Status result;
    self->request(syncer, timeout, save_atom_v)
        .receive(
            [&](Packet& file) {
              if (file.bytes.empty()) {
                result = Status::unavailable("checkpoints are off (checkpoint.dir is empty)");
                return;
              }
              // The checkpointer answers once the file is written and synced, or its write failed.
              self->request(checkpointer, timeout, save_atom_v, std::move(file))
                  .receive([] {}, [&](caf::error& e) { result = Status::io_error("the checkpointer: " + to_string(e)); });
            },
            [&](caf::error& e) { result = Status::unavailable("the " + name + " did not answer: " + to_string(e)); });
    if (result.ok() && impl_->records->counters.checkpoints.load() == written)
      result = Status::io_error("the checkpoint of the " + name + " was not written (the checkpointer's log says why)");
    if (!result.ok()) return result;
  }
  return Status();
}

void Run::leave(const std::string& reason, double drain_seconds) {
  Impl& s = *impl_;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(drain_seconds + 2.0));
  s.leave_deadline = deadline.time_since_epoch().count();
  s.leaving = true;
  for (uint32_t id : s.plan.local_ids)
    if (caf::actor learner = s.directory->get(Directory::learner(id)))
      caf::anon_send(learner, leave_atom_v, reason, drain_seconds);
}

bool Run::Impl::any_local_learner() const {
  for (uint32_t id = 0; id < learner_slots(topology); ++id)
    if (directory->get(Directory::learner(id))) return true;
  return false;
}

bool Run::stall_learner(uint32_t id, double seconds) {
  caf::actor learner = impl_->directory->get(Directory::learner(id));
  if (!learner) return false;
  event::Injected e = from_outside(FaultKind::kStall, id, "Run::stall_learner");
  e.duration = seconds;
  impl_->records->log->append(std::move(e));
  caf::anon_send(learner, stall_atom_v, seconds);
  return true;
}

// Until finished, the time limit, or the run cannot go on (the syncer, or
// every learner here, given up).
void Run::Impl::wait_until_over() {
  // The topology's time limit is shard 0's to judge, whose end its learners pass on: one count, not a
  // clock per process. A learner process (joined) or one holding only other shards leaves it to shard 0
  // (a restarted shard's clock starts late; a learner's own would end it before the last rounds). An
  // explicit --seconds on a learner is its own: it leaves then.
  const bool others_judge = joined() || (!plan.shards.empty() && plan.shards.front() != 0);
  const double limit = options.seconds > 0 ? options.seconds : others_judge ? 0.0 : topology.seconds;
  const auto deadline = limit > 0 ? started + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(limit))
                                  : Clock::time_point::max();
  size_t seen = 0;  // events looked at for give-ups: the log is read again only when it grew
  for (;;) {
    const auto step = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
    if (records->latch.wait_finished_until(step) || Clock::now() >= deadline) break;
    if (leaving && (!any_local_learner() || Clock::now().time_since_epoch().count() >= leave_deadline)) {
      log_info("every learner of this process has left");
      break;
    }
    if (const size_t logged = records->log->size(); logged == seen) continue;
    const auto events = records->log->events();
    seen = events.size();
    if (const std::string lost = lost_beyond_repair(events, plan.local_ids.size()); !lost.empty()) {
      log_error("the run cannot go on: gave up on " + lost);
      break;
    }
  }
  records->latch.finish();  // also when the time limit ended the run
}

// The syncer's last rounds merge what the learners did since their last
// push; then the model is final (sealed: every shard here sealed its part).
// Told by message; a shard restarted since is told again.
void Run::Impl::seal_syncer() {
  const auto give_up = Clock::now() + kSealTimeout;
  std::vector<Clock::time_point> seen(plan.shards.size(), Clock::now());
  std::vector<caf::actor> told(plan.shards.size());
  bool any = true;
  do {
    any = false;
    for (size_t k = 0; k < plan.shards.size(); ++k) {
      if (caf::actor syncer = directory->get(Directory::syncer_name(plan.shards[k]))) {
        seen[k] = Clock::now();
        if (syncer != told[k]) caf::anon_send(syncer, end_atom_v, std::string("the run was stopped"));
        told[k] = syncer;
      }
      any = any || Clock::now() - seen[k] <= kNoSyncerTimeout;
    }
  } while (any &&
           !records->latch.wait_sealed_until(std::min(give_up, Clock::now() + std::chrono::milliseconds(50))) &&
           Clock::now() < give_up);
}

// Learners stop first, so that no round closes after the global model is read.
void Run::Impl::stop_learners() {
  const std::string supervisor = Child{Child::Role::kLearnerSupervisor, 0, {}}.name();
  caf::actor learners = directory->get(supervisor);
  if (!learners) return;
  caf::anon_send_exit(learners, caf::exit_reason::user_shutdown);
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while ((directory->get(supervisor) || any_local_learner()) && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// The global model, straight from the syncer: every shard's part of it.
void Run::Impl::read_final_model() {
  std::vector<std::vector<float>> parts;
  caf::scoped_actor self{*system};
  for (uint32_t shard : plan.shards) {
    const std::string name = Directory::syncer_name(shard);
    caf::actor syncer = directory->get(name);
    if (!syncer) {
      log_error("the " + name + " is not running at the end of the run");
      return;
    }
    self->send(syncer, seal_atom_v);  // before the snapshot: one sender, in order
    bool got = false;
    self->request(syncer, kSnapshotTimeout, snapshot_atom_v)
        .receive(
            [&](FinalModel& model) {
              parts.push_back(std::move(model.theta));
              got = true;
            },
            [&](caf::error& e) { log_error("no final model from the " + name + ": " + to_string(e)); });
    if (!got) return;
  }
  // This process's part, when it holds one shard of several: not the model.
  if (plan.whole_syncer()) theta = assemble_model(plan.fragment_plan, plan.syncer_shards, parts);
}

Result<Report> Run::wait() {
  Impl& s = *impl_;
  if (s.waited) return Status::invalid_argument("Run::wait() was already called");
  s.waited = true;
  s.wait_until_over();
  if (!s.joined()) s.seal_syncer();
  const double wall = std::chrono::duration<double>(Clock::now() - s.started).count();
  s.stop_learners();
  if (s.joined()) return s.learner_side_report(wall);
  s.read_final_model();
  // The final model, durable: what a syncer started again with this run name restores, and where
  // `atoll assemble` puts together the model of shards that ran in processes of their own.
  if (!s.topology.checkpoint.dir.empty() && !s.plan.shards.empty()) {
    if (Status c = checkpoint_now(kFinalCheckpointSeconds); !c.ok())
      log_warn("no checkpoint of the final model: " + c.to_string());
    else if (!s.plan.whole_syncer())
      log_info("the final checkpoint of syncer shard " + std::to_string(s.plan.shards.front()) +
               " is written; once every shard has ended, `atoll assemble` puts the model together from them");
  }
  s.shut_down();
  return s.syncer_side_report(wall);
}

// A learner process knows what its learners adopted and how often they
// restarted; training totals and quality are the syncer's to report.
Result<Report> Run::Impl::learner_side_report(double wall) {
  shut_down();
  if (Status failure = records->latch.failure(); !failure.ok()) return failure;
  const RunView v = observe(SIZE_MAX);
  Report r;
  r.mode = mode_name(topology.mode);
  r.data = job->description();
  r.learners = static_cast<int>(plan.local_ids.size());
  r.wall_seconds = wall;
  r.restarts = v.restarts;
  r.regressions_refused = v.regressions_refused;
  r.max_adopted_versions = v.max_adopted_versions;
  r.gave_up = v.gave_up;
  report_hardware(r);
  for (uint32_t id : plan.local_ids) {
    LearnerReport l;
    l.id = id;
    const LearnerSpec spec = options.learner_spec.value_or(default_spec(topology, id));
    l.speed = spec.speed;
    l.batch_size = spec.batch_size;
    if (id < v.per_learner.size()) {
      l.restarts = v.per_learner[id].restarts;
      l.gave_up = v.per_learner[id].state == LearnerState::kGaveUp;
    }
    r.per_learner.push_back(l);
  }
  r.model = describe_model(make_model(topology));
  r.eval.loss = r.eval.accuracy = std::numeric_limits<double>::quiet_NaN();
  return r;
}

Result<Report> Run::Impl::syncer_side_report(double wall) {
  // The run's last view (shut_down() took it): the report's figures come from it. A syncer
  // that went on with a checkpoint's figures counts from the run's first start, not this process's.
  const RunView view = watch.view();
  Report r = report_from_view(view, std::max(wall, view.seconds));
  report_hardware(r);
  r.data = job->description();
  auto model = make_model(topology);
  r.model = describe_model(model);
  save_final_model(r, model);
  evaluate(r, model);
  r.series = watch.series();
  r.events = observe(SIZE_MAX).events;  // all of them, for the plots
  return r;
}

// Dedicated hardware: this process's learners divide its pool by speed. One
// step is measured before any learner starts, with as many at once as the
// pool will run, so that every mode gets the same hardware.
Result<std::shared_ptr<StepPacer>> Run::Impl::make_pacer() const {
  double total_speed = 0.0;
  int batch = 0;
  for (uint32_t id : plan.local_ids) {
    const LearnerSpec spec = options.learner_spec.value_or(default_spec(topology, id));
    total_speed += spec.speed;
    if (batch == 0) batch = spec.batch_size;
  }
  auto compute = measure_step_compute(*job, *pool, static_cast<int>(plan.local_ids.size()), batch);
  if (!compute.ok()) return compute.status();
  auto made = std::make_shared<StepPacer>(pool->threads(), total_speed, *compute, batch, topology.hardware_headroom);
  char line[200];
  std::snprintf(line, sizeof line,
                "dedicated hardware: one step computes in %.1f ms on one thread; a speed-1 learner's step takes %.1f ms",
                1e3 * *compute, 1e3 * made->step_seconds(1.0, batch));
  log_info(line);
  return made;
}

void Run::Impl::report_hardware(Report& r) const {
  r.hardware.name = hardware_name(topology.hardware);
  if (auto now = sample_cpu(); now && cpu_at_start) {
    // Each learner process's whole CPU time as it last reported (one started before the syncer brings its time before).
    now->run_processes = records->learner_cpu.seconds();
    const MachineLoad load = load_between(*cpu_at_start, *now);
    r.hardware.others_cpu = load.others;
    r.hardware.steal = load.steal;
    r.hardware.learner_processes_cpu_seconds = now->run_processes;
    r.hardware.learner_processes = records->learner_cpu.processes();
  }
  if (!pacer) return;
  const int batch = options.learner_spec.value_or(default_spec(topology, plan.local_ids.front())).batch_size;
  r.hardware.compute_seconds = pacer->compute_seconds();
  r.hardware.step_seconds = pacer->step_seconds(1.0, batch);
  r.hardware.paced_steps = pacer->paced();
  r.hardware.late_steps = pacer->late();
}

void Run::Impl::save_final_model(const Report& r, const Result<std::unique_ptr<Model>>& model) const {
  if (options.save_model.empty()) return;
  if (theta.empty() || !model.ok()) {
    log_error("the final model is not saved to " + options.save_model + ": the syncer's model was not read");
    return;
  }
  ModelFile file{shapes_of((*model)->layout()), theta, r.model + " after " + std::to_string(r.tokens) + " tokens"};
  if (Status saved = save_model_file(options.save_model, file); !saved.ok())
    log_error("the final model is not saved: " + saved.to_string());
  else
    log_info("the final model is saved in " + options.save_model);
}

// A model atoll runs is measured on its own held-out data, after the run. A
// model atoll does not run was evaluated by its learners during the run
// (report_from_view took that).
void Run::Impl::evaluate(Report& r, const Result<std::unique_ptr<Model>>& model) {
  const bool external = topology.model.kind == ModelKind::kExternal;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // One shard of several holds only its fragments: the model is evaluated
  // where they are put together (a process that holds every shard).
  if (theta.empty() || external || !plan.whole_syncer()) {
    if (!external || watch.view().stats.evaluations.empty()) {
      r.eval.loss = r.eval.accuracy = r.eval.bits_per_byte = nan;
      r.eval.final = false;
      if (external) r.eval.by = "none: no learner evaluated the model (give one an atoll.Evaluator)";
      else if (!plan.whole_syncer())
        r.eval.by = "none: this process holds shard " + std::to_string(plan.shards.front()) + " of " +
                    std::to_string(plan.syncer_shards) + ", part of the model";
    }
    return;
  }
  r.curve.clear();
  r.eval.by.clear();
  const bool text = topology.data.kind == DataKind::kText;
  // The k-th snapshot of every shard, put together, is the model at point k.
  std::vector<std::vector<ModelSnapshots::Snapshot>> taken;
  size_t points = SIZE_MAX;
  for (uint32_t shard : plan.shards) {
    taken.push_back(records->snapshots.taken(shard));
    points = std::min(points, taken.back().size());
  }
  for (size_t k = 0; k < points; ++k) {
    std::vector<std::vector<float>> parts;
    for (auto& t : taken) parts.push_back(std::move(t[k].theta));
    const EvalSums e = evaluate_global(topology, *job, assemble_model(plan.fragment_plan, plan.syncer_shards, parts));
    const auto& at = taken.front()[k];
    r.curve.push_back(Report::CurvePoint::of(at.seconds, at.tokens, e, text));
  }
  r.set_final_eval(evaluate_global(topology, *job, theta), *job);
  if (options.curve_points > 1) r.end_curve();
  watch.set_eval(r.eval.loss, text ? r.eval.bits_per_byte : nan);
  if (model.ok()) r.sample = sample_text(**model, theta, options.evaluation, topology.seed);
}

}  // namespace atl
