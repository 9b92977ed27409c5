// ExternalLearner: a learner whose replica is trained outside atoll, in the
// user's own loop on any device. atoll.Learner (Python) is a thin layer over it.
//
//   ExternalLearner::Options o;
//   o.join = "syncer.example.org:7070";
//   o.id = 2;
//   o.cluster.token = token;                      // TLS files too, as for `atoll learner`
//   o.tensors = {{"wte.weight", {256, 128}}, ...};  // the module's named_parameters()
//   auto learner = ExternalLearner::join(o);      // fetches the topology, checks the layout, starts
//   ... after each optimizer step of the user's loop:
//   ReplicaRequest r = (*learner)->exchange().request();
//   ... apply r.updates to the tensors, read r.reads (atoll/replica_exchange.h) ...
//   (*learner)->exchange().hand(step);
//   auto report = (*learner)->close(30);
//
// Behind it is a Run that joins the syncer with one learner (atoll/run.h):
// the same door connector, supervision and learner actor as `atoll learner`,
// and the same LearnerCore deciding what to push and adopt. Nothing here
// waits for the network but join() (for the topology) and close().
//
// Thread-safety: exchange() as documented there; state() from any thread;
// close() once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atoll/module_layout.h"
#include "atoll/replica_exchange.h"
#include "atoll/report.h"
#include "atoll/run.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

class ExternalLearner {
 public:
  struct Options {
    std::string join;            // HOST:PORT of the syncer
    // One of the topology's learners (0 .. M-1) or a free open slot; unset:
    // the syncer gives the lowest free open slot (open membership).
    std::optional<uint32_t> id;
    RunOptions::Cluster cluster; // token (required), TLS files, timeouts; `join` and ids are set by join()
    std::vector<NamedShape> tensors;  // the module's parameters, in named_parameters() order
    double speed = 0.0;          // labels for the report (0: the topology's entry for `id`)
    uint32_t batch_size = 0;
    double wait_seconds = 60.0;  // for the syncer to answer at start (it may start later)
  };

  // Asks the syncer for the run's topology and model layout (and, without an
  // id, for a free open slot), checks that `tensors` are that layout
  // (InvalidArgument naming both where they differ), that the run trains in
  // decoupled mode, and starts the learner. Fails with the syncer's reason on
  // a refusal (bad token, unknown id, full), and with Unavailable when no
  // syncer answers within wait_seconds.
  static Result<std::unique_ptr<ExternalLearner>> join(Options options);

  ~ExternalLearner();  // close(0) if not closed
  ExternalLearner(const ExternalLearner&) = delete;
  ExternalLearner& operator=(const ExternalLearner&) = delete;

  const Topology& topology() const { return topology_; }
  uint32_t id() const { return id_; }
  ReplicaExchange& exchange() { return *exchange_; }
  // The exchange's state, with the run's failure (a lost syncer past the
  // give-up time, a refusal) as over and failed.
  ReplicaState state() const;

  // Starts an orderly departure (open membership): the learner asks the
  // training thread to read every fragment at its next boundary, pushes that
  // last progress, and tells the syncer it leaves; state().stopping is set
  // when this returns (at most a few seconds), and state().over once the
  // syncer merged it (or drain_seconds passed). Then close() as usual: the
  // frozen handover it does is this last progress.
  void leave(const std::string& reason, double drain_seconds);

  // Ends this learner. When the run is ending (state().stopping), first
  // waits up to `seconds` for the syncer's Done, so that its last progress
  // is taken; then stops the learner and returns its side of the report.
  Result<Report> close(double seconds);

 private:
  ExternalLearner() = default;

  Topology topology_;
  uint32_t id_ = 0;
  std::shared_ptr<ReplicaExchange> exchange_;
  std::unique_ptr<Run> run_;
  bool closed_ = false;
};

}  // namespace atl
