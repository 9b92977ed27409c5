// CountingReplica, the simulator's learner without parameters, follows
// LearnerCore's rules on counts: here, when each fragment's push comes due.
#include <boost/test/unit_test.hpp>

#include <map>

#include "atoll/counting_replica.h"
#include "atoll/job.h"
#include "atoll/model_replica.h"
#include "test_support.h"

namespace atl {
namespace {

// Two learners, the second at half the speed; with outer.sync_by_speed its H is half.
Topology speeds_topology() {
  Topology t = testing::exact_wire_topology();
  t.learners = {{1.0, 8}, {0.5, 8}};
  t.outer.fragments = 2;
  t.outer.sync_every = 8;
  t.outer.sync_by_speed = true;
  return t;
}

std::shared_ptr<const CountingReplica::Model> counted(const Topology& t) {
  auto m = std::make_shared<CountingReplica::Model>();
  auto model = make_model(t);
  BOOST_REQUIRE(model.ok());
  auto fragments = plan_fragments((*model)->layout(), t);
  BOOST_REQUIRE(fragments.ok());
  m->topology = t;
  m->parameters = (*model)->layout().size();
  m->fingerprint = (*model)->layout().fingerprint();
  m->initial_crc = parameters_crc(initial_parameters(**model, t));
  for (const auto& f : *fragments)
    m->zero_deltas.push_back(encode_payload(t.outer.push_codec, t.outer.push_block, std::vector<float>(f.size, 0.0f)));
  return m;
}

Welcome first_welcome(const Topology& t, size_t fragments) {
  Welcome w;
  w.topology = t;
  for (uint32_t p = 0; p < fragments; ++p) w.fragments.push_back({p, 0, Payload{}});  // the seed's values
  return w;
}

// The step after which each fragment's first push came due.
using FirstDue = std::map<uint32_t, int>;

void note_due(LearnerReplica& r, int step, FirstDue& first) {
  for (const Push& p : r.due_pushes()) first.try_emplace(p.fragment, step);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(counting_replica_test)

BOOST_AUTO_TEST_CASE(its_pushes_come_due_when_a_learner_cores_would_at_every_speed) {
  const Topology t = speeds_topology();
  auto job = Job::load(t, "");
  BOOST_REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  const auto model = counted(t);
  std::map<uint32_t, FirstDue> real_of, counted_of;
  for (uint32_t id : {0u, 1u}) {
    auto real = ModelReplica::create(id, 1, *job);
    BOOST_REQUIRE(real.ok());
    CountingReplica counting(id, 1, model);
    const Welcome w = first_welcome(t, model->zero_deltas.size());
    BOOST_REQUIRE((*real)->welcome(w).ok());
    BOOST_REQUIRE(counting.welcome(w).ok());
    for (int step = 1; step <= 3 * t.outer.sync_every; ++step) {
      (*real)->finish_step((*real)->step(), 0.01);
      counting.finish_step({1.0f, 8, 0.0}, 0.01);
      note_due(**real, step, real_of[id]);
      note_due(counting, step, counted_of[id]);
    }
    BOOST_TEST_MESSAGE("learner " << id << ": fragment 0 due after " << real_of[id][0] << " steps (LearnerCore), "
                                  << counted_of[id][0] << " (CountingReplica)");
    BOOST_TEST(real_of[id].size() == model->zero_deltas.size());
    BOOST_TEST((counted_of[id] == real_of[id]));
  }
  // The rule matters here: the slower learner pushes sooner.
  BOOST_TEST(real_of[1][0] < real_of[0][0]);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
