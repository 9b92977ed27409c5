// The model of a syncer in shards, put together from one checkpoint per
// shard: the values land where the plan puts them, and a set of
// checkpoints that is not exactly the plan's is refused, saying which.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/assembled_model.h"
#include "atoll/job.h"
#include "test_support.h"

namespace atl {
namespace {

struct Sharded {
  Topology topology = testing::exact_wire_topology();  // 4 tensors: 4 fragments
  std::unique_ptr<Model> model;
  std::vector<Fragment> plan;
  std::vector<float> theta;
  std::vector<CheckpointState> by_shard;

  explicit Sharded(int shards) {
    topology.outer.fragments = 4;
    topology.syncer.shards = shards;
    auto m = make_model(topology);
    BOOST_REQUIRE_MESSAGE(m.ok(), m.status().to_string());
    model = std::move(*m);
    auto p = plan_fragments(model->layout(), topology);
    BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
    plan = *p;
    theta = testing::random_vector(model->layout().size(), 11);
    by_shard.resize(static_cast<size_t>(shards));
    for (auto& c : by_shard) {
      c.fingerprint = model->layout().fingerprint();
      c.plan_fingerprint = plan_fingerprint(plan);
    }
    for (const Fragment& f : plan) {
      CheckpointState::FragmentRecord r;
      r.fragment = static_cast<uint32_t>(f.id);
      r.version = 10 + f.id;
      r.values.resize(f.size);
      gather(f, theta, r.values);
      by_shard[shard_of(r.fragment, shards)].fragments.push_back(std::move(r));
    }
  }
  Result<AssembledModel> assemble() const {
    return assemble_from_checkpoints(by_shard, model->layout().fingerprint(), plan, model->layout().size());
  }
};

void require_refused(const Result<AssembledModel>& r, const std::string& says) {
  BOOST_REQUIRE(!r.ok());
  BOOST_CHECK_MESSAGE(r.status().message().find(says) != std::string::npos, r.status().to_string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(assembled_model_test)

BOOST_AUTO_TEST_CASE(every_shards_fragments_land_where_the_plan_puts_them) {
  for (int shards : {1, 2, 4}) {
    Sharded s(shards);
    auto m = s.assemble();
    BOOST_REQUIRE_MESSAGE(m.ok(), m.status().to_string());
    BOOST_CHECK(m->theta == s.theta);  // bit for bit
    BOOST_REQUIRE_EQUAL(m->versions.size(), s.plan.size());
    for (size_t p = 0; p < s.plan.size(); ++p) BOOST_CHECK_EQUAL(m->versions[p], 10 + p);
    BOOST_CHECK_EQUAL(m->rounds.size(), static_cast<size_t>(shards));
  }
}

BOOST_AUTO_TEST_CASE(checkpoints_that_are_not_the_plan_are_refused_by_name) {
  {
    Sharded s(2);
    s.by_shard[1].fragments.pop_back();
    require_refused(s.assemble(), "no checkpoint holds fragment 3 (shard 1's)");
  }
  {
    Sharded s(2);
    std::swap(s.by_shard[0], s.by_shard[1]);  // the folders given in the wrong order
    require_refused(s.assemble(), "shard 0's checkpoint holds fragment 1, which shard 1 owns");
  }
  {
    Sharded s(2);
    s.by_shard[1].fingerprint ^= 1;
    require_refused(s.assemble(), "shard 1's checkpoint belongs to another model");
  }
  {
    Sharded s(2);
    s.by_shard[0].plan_fingerprint ^= 1;
    require_refused(s.assemble(), "shard 0's checkpoint was written for another fragment plan");
  }
  {
    Sharded s(2);
    s.by_shard[0].fragments[0].values.pop_back();
    require_refused(s.assemble(), "fragment 0 does not fit");
  }
  {
    Sharded s(2);
    s.by_shard[1].fragments[0].values[0] = std::nanf("");
    require_refused(s.assemble(), "non-finite");
  }
  {
    Sharded s(1);
    s.by_shard[0].fragments.push_back(s.by_shard[0].fragments[0]);
    require_refused(s.assemble(), "holds fragment 0 twice");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
