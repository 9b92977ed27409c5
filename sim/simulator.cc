// The cluster simulator (atoll/simulation.h): chips that fail, groups of
// chips that pause or go down, simulated learners that speak the protocol,
// machines lent to the run for a while (scavenging), learners that are real
// LearnerSessions over replicas without parameters (CountingReplica), and the
// real SyncerCore that decides every round and every membership. No CAF here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "atoll/codec.h"
#include "atoll/counting_replica.h"
#include "atoll/event_queue.h"
#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/learner_session.h"
#include "atoll/report.h"
#include "atoll/run_records.h"
#include "atoll/simulation.h"
#include "atoll/syncer_core.h"

namespace atl {
namespace {

constexpr double kSecondsPerYear = 365.25 * 86400.0;
constexpr double kZ95 = 1.96;
constexpr int kMinBatches = 10;

using WallClock = std::chrono::steady_clock;

// Batch means: the mean of per-batch figures and the half-width of its 95%
// interval (1 until there are two).
struct BatchMeans {
  std::vector<double> values;
  double mean = 0.0, half_width = 1.0;

  size_t size() const { return values.size(); }
  void add(double v) {
    values.push_back(v);
    const size_t n = values.size();
    mean = 0.0;
    for (double x : values) mean += x;
    mean /= double(n);
    if (n < 2) return;
    double var = 0.0;
    for (double x : values) var += (x - mean) * (x - mean);
    var /= double(n - 1);
    half_width = kZ95 * std::sqrt(var / double(n));
  }
};

// ---- one group of chips: a dp job, or one learner

// Interruptions take down a slice each; the group trains, pauses or is down.
// It trains in inner steps: a step under way when training stops is lost.
// `epoch` grows whenever training stops, so a scheduled resume or an inner
// step of an older epoch is void. A slice that comes back joins at the end of
// the step under way (scaling up is planned, not a failure).
struct ChipGroup {
  enum class Phase { kTraining, kPaused, kDown };
  int64_t chips = 1;
  int64_t slices = 1;              // ceil(chips / slice_chips): the last one may be partial
  int64_t up = 1;                  // slices up
  bool elastic = false;            // trains on the slices that are up
  Phase phase = Phase::kTraining;
  uint64_t epoch = 0;
  double resume_at = 0.0;          // kPaused, and kDown once it may restart
  uint64_t interrupt_epoch = 0;    // the pending interruption's: the rate changed since
  bool stepping = false;           // an inner step under way
  double step_length = 0.0;        // seconds
  double step_share = 1.0;         // share of the slices that take part in the step under way
  bool upscale_pending = false;    // a slice came back during the step: pause at its end
  // Integrals over simulated time.
  double last = 0.0;
  double trained = 0.0;            // seconds training
  double productive = 0.0;         // dp and elastic_dp: completed steps' seconds x their share
  uint64_t interruptions = 0;

  double share() const { return elastic ? double(up) / double(slices) : 1.0; }
  // Training, between steps, and no slice waiting to join: a step may start.
  bool may_step() const { return phase == Phase::kTraining && !stepping && !upscale_pending; }
  void advance(double now) {
    if (phase == Phase::kTraining) trained += now - last;
    last = now;
  }
};

// ---- scavenging: machines lent to the run for a while

// Up, then down, period after period. Each up period runs one learner
// process: it claims an open slot, registers, trains, and leaves in order at
// the notice or vanishes when the machine goes. `period` grows at every
// change, so an event of an earlier period is void.
struct Machine {
  uint64_t period = 0;
  double up_since = 0.0;
  double down_seconds = 0.0;     // after the current up period
  uint64_t process = 0;          // the current up period's learner process
  int slot = -1;                 // the open slot it claimed (-1: none yet, or its learner is gone)
  bool leaving = false;          // it had notice
  size_t next_row = 0;           // of its trace
};

// ---- the event queue

struct Event {
  enum class Kind : uint8_t {
    kInterrupt,   // a chip of group `who` is interrupted (tag: interrupt epoch)
    kSliceBack,   // a slice of group `who` is back
    kResume,      // group `who` may train again (tag: epoch)
    kStepDone,    // learner `who` finished an inner step (tag: epoch)
    kAtHub,       // a message from learner `who` reaches its syncer shard's link (tag: mail slot)
    kToSyncer,    // a message from learner `who` arrives (tag: mail slot)
    kToLearner,   // a message to learner `who` arrives (tag: mail slot)
    kTimer,       // a SyncerCore timer fires (tag: timer slot)
    kLearnerTimer,  // a LearnerSession timer of learner `who` fires (tag: timer slot)
    kDown,        // the syncer sees learner `who` go down (tag: its incarnation)
    // Scavenging: machine `who` (tag: its period) ...
    kMachineUp,   // ... is lent to the run
    kNotice,      // ... will go in notice_seconds
    kMachineGone, // ... is taken back
    kClaim,       // ... asks the syncer for a slot (the claim arrives)
    kClaimed,     // ... hears which slot it got
    kExchanged,   // dp: the job's exchange after a step is over (tag: epoch)
  };
  double t;
  uint64_t seq;
  Kind kind;
  uint32_t who;
  uint64_t tag;
};

// Storage for what events carry: a slot is taken when scheduled, freed when delivered.
template <class T>
class Slab {
 public:
  uint64_t put(T value) {
    if (free_.empty()) {
      items_.push_back(std::move(value));
      return items_.size() - 1;
    }
    const uint64_t slot = free_.back();
    free_.pop_back();
    items_[slot] = std::move(value);
    return slot;
  }
  // The slot keeps what T's move leaves (for a Mail: no message, no share of
  // one) until it is put again.
  T take(uint64_t slot) {
    T value = std::move(items_[slot]);
    free_.push_back(slot);
    return value;
  }

 private:
  std::vector<T> items_;
  std::vector<uint64_t> free_;
};

// ---- a simulated learner: a LearnerSession over a replica without parameters

struct SimLearner {
  uint32_t id = 0;
  ChipGroup chips;
  uint64_t process = 1;        // the core's learners share one; each scavenged learner is its own
  int machine = -1;            // scavenging: the machine whose learner holds this open slot (-1: none)
  uint64_t incarnation = 1;
  // Its process: null while there is none (down, or an open slot no machine holds).
  std::unique_ptr<LearnerSession> session;
  bool welcomed = false;       // this incarnation was welcomed once
  double registered_at = 0.0;  // when this incarnation started
  // Its link to the syncer, each way (the slot's: a new process uses the same link).
  LinkQueue up, down;
  // On time: per fragment, its push not yet answered by a broadcast (the
  // step count at the push, and when the learner reached push + overlap
  // steps, -1 before), and the time it would have waited (a union of intervals).
  struct Due {
    bool pending = false;
    uint64_t version = 0;      // the push's base
    uint64_t step = 0;
    double deadline = -1.0;
  };
  std::vector<Due> dues;
  uint64_t steps = 0;
  bool held = false;  // network.wait_late: a step asked for, held until its late broadcasts are in
  bool overdue() const {
    return std::any_of(dues.begin(), dues.end(), [](const Due& d) { return d.pending && d.deadline >= 0; });
  }
  double late_seconds = 0.0, late_until = 0.0;
};

class Simulator {
 public:
  Simulator(const SimulationPlan& plan, const SimulationCell& cell)
      : plan_(plan), cell_(cell), rng_(Rng::derive(plan.seed, cell_key(cell))) {}

  Result<CellResult> run();

