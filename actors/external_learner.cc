// No CAF here: an external learner is a Run in join mode (atoll/run.h) whose
// one learner trains through a ReplicaExchange.
#include "atoll/external_learner.h"

#include "atoll/cluster.h"
#include "atoll/fragments.h"
#include "atoll/job.h"

#include <chrono>
#include <thread>

namespace atl {

Result<std::unique_ptr<ExternalLearner>> ExternalLearner::join(Options o) {
  auto at = parse_endpoint(std::string_view(o.join).substr(0, o.join.find(',')));  // shard 0 gives the topology and ids
  if (!at.ok()) return at.status();
  std::vector<NamedShape> run_layout;
  uint32_t id = 0;
  Result<Topology> topology = Status::unavailable("not asked");
  if (o.id) {
    id = *o.id;
    topology = fetch_topology(*at, id, o.cluster, o.wait_seconds, &run_layout);
  } else if (auto claim = claim_slot(*at, o.cluster, o.wait_seconds); claim.ok()) {
    id = claim->learner;
    topology = std::move(claim->topology);
    run_layout = std::move(claim->layout);
  } else {
    topology = claim.status();
  }
  if (!topology.ok()) return topology.status();
  if (topology->mode != Mode::kDecoupled || topology->outer.barrier)
    return Status::invalid_argument(std::string("the run at ") + o.join + " trains in mode " +
                                    mode_name(topology->mode) + (topology->outer.barrier ? " with outer.barrier" : "") +
                                    ": a learner trained outside atoll needs mode = \"decoupled\" without a barrier, "
                                    "because its steps never wait");
  auto layout = module_layout(o.tensors, topology->model.avg);
  if (!layout.ok()) return layout.status().with_context("this module's parameters");
  if (!run_layout.empty())
    if (std::string diff = layout_difference(shapes_of(*layout), run_layout, "this module", "the run's model");
        !diff.empty())
      return Status::invalid_argument("this module's parameters are not the run's model (" +
                                      std::string(model_kind_name(topology->model.kind)) + "): " + diff);
  auto fragments = plan_fragments(*layout, *topology);
  if (!fragments.ok()) return fragments.status();

  std::unique_ptr<ExternalLearner> l(new ExternalLearner());
  l->topology_ = *topology;
  l->id_ = id;
  l->exchange_ = std::make_shared<ReplicaExchange>(std::move(*layout), std::move(*fragments), o.speed, o.batch_size);
  RunOptions run;
  run.compute_threads = 1;  // no compute here: the user's loop steps
  run.control_threads = 1;
  run.cluster = o.cluster;
  run.cluster.join = o.join;
  run.cluster.learner_ids = {id};
  run.external = l->exchange_;
  auto started = Run::start(*topology, run);
  if (!started.ok()) return started.status();
  l->run_ = std::move(*started);
  return l;
}

ExternalLearner::~ExternalLearner() {
  if (!closed_ && run_) (void)close(0);
}

ReplicaState ExternalLearner::state() const {
  ReplicaState s = exchange_->state();
  if (run_ && !s.over)
    if (std::string failure = run_->failure(); !failure.empty()) {
      s.over = s.failed = true;
      s.why = failure;
    }
  return s;
}

void ExternalLearner::leave(const std::string& reason, double drain_seconds) {
  if (closed_ || !run_) return;
  run_->leave(reason, drain_seconds);
  // The actor asks the training thread for its last reads: wait until it has.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!state().stopping && !state().over && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

Result<Report> ExternalLearner::close(double seconds) {
  if (closed_ || !run_) return Status::invalid_argument("the learner is already closed");
  closed_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                               std::chrono::duration<double>(seconds));
  // The run is ending: its last rounds take this learner's frozen replica; Done ends it.
  while (state().stopping && !state().over && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // The evaluation of the final model the user's loop handed goes to the syncer before the learner stops.
  while (state().final_evaluation_wanted && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  run_->stop();
  auto report = run_->wait();
  exchange_->set_notify(nullptr);  // the actors are gone; their system goes next
  run_.reset();
  return report;
}

}  // namespace atl