 private:
  // Scavenging's comings and goings, and the work done.
  struct Counts {
    uint64_t joins = 0, departures = 0, released = 0, cut_short = 0, claims_refused = 0, tokens = 0;
    double trained_seconds = 0.0;
  };
  // What a cell measures: batch means after the warm-up batch, and what was
  // counted when the warm-up ended (the result counts from there).
  struct Measured {
    double batch = 0.0;           // seconds: each batch, the warm-up too
    BatchMeans goodputs, merged;  // merged: learner seconds merged per second (scavenging)
    struct {
      double trained = 0.0, computed = 0.0, late = 0.0, allocated = 0.0;
      uint64_t vanished = 0;
      Counts counts;
    } at_warmup;
  };
  // run()'s steps: the cell set up, measured batch by batch, and its result.
  Status start();
  Measured measure();
  CellResult result(const Measured& m) const;
  double batch_seconds() const;    // of a measuring batch
  void run_until(double t);        // every event up to t; the chips' time counted to t
  void dispatch(const Event& e);   // one event carried out
  // Figures the measure takes at the warm-up's end and the result after it.
  double allocated() const;        // learner seconds allocated (the core's: members come and go)
  double computed() const;         // compute seconds: learners' trained, or dp's productive
  double late() const;             // decoupled: seconds learners would have waited for late broadcasts
  uint64_t vanished() const;       // open slots' failures, as the core counted them

  // The core alone (scavenged 0) draws what the same decoupled cell draws.
  static uint64_t cell_key(const SimulationCell& c) {
    return (static_cast<uint64_t>(c.mode) << 56) ^ (static_cast<uint64_t>(c.learners) << 40) ^
           (static_cast<uint64_t>(c.chips) << 4) ^ static_cast<uint64_t>(c.quorum) ^
           (static_cast<uint64_t>(c.sync_every) << 20) ^
           (c.scavenged > 0 ? 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(c.scavenged) : 0);
  }
  bool decoupled() const { return cell_.mode == Mode::kDecoupled; }
  bool scavenging() const { return cell_.scavenged >= 0; }

  void schedule(double t, Event::Kind kind, uint32_t who, uint64_t tag) {
    queue_.push(Event{t, next_seq_++, kind, who, tag}, run_of(kind));
  }
  // Inner steps and messages come a fixed delay ahead (unless steps jitter or
  // links differ): each kind is a run of the queue, mostly in time order.
  static size_t run_of(Event::Kind kind) {
    switch (kind) {
      case Event::Kind::kStepDone: return 0;
      case Event::Kind::kToSyncer: return 1;
      case Event::Kind::kToLearner: return 2;
      case Event::Kind::kAtHub: return 3;
      default: return EventQueue<Event>::kHeap;
    }
  }

  // Chips and their interruptions.
  void init_groups();
  void reschedule_interrupt(uint32_t g);
  void on_interrupt(uint32_t g);
  void on_slice_back(uint32_t g);
  void on_resume(uint32_t g);
  void stop_training(uint32_t g, ChipGroup::Phase phase);
  ChipGroup& group(uint32_t g) { return decoupled() ? learners_[g].chips : job_; }

  // Decoupled: the learners and the syncer.
  Status init_protocol();
  void start_step(uint32_t g);
  void on_step_done(uint32_t g);
  void learner_step_done(SimLearner& l);
  void start_learner(SimLearner& l);  // a new process: a new incarnation's session registers
  // Runs one event of learner l's session and carries out what it decided.
  template <class F>
  void in_session(SimLearner& l, F&& event);
  void carry_out(SimLearner& l, LearnerEffects& fx);
  void deliver_to_syncer(uint32_t from, uint32_t shard, const Message& m);
  void carry_out(SyncerEffects& fx, uint32_t shard = 0);  // effects of that syncer shard's core

  // Scavenging: machines, and the learners they lend.
  void init_machines();
  void on_machine_up(uint32_t h);
  void on_notice(uint32_t h);
  void on_machine_gone(uint32_t h);
  void on_claim(uint32_t h);
  void on_claimed(uint32_t h);
  void learner_gone(SimLearner& l);  // its process ends (after Done, or with its machine)
  AvailabilityPeriod next_period(uint32_t h);  // the next up and down period of machine h
  // The learner of machine `h` (null: it holds no slot, or its process ended).
  SimLearner* learner_of(uint32_t h);
  SteadyTime core_time() const {
    return SteadyTime{} + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(now_));
  }
  // What the SyncerCore spends. The simulation is one busy thread, so its
  // wall time is its CPU time (the thread CPU clock is a system call that
  // would slow the whole simulation 2.5x), read in ticks (ticks()) and made
  // seconds over the whole cell.
  template <class F>
  void in_core(F&& f, uint32_t shard = 0) {
    const uint64_t start = ticks();
    f();
    shard_ticks_[shard] += ticks() - start;
  }
  // Read twice around every syncer call, tens of millions of times a run: the
  // processor's time-stamp counter where there is one (10.7 ns a read on the
  // development machine, against 26 for steady_clock), else steady_clock's
  // ticks. Only their rate over the cell is used, so the counter must tick
  // steadily and alike on every core (an invariant TSC, as x86-64 processors
  // of the last fifteen years and their virtual machines have).
  static uint64_t ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<uint64_t>(WallClock::now().time_since_epoch().count());
#endif
  }
  // Syncer shards: each message goes where a real learner sends it (a push
  // to its fragment's owner, the rest to every shard). Learner records are
  // alike in every shard; the first answers for them.
  SyncerCore& core() const { return *cores_[0]; }
  uint32_t shards() const { return static_cast<uint32_t>(cores_.size()); }
  SyncerStats merged_stats() const;

  // Goodput so far, as the cell defines it (a share of chip time).
  double good_chip_seconds() const;

  // Links: when `bytes` sent now reach the far end of the learner's link
  // up (then the shard's, kAtHub), or the learner (nullopt: a partition drops them).
  void init_links();
  std::optional<double> to_hub_at(SimLearner& l, size_t bytes);
  std::optional<double> to_learner_at(SimLearner& l, uint32_t shard, size_t bytes);
  size_t wire_bytes(const Message& m) const;
  double dp_exchange();                        // dp: when the step's exchange is over, from now
  // On time: a push sent, a step ended, a broadcast arrived.
  void on_pushed(SimLearner& l, const Push& p);
  void on_learner_steps(SimLearner& l);
  void on_broadcast_arrived(SimLearner& l, const Broadcast& b);

  const SimulationPlan& plan_;
  SimulationCell cell_;
  Rng rng_;
  EventQueue<Event> queue_;
  uint64_t next_seq_ = 0;
  double now_ = 0.0;
  uint64_t events_ = 0;
  double interrupt_rate_per_chip_ = 0.0;  // per second
  int64_t chips_per_slice_ = 1;

  ChipGroup job_;                      // dp, elastic_dp
  std::vector<SimLearner> learners_;   // decoupled
  std::vector<std::unique_ptr<SyncerCore>> cores_;  // by syncer shard
  // A message in flight: the syncer shard it goes to or comes from, and the
  // incarnation of the learner that sent it (0: the syncer did). A learner's
  // is its own (one per inner step: no allocation for it); the syncer's is
  // shared, as the learner keeps it and a broadcast's copies are one.
  struct Mail {
    Message from_learner;
    std::shared_ptr<const Message> to_learner;
    uint64_t incarnation = 0;
    uint32_t shard = 0;
    size_t bytes = 0;  // on the wire
  };
  Slab<Mail> mail_;
  Slab<SyncerEffects::Timer> timers_;
  struct LearnerTimerMail {
    uint64_t incarnation = 0;
    LearnerEffects::Timer timer{LearnerTimer::kLookup, 0.0};
  };
  Slab<LearnerTimerMail> learner_timers_;
  // What every simulated replica shares: the layout's fingerprint and
  // initialization CRC, a zero push per fragment, the moments handed a peer.
  std::shared_ptr<const CountingReplica::Model> counted_;
  int64_t chips_per_learner_ = 0;
  std::vector<uint64_t> shard_ticks_ = std::vector<uint64_t>(1, 0);  // in_core(), by syncer shard
  std::vector<double> reintegrations_;  // a restarted learner: from its Register to its welcome (seconds)
  // Links.
  std::vector<LinkQueue> hub_in_, hub_out_;   // by syncer shard
  std::vector<LinkQueue> members_up_, members_down_;  // dp: the exchange's members
  bool sized_ = false;                 // some link has a rate: messages are sized
  double payload_scale_ = 1.0;         // wire parameters / simulated ones
  double dp_parameters_ = 0.0;
  uint64_t lost_to_partition_ = 0;

  // Scavenging.
  std::vector<Machine> machines_;
  Rng availability_rng_{0};            // apart from the training's draws: the same machines for any model
  uint64_t next_process_ = 2;          // 1 is the core's
  std::vector<double> joins_seconds_;  // a machine up to its learner's welcome
  Counts counts_;  // as they happen (the measured share is taken after the warm-up)
};

// ---- chips

void Simulator::init_groups() {
  chips_per_slice_ = std::max<int64_t>(1, plan_.failures.slice_chips);
  interrupt_rate_per_chip_ = 1.0 / (plan_.failures.mtbi_chip_years * kSecondsPerYear);
  const auto make = [&](int64_t chips, bool elastic) {
    ChipGroup g;
    g.chips = chips;
    g.slices = std::max<int64_t>(1, (chips + chips_per_slice_ - 1) / chips_per_slice_);
    g.up = g.slices;
    g.elastic = elastic;
    return g;
  };
  if (!decoupled()) {
    job_ = make(cell_.chips, cell_.mode == Mode::kElasticDp);
    reschedule_interrupt(0);
    start_step(0);
    return;
  }
  chips_per_learner_ = cell_.chips / cell_.learners;
  learners_.resize(static_cast<size_t>(cell_.learners + std::max(0, cell_.scavenged)));
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    learners_[m].id = m;
    learners_[m].chips = make(chips_per_learner_, plan_.training.learner_failure == LearnerFailure::kElastic);
    if (m < static_cast<uint32_t>(cell_.learners)) {
      reschedule_interrupt(m);
      continue;
    }
    // An open slot: no process until a machine's learner claims it. Only
    // availability takes scavenged learners away ([failures] is the core's).
    learners_[m].chips.phase = ChipGroup::Phase::kDown;
    learners_[m].incarnation = 0;
  }
}

// Interruptions are memoryless: when the rate changes, draw the next one afresh.
void Simulator::reschedule_interrupt(uint32_t g) {
  ChipGroup& c = group(g);
  ++c.interrupt_epoch;
  const bool running = c.phase == ChipGroup::Phase::kTraining;
  if (!plan_.failures.while_down && !running) return;
  const double rate = double(c.chips) * double(c.up) / double(c.slices) * interrupt_rate_per_chip_;
  if (rate <= 0.0) return;
  double u = rng_.uniform();
  while (u <= 0.0) u = rng_.uniform();
  schedule(now_ - std::log(u) / rate, Event::Kind::kInterrupt, g, c.interrupt_epoch);
}

void Simulator::stop_training(uint32_t g, ChipGroup::Phase phase) {
  ChipGroup& c = group(g);
  c.advance(now_);
  ++c.epoch;  // a step under way is lost
  c.stepping = false;
  c.upscale_pending = false;  // the pause takes the slice in
  const bool was_down = c.phase == ChipGroup::Phase::kDown;
  c.phase = phase;
  if (!decoupled()) return;
  SimLearner& l = learners_[g];
  if (phase == ChipGroup::Phase::kPaused) {  // its process lives: it reads its mail
    if (l.session) in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.pause(now_, fx); });
    return;
  }
  if (phase == ChipGroup::Phase::kDown && !was_down && l.session) {
    // The learner's process is gone: its unmerged progress with it. The syncer
    // notices when the connection drops (one latency later).
    l.session.reset();
    schedule(now_ + l.down.shape().delay_ms * 1e-3, Event::Kind::kDown, g, l.incarnation);
  }
}

void Simulator::on_interrupt(uint32_t g) {
  ChipGroup& c = group(g);
  c.advance(now_);
  ++c.interruptions;
  c.up -= 1;
  schedule(now_ + plan_.failures.recovery.sample(rng_), Event::Kind::kSliceBack, g, 0);
  if (!c.elastic || c.up == 0) {
    stop_training(g, ChipGroup::Phase::kDown);
  } else {
    stop_training(g, ChipGroup::Phase::kPaused);
    c.resume_at = std::max(c.resume_at, now_ + plan_.failures.downscale_seconds);
    schedule(c.resume_at, Event::Kind::kResume, g, c.epoch);
  }
  reschedule_interrupt(g);
}

void Simulator::on_slice_back(uint32_t g) {
  ChipGroup& c = group(g);
  c.advance(now_);
  c.up += 1;
  if (c.phase == ChipGroup::Phase::kDown) {
    // Down (dp, a restarting learner, or an elastic group that lost every
    // slice): it restarts once it has what it needs.
    if (c.elastic || c.up == c.slices) {
      c.resume_at = now_ + plan_.failures.restart_seconds;
      schedule(c.resume_at, Event::Kind::kResume, g, c.epoch);
    }
  } else if (c.elastic && c.stepping) {
    c.upscale_pending = true;
  } else if (c.elastic) {
    stop_training(g, ChipGroup::Phase::kPaused);
    c.resume_at = std::max(c.resume_at, now_ + plan_.failures.upscale_seconds);
    schedule(c.resume_at, Event::Kind::kResume, g, c.epoch);
  }
  reschedule_interrupt(g);
}

void Simulator::on_resume(uint32_t g) {
  ChipGroup& c = group(g);
  c.advance(now_);
  const bool was_down = c.phase == ChipGroup::Phase::kDown;
  c.phase = ChipGroup::Phase::kTraining;
  reschedule_interrupt(g);
  if (!decoupled()) return start_step(g);
  SimLearner& l = learners_[g];
  if (was_down) {  // a new process: a new incarnation registers and waits for its welcome
    ++l.incarnation;
    return start_learner(l);
  }
  if (l.session) in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.resume(now_, fx); });
}

// ---- decoupled: learners

Status Simulator::init_protocol() {
  Topology t;
  t.mode = Mode::kDecoupled;
  t.seed = plan_.seed;
  t.tokens = uint64_t{1} << 62;  // never reached: the simulation ends each cell
  // An MLP with a tensor per fragment, of about training.parameters (at least
  // the smallest): nothing is trained, but the core merges, steps and
  // broadcasts real fragments of that size.
  t.model.kind = ModelKind::kMlp;
  const int layers = std::max(1, (plan_.training.outer.fragments + 1) / 2);
  const int64_t width = std::max<int64_t>(2, std::llround(std::sqrt(double(plan_.training.parameters) / layers)));
  t.model.hidden.assign(static_cast<size_t>(layers), static_cast<int>(width));
  t.data.kind = DataKind::kSynthetic;
  t.data.features = 2;
  t.data.classes = 2;
  t.learners.assign(static_cast<size_t>(cell_.learners), LearnerSpec{1.0, 1});
  if (cell_.scavenged > 0) t.membership.max_learners = cell_.learners + cell_.scavenged;
  t.outer = plan_.training.outer;
  t.outer.quorum = std::min(cell_.quorum, cell_.learners + std::max(0, cell_.scavenged));
  if (cell_.sync_every > 0) t.outer.sync_every = cell_.sync_every;
  t.outer.final_flush = false;
  t.checkpoint.dir.clear();
  t.checkpoint.moments = false;
  t.syncer.shards = plan_.training.syncer_shards;
  ATOLL_RETURN_IF_ERROR(validate(t).with_context("the simulated topology"));
  for (uint32_t shard = 0; shard < static_cast<uint32_t>(t.syncer.shards); ++shard) {
    auto core = SyncerCore::create(t, core_time(), std::nullopt, shard);
    if (!core.ok()) return core.status().with_context("the simulated syncer");
    cores_.push_back(std::move(*core));
  }
  shard_ticks_.assign(cores_.size(), 0);
  auto counted = std::make_shared<CountingReplica::Model>();
  counted->topology = t;
  counted->parameters = core().layout().size();
  if (plan_.network.wire_parameters > 0)
    payload_scale_ = plan_.network.wire_parameters / double(std::max<size_t>(1, counted->parameters));
  counted->fingerprint = core().layout().fingerprint();
  // Welcomes of version 0 then carry no values, as real learners' do (else M
  // welcomes at once hold M copies of the model).
  counted->initial_crc = parameters_crc(initial_parameters(*make_model(t).value(), t));
  for (const auto& f : core().fragments())
    counted->zero_deltas.push_back(
        encode_payload(t.outer.push_codec, t.outer.push_block, std::vector<float>(f.size, 0.0f)));
  for (const auto& shard : cores_) {  // each shard asks for, and takes, its own fragments' moments
    const std::vector<float> zeros(shard->owned_parameters(), 0.0f);
    counted->moments.push_back(
        OptimizerState{1, encode_payload(Codec::kBf16, 0, zeros), encode_payload(Codec::kBf16, 0, zeros)});
  }
  counted_ = std::move(counted);
  for (uint32_t m = 0; m < static_cast<uint32_t>(cell_.learners); ++m) start_learner(learners_[m]);
  return {};
}

void Simulator::start_learner(SimLearner& l) {
  l.welcomed = false;
  l.dues.clear();  // a new process: nothing of the old one's is pending
  l.held = false;
  l.registered_at = now_;
  LearnerSession::Options options;
  options.shards = static_cast<int>(shards());
  options.restarted = l.incarnation > 1 && l.machine < 0;
  l.session = std::make_unique<LearnerSession>(std::make_shared<CountingReplica>(l.id, l.incarnation, counted_),
                                               std::move(options), now_);
  // Every shard is always there: the simulation does not lose the syncer.
  const std::vector<bool> reachable(shards(), true);
  in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.lookup(reachable, now_, fx); });
}

template <class F>
void Simulator::in_session(SimLearner& l, F&& event) {
  LearnerEffects fx;
  event(*l.session, fx);
  carry_out(l, fx);
}

void Simulator::carry_out(SimLearner& l, LearnerEffects& fx) {
  for (auto& send : fx.sends) {
    if (const auto* p = std::get_if<Push>(&send.message)) on_pushed(l, *p);
    const size_t bytes = wire_bytes(send.message);
    const std::optional<double> at = to_hub_at(l, bytes);
    if (!at) continue;
    Mail mail{std::move(send.message), nullptr, l.incarnation, send.shard, bytes};
    // A shaped hub queues messages in the order they reach it, which is not
    // the order learners send them: it takes each when it gets there.
    const bool shaped = hub_in_[send.shard].shape().active();
    schedule(*at, shaped ? Event::Kind::kAtHub : Event::Kind::kToSyncer, l.id, mail_.put(std::move(mail)));
  }
  for (const auto& t : fx.timers)
    schedule(now_ + std::max(0.0, t.seconds), Event::Kind::kLearnerTimer, l.id,
             learner_timers_.put(LearnerTimerMail{l.incarnation, t}));
  if (fx.welcomed && !l.welcomed) {
    l.welcomed = true;
    if (l.machine >= 0) joins_seconds_.push_back(now_ - machines_[static_cast<size_t>(l.machine)].up_since);
    else if (l.incarnation > 1) reintegrations_.push_back(now_ - l.registered_at);
  }
  // The session asks for a step; an upscale pending pauses the chips first,
  // and with wait_late a broadcast overdue holds it.
  if (fx.start_step) {
    ChipGroup& c = l.chips;
    if (plan_.network.wait_late && l.overdue()) l.held = true;
    else if (c.may_step()) start_step(l.id);
  }
  // It left in order (Done), or ended otherwise: its process goes.
  if (fx.end != LearnerEffects::End::kNone) {
    if (l.machine >= 0) learner_gone(l);
    else stop_training(l.id, ChipGroup::Phase::kDown);
  }
}

void Simulator::deliver_to_syncer(uint32_t from, uint32_t shard, const Message& m) {
  // One actor per learner process (the core's share process 1).
  const uint64_t process = learners_[from].process;
  const Sender sender{process, ((process - 1) << 20) + from + 1};
  SyncerCore& c = *cores_[shard];
  SyncerEffects fx;
  in_core(
      [&] {
        if (const auto* r = std::get_if<Register>(&m)) c.on_register(*r, sender, core_time(), fx);
        else if (const auto* p = std::get_if<Push>(&m)) c.on_push(*p, core_time(), fx);
        else if (const auto* g = std::get_if<Progress>(&m)) c.on_progress(*g, core_time(), fx);
        else if (const auto* mo = std::get_if<Moments>(&m)) c.on_moments(from, *mo, core_time(), fx);
        else if (const auto* lv = std::get_if<Leave>(&m)) c.on_leave(*lv, core_time(), fx);
      },
      shard);
  carry_out(fx, shard);
}

SyncerStats Simulator::merged_stats() const {
  std::vector<const SyncerStats*> shards;
  for (const auto& c : cores_) shards.push_back(&c->stats());
  return merge_shard_stats(shards);
}

void Simulator::carry_out(SyncerEffects& fx, uint32_t shard) {
  for (auto& s : fx.sends) {
    const std::optional<double> at = to_learner_at(learners_[s.learner], shard, wire_bytes(s.message));
    if (!at) continue;
    schedule(*at, Event::Kind::kToLearner, s.learner,
             mail_.put(Mail{{}, std::make_shared<const Message>(std::move(s.message)), 0, shard}));
  }
  for (auto& m : fx.to_all) {
    const auto shared = std::make_shared<const Message>(std::move(m));
    const size_t bytes = wire_bytes(*shared);  // one encoding for every copy
    for (uint32_t id = 0; id < learners_.size(); ++id) {
      if (!cores_[shard]->learners()[id].connected) continue;
      const std::optional<double> at = to_learner_at(learners_[id], shard, bytes);
      if (at) schedule(*at, Event::Kind::kToLearner, id, mail_.put(Mail{{}, shared, 0, shard}));
    }
  }
  for (const auto& t : fx.timers) schedule(now_ + std::max(0.0, t.seconds), Event::Kind::kTimer, shard, timers_.put(t));
  // The scavenged learners' comings and goings, as the core decided them.
  for (const auto& e : fx.events) {
    if (const auto* j = std::get_if<event::Joined>(&e); j && j->learner >= static_cast<uint32_t>(cell_.learners))
      ++counts_.joins;
    else if (const auto* d = std::get_if<event::Departed>(&e))
      ++(d->orderly ? counts_.departures : counts_.released);
  }
}

void Simulator::start_step(uint32_t g) {
  ChipGroup& c = group(g);
  const double jitter = plan_.training.step_jitter > 0 ? std::exp(plan_.training.step_jitter * rng_.normal()) : 1.0;
  c.stepping = true;
  c.step_length = plan_.training.step_seconds * jitter;
  c.step_share = c.share();
  schedule(now_ + c.step_length, Event::Kind::kStepDone, g, c.epoch);
}

void Simulator::on_step_done(uint32_t g) {
  ChipGroup& c = group(g);
  c.stepping = false;
  if (decoupled()) learner_step_done(learners_[g]);
  else c.productive += c.step_length * c.step_share;
  if (c.upscale_pending) {
    stop_training(g, ChipGroup::Phase::kPaused);
    c.resume_at = std::max(c.resume_at, now_ + plan_.failures.upscale_seconds);
    schedule(c.resume_at, Event::Kind::kResume, g, c.epoch);
    return;
  }
  if (decoupled() || c.phase != ChipGroup::Phase::kTraining) return;  // a learner's session says when
  // dp: the next step starts once the exchange is over (at once without links).
  if (plan_.network.given) schedule(dp_exchange(), Event::Kind::kExchanged, g, c.epoch);
  else start_step(g);
}

void Simulator::learner_step_done(SimLearner& l) {
  const ChipGroup& c = l.chips;
  // A step trains one token per chip that took part, and counts its time at
  // that share of the learner's chips: goodput is a share of chip time.
  const auto tokens = static_cast<int64_t>(std::max<double>(1.0, std::round(c.step_share * double(chips_per_learner_))));
  const double seconds = c.step_length * c.step_share;
  counts_.tokens += static_cast<uint64_t>(tokens);
  counts_.trained_seconds += seconds;
  in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.on_step_done({0.0f, tokens, 0.0}, now_, fx, seconds); });
  on_learner_steps(l);
}

// ---- links

void Simulator::init_links() {
  const NetworkModel& net = plan_.network;
  const auto shape_of = [&](int learner) {
    if (net.given) return net.link_of(learner);
    LinkShape s;  // no [network]: a message takes training.latency_seconds, whatever its size
    s.delay_ms = plan_.training.latency_seconds * 1e3;
    return s;
  };
  sized_ = net.hub.rate_mbit > 0;
  const uint64_t seed = Rng::derive(plan_.seed, 0x6c696e6bULL);  // "link"
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    const LinkShape s = shape_of(static_cast<int>(m));
    sized_ = sized_ || s.rate_mbit > 0;
    learners_[m].up = LinkQueue(s, seed + 2 * m);
    learners_[m].down = LinkQueue(s, seed + 2 * m + 1);
  }
  if (!decoupled())
    for (int m = 0; m < cell_.learners; ++m) {
      const LinkShape s = shape_of(m);
      sized_ = sized_ || s.rate_mbit > 0;
      members_up_.emplace_back(s, seed + 2 * static_cast<uint64_t>(m));
      members_down_.emplace_back(s, seed + 2 * static_cast<uint64_t>(m) + 1);
    }
  const size_t shards = static_cast<size_t>(std::max(1, plan_.training.syncer_shards));
  hub_in_.assign(shards, LinkQueue(net.hub, seed - 1));
  hub_out_.assign(shards, LinkQueue(net.hub, seed - 2));
  dp_parameters_ = net.wire_parameters > 0 ? net.wire_parameters : double(std::max<int64_t>(1, plan_.training.parameters));
}

// Encoded as the wire carries it. With wire_parameters, a fragment's payload
// is scaled to an equal share of the wire model (atoll balances fragments by
// size; the simulated model's tensors are not), the moments to the whole.
size_t Simulator::wire_bytes(const Message& m) const {
  if (!sized_) return 0;  // no rate anywhere: only the delay counts
  const double encoded = static_cast<double>(encode_message(m).size());
  if (plan_.network.wire_parameters <= 0 || cores_.empty()) return static_cast<size_t>(encoded);
  const auto& fragments = core().fragments();
  double extra = 0.0;  // bytes beyond the encoded ones
  // As the codec would encode that many values (a tiny fragment's block steps do not scale).
  const auto add = [&](const Payload& p, double scale) {
    const auto values = static_cast<size_t>(std::llround(double(p.count) * scale));
    extra += static_cast<double>(encoded_size(p.codec, values, p.block)) - static_cast<double>(p.bytes.size());
  };
  const auto of = [&](uint32_t f) {
    const double share = plan_.network.wire_parameters / double(fragments.size());
    return f < fragments.size() ? share / double(std::max<size_t>(1, fragments[f].size)) : payload_scale_;
  };
  if (const auto* p = std::get_if<Push>(&m)) add(p->delta, of(p->fragment));
  else if (const auto* b = std::get_if<Broadcast>(&m)) add(b->values, of(b->fragment));
  else if (const auto* w = std::get_if<Welcome>(&m)) for (const auto& f : w->fragments) add(f.values, of(f.fragment));
  else if (const auto* r = std::get_if<Register>(&m)) for (const auto& f : r->bases) add(f.values, of(f.fragment));
  else if (const auto* o = std::get_if<Moments>(&m)) { add(o->state.m, payload_scale_); add(o->state.v, payload_scale_); }
  return static_cast<size_t>(std::llround(encoded + extra));
}

std::optional<double> Simulator::to_hub_at(SimLearner& l, size_t bytes) {
  if (plan_.network.cut_until(static_cast<int>(l.id), now_) > now_) {
    ++lost_to_partition_;
    return std::nullopt;
  }
  return l.up.arrival(now_, bytes);
}

std::optional<double> Simulator::to_learner_at(SimLearner& l, uint32_t shard, size_t bytes) {
  if (plan_.network.cut_until(static_cast<int>(l.id), now_) > now_) {
    ++lost_to_partition_;
    return std::nullopt;
  }
  return l.down.arrival(hub_out_[shard].arrival(now_, bytes), bytes);
}

// ---- on time: what a learner would wait if it waited for late broadcasts

void Simulator::on_pushed(SimLearner& l, const Push& p) {
  if (l.dues.size() <= p.fragment) l.dues.resize(p.fragment + 1);
  SimLearner::Due& d = l.dues[p.fragment];
  if (d.pending) return;  // the earlier push's deadline stands
  d = SimLearner::Due{true, p.base_version, l.steps, -1.0};
}

void Simulator::on_learner_steps(SimLearner& l) {
  ++l.steps;
  // With eager updates the learner already holds its share of the merge to
  // come, so a broadcast is late only when the fragment's next push falls due
  // (one outer step overlapped, as Kale et al.'s workers wait); otherwise tau.
  const OuterSpec& o = plan_.training.outer;
  const auto overlap = static_cast<uint64_t>(std::max(0, o.eager_updates ? o.sync_every : o.overlap));
  for (auto& d : l.dues)
    if (d.pending && d.deadline < 0 && l.steps >= d.step + overlap) d.deadline = now_;
}

// When it arrives, not when the learner adopts it at its next step's end:
// the wait is [deadline, arrival], counted once where waits overlap.
void Simulator::on_broadcast_arrived(SimLearner& l, const Broadcast& b) {
  if (b.fragment >= l.dues.size()) return;
  SimLearner::Due& d = l.dues[b.fragment];
  if (!d.pending || b.version <= d.version) return;
  if (d.deadline >= 0) {
    const double from = std::max(d.deadline, l.late_until);
    if (now_ > from) l.late_seconds += now_ - from;
    l.late_until = std::max(l.late_until, now_);
  }
  d.pending = false;
  if (l.held && !l.overdue()) {
    l.held = false;
    if (l.chips.may_step()) start_step(l.id);
  }
}

// atoll's dp: every member's gradient to the syncer, then the new
// parameters to every member; the step waits for the slowest. A member cut
// off by a partition holds the step until its link is back.
double Simulator::dp_exchange() {
  const size_t up = sized_ ? encoded_size(Codec::kFp32, static_cast<size_t>(dp_parameters_), 0) : 0;
  double merged = now_;
  for (int m = 0; m < cell_.learners; ++m) {
    const double start = plan_.network.cut_until(m, now_);
    merged = std::max(merged, hub_in_[0].arrival(members_up_[static_cast<size_t>(m)].arrival(start, up), up));
  }
  double ready = merged;
  for (int m = 0; m < cell_.learners; ++m)
    ready = std::max(ready, members_down_[static_cast<size_t>(m)].arrival(hub_out_[0].arrival(merged, up), up));
  return ready;
}

// ---- scavenging: machines and their learners

double exponential(Rng& rng, double mean) {
  double u = rng.uniform();
  while (u <= 0.0) u = rng.uniform();
  return -mean * std::log(u);
}

void Simulator::init_machines() {
  const ScavengingPlan& s = *plan_.scavenging;
  // Drawn apart from the training: the machines come and go alike whatever the model.
  availability_rng_ = Rng(Rng::derive(plan_.seed, ~cell_key(cell_)));
  machines_.resize(static_cast<size_t>(cell_.scavenged));
  for (uint32_t h = 0; h < machines_.size(); ++h) {
    // Random availability starts stationary: up with probability a (the rest
    // of an exponential up period is exponential too), else down.
    if (s.trace.empty() && availability_rng_.uniform() >= s.availability)
      schedule(now_ + exponential(availability_rng_, s.mean_up_seconds * (1.0 - s.availability) / s.availability),
               Event::Kind::kMachineUp, h, machines_[h].period);
    else
      on_machine_up(h);
  }
}

AvailabilityPeriod Simulator::next_period(uint32_t h) {
  const ScavengingPlan& s = *plan_.scavenging;
  AvailabilityPeriod p;
  if (!s.trace.empty()) {
    const auto& rows = s.trace[h];
    p = rows[machines_[h].next_row++ % rows.size()];  // a trace repeats
  } else if (s.availability >= 1.0) {
    p.up_seconds = std::numeric_limits<double>::infinity();
  } else {
    p.up_seconds = exponential(availability_rng_, s.mean_up_seconds);
    p.down_seconds = exponential(availability_rng_, s.mean_up_seconds * (1.0 - s.availability) / s.availability);
  }
  if (p.notice_seconds < 0) p.notice_seconds = s.notice_seconds;
  return p;
}

// A new learner process asks for a slot; the machine's end is known now
// (as a spot machine's is not, but the simulation only acts on it when due).
void Simulator::on_machine_up(uint32_t h) {
  Machine& m = machines_[h];
  const AvailabilityPeriod p = next_period(h);
  ++m.period;
  m.down_seconds = p.down_seconds;
  if (!(p.up_seconds > 0)) {  // a trace's row that stays down
    schedule(now_ + p.down_seconds, Event::Kind::kMachineUp, h, m.period);
    return;
  }
  m.up_since = now_;
  m.leaving = false;
  m.slot = -1;
  m.process = next_process_++;
  schedule(now_ + plan_.training.latency_seconds, Event::Kind::kClaim, h, m.period);
  if (!std::isfinite(p.up_seconds)) return;  // availability 1: never taken back
  const double gone = now_ + p.up_seconds;
  if (p.notice_seconds > 0) schedule(std::max(now_, gone - p.notice_seconds), Event::Kind::kNotice, h, m.period);
  schedule(gone, Event::Kind::kMachineGone, h, m.period);
}

void Simulator::on_claim(uint32_t h) {
  Machine& m = machines_[h];
  if (m.leaving) return;  // with notice, it does not join any more
  SyncerEffects fx;
  Admission a;
  in_core([&] { a = core().claim(m.process, core_time(), fx); });
  carry_out(fx);
  if (!a.accepted()) {  // every open slot taken or held: ask again later
    ++counts_.claims_refused;
    schedule(now_ + ScavengingPlan::kClaimRetrySeconds, Event::Kind::kClaim, h, m.period);
    return;
  }
  m.slot = static_cast<int>(a.learner);
  schedule(now_ + plan_.training.latency_seconds, Event::Kind::kClaimed, h, m.period);
}

// The learner takes its slot as a new incarnation of it (a slot's
// incarnations grow across its members) and registers without bases.
void Simulator::on_claimed(uint32_t h) {
  Machine& m = machines_[h];
  if (m.leaving || m.slot < 0) return;  // it will not register: the claim lapses in the core
  SimLearner& l = learners_[static_cast<size_t>(m.slot)];
  l.machine = static_cast<int>(h);
  l.process = m.process;
  ++l.incarnation;
  l.chips.advance(now_);
  l.chips.phase = ChipGroup::Phase::kTraining;
  start_learner(l);
}

// Notice: a learner not yet welcomed has nothing to hand over and goes;
// one that trains finishes its step, pushes its progress, says Leave, and
// waits for Done (or for its machine to go).
void Simulator::on_notice(uint32_t h) {
  Machine& m = machines_[h];
  m.leaving = true;
  SimLearner* l = learner_of(h);
  if (!l) return;
  l->chips.advance(now_);
  l->chips.phase = ChipGroup::Phase::kPaused;  // no step after the one under way
  // It waits for Done until its machine goes, however long the notice.
  in_session(*l, [&](LearnerSession& s, LearnerEffects& fx) {
    s.leave("its machine is taken back", std::numeric_limits<double>::infinity(), now_, fx);
  });
}

// Without notice, or when the notice ran out before Done, the learner
// vanishes with its machine: a failure, unless it said Leave.
void Simulator::on_machine_gone(uint32_t h) {
  Machine& m = machines_[h];
  if (SimLearner* l = learner_of(h)) {
    if (l->session && l->session->leaving()) ++counts_.cut_short;
    learner_gone(*l);
  }
  m.leaving = false;
  m.slot = -1;
  ++m.period;
  schedule(now_ + m.down_seconds, Event::Kind::kMachineUp, h, m.period);
}

void Simulator::learner_gone(SimLearner& l) {
  machines_[static_cast<size_t>(l.machine)].slot = -1;
  l.machine = -1;
  stop_training(l.id, ChipGroup::Phase::kDown);  // the syncer sees it go one latency later
}

SimLearner* Simulator::learner_of(uint32_t h) {
  const Machine& m = machines_[h];
  if (m.slot < 0) return nullptr;
  SimLearner& l = learners_[static_cast<size_t>(m.slot)];
  return l.machine == static_cast<int>(h) && l.process == m.process ? &l : nullptr;
}

double Simulator::good_chip_seconds() const {
  if (!decoupled()) return job_.productive;
  double good = 0.0;  // learner seconds (each learner is 1/M of the chips), each shard its fragments' share
  for (const auto& c : cores_) good += c->stats().good_seconds;
  return good;
}

// ---- the loop

// One event: what it means for the chips, the learners, the links, the syncer or the machines.
void Simulator::dispatch(const Event& e) {
  switch (e.kind) {
    case Event::Kind::kInterrupt:
      if (e.tag == group(e.who).interrupt_epoch) on_interrupt(e.who);
      break;
    case Event::Kind::kSliceBack: on_slice_back(e.who); break;
    case Event::Kind::kResume:
      if (e.tag == group(e.who).epoch && group(e.who).phase != ChipGroup::Phase::kTraining) on_resume(e.who);
      break;
    case Event::Kind::kStepDone:
      if (e.tag == group(e.who).epoch && group(e.who).stepping) on_step_done(e.who);
      break;
    case Event::Kind::kExchanged:
      if (e.tag == group(e.who).epoch && group(e.who).phase == ChipGroup::Phase::kTraining &&
          !group(e.who).stepping)
        start_step(e.who);
      break;
    case Event::Kind::kAtHub: {
      Mail m = mail_.take(e.tag);
      const double at = hub_in_[m.shard].arrival(now_, m.bytes);
      schedule(at, Event::Kind::kToSyncer, e.who, mail_.put(std::move(m)));
      break;
    }
    case Event::Kind::kToSyncer: {
      const Mail m = mail_.take(e.tag);
      // What a process sent just before it died is dropped with its
      // connection (the syncer would see it go down right after).
      const SimLearner& l = learners_[e.who];
      if (l.session && m.incarnation == l.incarnation) deliver_to_syncer(e.who, m.shard, m.from_learner);
      break;
    }
    case Event::Kind::kToLearner: {
      Mail m = mail_.take(e.tag);
      SimLearner& l = learners_[e.who];
      if (!l.session) break;  // its process is gone
      if (const auto* b = std::get_if<Broadcast>(m.to_learner.get())) on_broadcast_arrived(l, *b);
      in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.on_message(m.shard, m.to_learner, now_, fx); });
      break;
    }
    case Event::Kind::kLearnerTimer: {
      const LearnerTimerMail t = learner_timers_.take(e.tag);
      SimLearner& l = learners_[e.who];
      if (!l.session || t.incarnation != l.incarnation) break;  // of a process that has ended
      in_session(l, [&](LearnerSession& s, LearnerEffects& fx) { s.on_timer(t.timer.kind, t.timer.tag, now_, fx); });
      break;
    }
    case Event::Kind::kTimer: {
      const SyncerEffects::Timer t = timers_.take(e.tag);
      SyncerEffects fx;
      in_core([&] { cores_[e.who]->on_timer(t, core_time(), fx); }, e.who);
      carry_out(fx, e.who);
      break;
    }
    case Event::Kind::kDown: {
      for (uint32_t shard = 0; shard < shards(); ++shard) {
        SyncerEffects fx;
        if (cores_[shard]->learners()[e.who].incarnation <= e.tag)  // not a newer incarnation's record
          in_core([&] { cores_[shard]->on_learner_down(e.who, core_time(), fx); }, shard);
        carry_out(fx, shard);
      }
      break;
    }
    case Event::Kind::kMachineUp:
    case Event::Kind::kNotice:
    case Event::Kind::kMachineGone:
    case Event::Kind::kClaim:
    case Event::Kind::kClaimed:
      if (e.tag != machines_[e.who].period) break;  // of a period that has ended
      if (e.kind == Event::Kind::kMachineUp) on_machine_up(e.who);
      else if (e.kind == Event::Kind::kNotice) on_notice(e.who);
      else if (e.kind == Event::Kind::kMachineGone) on_machine_gone(e.who);
      else if (e.kind == Event::Kind::kClaim) on_claim(e.who);
      else on_claimed(e.who);
      break;
  }
}

// A measuring batch: long enough for about 100 interruptions over the whole
// cluster, and at least 20 syncs of a learner (scavenging: 2 up and down
// periods of a machine too); at least kMinBatches + 1 fit in max_hours.
double Simulator::batch_seconds() const {
  const double cluster_rate = static_cast<double>(cell_.chips) * interrupt_rate_per_chip_;
  const double sync_seconds = plan_.training.step_seconds * (cell_.sync_every > 0 ? cell_.sync_every : plan_.training.outer.sync_every);
  double batch = std::max(100.0 / cluster_rate, decoupled() ? 20.0 * sync_seconds : 0.0);
  if (scavenging() && cell_.scavenged > 0)
    batch = std::max(batch, 2.0 * plan_.scavenging->mean_cycle_seconds(cell_.scavenged));
  return std::min(batch, plan_.max_hours * 3600.0 / double(kMinBatches + 1));
}

Status Simulator::start() {
  if (cell_.chips <= 0) return Status::invalid_argument("a cell needs chips > 0");
  if (cell_.learners < 1) return Status::invalid_argument("a cell needs at least one learner");
  if (decoupled() && cell_.chips < cell_.learners)
    return Status::invalid_argument(std::to_string(cell_.chips) + " chips cannot make " +
                                    std::to_string(cell_.learners) + " learners");
  init_groups();
  init_links();
  if (decoupled()) ATOLL_RETURN_IF_ERROR(init_protocol());
  if (scavenging() && cell_.scavenged > 0) init_machines();
  return {};
}

void Simulator::run_until(double t) {
  while (!queue_.empty() && queue_.top().t <= t) {
    const Event e = queue_.top();
    queue_.pop();
    now_ = e.t;
    ++events_;
    dispatch(e);
  }
  now_ = t;
  if (decoupled()) for (auto& l : learners_) l.chips.advance(now_);
  else job_.advance(now_);
}

double Simulator::allocated() const { return core().allocated_seconds(core_time()); }

double Simulator::computed() const { return decoupled() ? counts_.trained_seconds : job_.productive; }

double Simulator::late() const {
  double s = 0.0;
  for (const auto& l : learners_) s += l.late_seconds;
  return s;
}

uint64_t Simulator::vanished() const {
  uint64_t n = 0;
  for (size_t m = static_cast<size_t>(cell_.learners); m < learners_.size(); ++m) n += core().learners()[m].failures;
  return n;
}

// Batch means over batches of batch_seconds(), the first (warm-up) left out,
// until the goodput's interval is within the plan's precision (or max_hours).
Simulator::Measured Simulator::measure() {
  Measured m;
  m.batch = batch_seconds();
  const double max_seconds = plan_.max_hours * 3600.0, min_seconds = plan_.min_hours * 3600.0;
  const double allocated_per_second = decoupled() ? double(cell_.learners) : 1.0;
  double batch_start = 0.0, good_at_batch_start = 0.0, allocated_at_batch_start = 0.0;
  for (double batch_end = m.batch;; batch_end += m.batch) {
    run_until(batch_end);
    const double good = good_chip_seconds();
    // Scavenging: allocated learner time is the core's figure (members come and go).
    const double alloc = scavenging() ? allocated() : 0.0;
    if (batch_start > 0.0) {
      const double given = scavenging() ? alloc - allocated_at_batch_start : allocated_per_second * m.batch;
      m.goodputs.add(given > 0 ? (good - good_at_batch_start) / given : 0.0);
      if (scavenging()) m.merged.add((good - good_at_batch_start) / m.batch);
    } else {
      m.at_warmup.trained = decoupled() ? 0.0 : job_.trained;
      m.at_warmup.computed = computed();
      m.at_warmup.late = late();
      if (scavenging()) {
        m.at_warmup.counts = counts_;
        m.at_warmup.allocated = alloc;
        m.at_warmup.vanished = vanished();
      }
    }
    batch_start = batch_end;
    good_at_batch_start = good;
    allocated_at_batch_start = alloc;
    // Scavenging: the merged learner time (the speed-up) is as precise as the goodput, relatively.
    const bool precise = m.goodputs.half_width <= plan_.precision &&
                         (cell_.scavenged <= 0 || m.merged.half_width <= plan_.precision * m.merged.mean);
    if (m.goodputs.size() >= kMinBatches && precise && batch_end >= min_seconds) break;
    if (batch_end >= max_seconds) break;
  }
  return m;
}

CellResult Simulator::result(const Measured& m) const {
  CellResult r;
  r.cell = cell_;
  r.goodput = m.goodputs.mean;
  r.goodput_halfwidth = m.goodputs.half_width;
  const double measured = now_ - m.batch;  // after the warm-up batch
  r.simulated_hours = now_ / 3600.0;
  r.events = events_;
  if (decoupled()) {
    for (const auto& l : learners_) r.interruptions += l.chips.interruptions;
    std::vector<RoundEnd> ends;
    const SyncerStats stats = merged_stats();
    for (const RoundEnd& e : stats.round_ends)
      if (e.seconds >= m.batch) ends.push_back({e.seconds - m.batch, e.fragment});
    r.uptime = uptime_of(ends, measured);
    r.rounds = stats.rounds;
    r.merged_pushes = stats.merged_pushes;
    r.late_pushes = stats.late;
    r.repairs = stats.repairs;
    r.reintegrations = reintegrations_.size();
    for (double s : reintegrations_) {
      r.reintegration_seconds_max = std::max(r.reintegration_seconds_max, s);
      r.reintegration_seconds_mean += s / double(reintegrations_.size());
    }
  } else {
    r.interruptions = job_.interruptions;
    r.uptime = (job_.trained - m.at_warmup.trained) / measured;
  }
  if (measured > 0) {
    const double c = computed() - m.at_warmup.computed, w = late() - m.at_warmup.late;
    r.utilization = c / (measured * (decoupled() ? double(cell_.learners + std::max(0, cell_.scavenged)) : 1.0));
    r.on_time = decoupled() ? (c + w > 0 ? c / (c + w) : 1.0) : r.utilization;
  }
  r.lost_to_partition = lost_to_partition_;
  if (scavenging() && measured > 0) {
    const Counts& at = m.at_warmup.counts;
    r.measured_hours = measured / 3600.0;
    r.allocated_learners = (allocated() - m.at_warmup.allocated) / measured;
    r.merged_learners = m.merged.mean;
    r.merged_halfwidth = m.merged.half_width;
    r.trained_learners = (counts_.trained_seconds - at.trained_seconds) / measured;
    r.tokens = counts_.tokens - at.tokens;
    r.joins = counts_.joins - at.joins;
    r.departures = counts_.departures - at.departures;
    r.released = counts_.released - at.released;
    r.cut_short = counts_.cut_short - at.cut_short;
    r.claims_refused = counts_.claims_refused - at.claims_refused;
    r.vanished = vanished() - m.at_warmup.vanished;
    for (double s : joins_seconds_) {
      r.join_seconds_max = std::max(r.join_seconds_max, s);
      r.join_seconds_mean += s / double(joins_seconds_.size());
    }
  }
  return r;
}

Result<CellResult> Simulator::run() {
  const auto wall_start = WallClock::now();
  const uint64_t ticks_start = ticks();
  ATOLL_RETURN_IF_ERROR(start());
  CellResult r = result(measure());
  const auto wall_end = WallClock::now();
  const uint64_t ticks_end = ticks();
  r.wall_seconds = std::chrono::duration<double>(wall_end - wall_start).count();
  // The syncer's ticks in seconds, at the rate the ticks ran over the cell.
  const double seconds_per_tick = r.wall_seconds / double(std::max<uint64_t>(1, ticks_end - ticks_start));
  for (uint64_t t : shard_ticks_) r.syncer_seconds += seconds_per_tick * double(t);
  r.syncer_busiest_shard_seconds = seconds_per_tick * double(*std::max_element(shard_ticks_.begin(), shard_ticks_.end()));
  return r;
}

}  // namespace

Result<CellResult> simulate_cell(const SimulationPlan& plan, const SimulationCell& cell) {
  if (cell.scavenged >= 0 && (!plan.scavenging || cell.mode != Mode::kDecoupled))
    return Status::invalid_argument("a scavenging cell needs the plan's [scavenging] and decoupled learners");
  if (cell.scavenged > 0 && !plan.scavenging->trace.empty() &&
      static_cast<size_t>(cell.scavenged) > plan.scavenging->trace.size())
    return Status::invalid_argument(std::to_string(cell.scavenged) + " scavenged learners, and the trace has " +
                                    std::to_string(plan.scavenging->trace.size()));
  Simulator sim(plan, cell);
  auto r = sim.run();
  if (!r.ok()) return r.status();
  for (const auto& ref : plan.references)
    if (cell.scavenged < 0 && ref.mode == cell.mode && ref.chips == cell.chips &&
        (cell.mode != Mode::kDecoupled || ref.learners == cell.learners))
      r->reference = ref.goodput;
  return r;
}

uint64_t SimulationReport::events() const {
  uint64_t n = 0;
  for (const auto* v : {&cells, &rule_of_thumb, &planning, &scavenging})
    for (const auto& c : *v) n += c.events;
  if (scavenging_core) n += scavenging_core->events;
  return n;
}

Result<SimulationReport> run_simulation(const SimulationPlan& plan,
                                        const std::function<void(const CellResult&)>& progress) {
  const auto start = WallClock::now();
  SimulationReport report;
  for (const auto& cell : plan.cells) {
    auto r = simulate_cell(plan, cell);
    if (!r.ok()) return r.status();
    if (progress) progress(*r);
    report.cells.push_back(std::move(*r));
  }
  for (const auto& c : report.cells) {
    // The rule of thumb is about failures; with links an elastic job of N/M chips is another network.
    if (c.cell.mode != Mode::kDecoupled || c.cell.learners < 2 || plan.network.given) continue;
    auto r = simulate_cell(plan, SimulationCell{Mode::kElasticDp, 1, c.cell.chips / c.cell.learners, 1, 0});
    if (!r.ok()) return r.status();
    report.rule_of_thumb.push_back(std::move(*r));
  }
  if (plan.planning) {
    for (int k : plan.planning->quorums)
      for (int m : plan.planning->learners) {
        if (k > m) continue;
        auto r = simulate_cell(plan, SimulationCell{Mode::kDecoupled, m, plan.planning->chips, k, 0});
        if (!r.ok()) return r.status();
        if (progress) progress(*r);
        report.planning.push_back(std::move(*r));
      }
  }
  if (const auto& s = plan.scavenging) {
    const auto cell_of = [&](int k) {
      return SimulationCell{Mode::kDecoupled, s->core, s->core * s->learner_chips, s->quorum, 0, k};
    };
    for (int k : s->scavenged) {
      auto r = simulate_cell(plan, cell_of(k));
      if (!r.ok()) return r.status();
      if (progress) progress(*r);
      report.scavenging.push_back(std::move(*r));
    }
    const auto alone = std::find_if(report.scavenging.begin(), report.scavenging.end(),
                                    [](const CellResult& c) { return c.cell.scavenged == 0; });
    if (alone == report.scavenging.end()) {
      auto r = simulate_cell(plan, cell_of(0));
      if (!r.ok()) return r.status();
      report.scavenging_core = std::move(*r);
      report.scavenging_core->speedup = report.scavenging_core->tokens_speedup = 1.0;
    }
    // The speed-up over the core alone; both intervals widen its own.
    const CellResult& base = alone != report.scavenging.end() ? *alone : *report.scavenging_core;
    for (auto& c : report.scavenging) {
      if (&c == &base) {  // by definition
        c.speedup = c.tokens_speedup = 1.0;
        continue;
      }
      if (base.merged_learners <= 0 || base.tokens == 0) continue;
      c.speedup = c.merged_learners / base.merged_learners;
      c.speedup_halfwidth = c.speedup * std::hypot(c.merged_halfwidth / std::max(c.merged_learners, 1e-12),
                                                   base.merged_halfwidth / base.merged_learners);
      c.tokens_speedup = (double(c.tokens) / c.measured_hours) / (double(base.tokens) / base.measured_hours);
    }
  }
  auto rows = utilization_rows(plan, &report.utilization_at);
  if (!rows.ok()) return rows.status();
  report.utilization = std::move(*rows);
  report.wall_seconds = std::chrono::duration<double>(WallClock::now() - start).count();
  return report;
}

}  // namespace atl
