// The held-out evaluation and a language model's sample (atoll/evaluation.h).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "atoll/evaluation.h"
#include "atoll/job.h"
#include "atoll/transformer.h"
#include "test_support.h"

namespace atl {
namespace {

struct Classifier {
  Topology topology = testing::tiny_mlp_topology();
  std::shared_ptr<const Job> job;
  std::unique_ptr<Model> model;
  Classifier() {
    topology.data.examples = 400;
    auto loaded = Job::load(topology, "");
    BOOST_REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    job = *loaded;
    auto made = make_model(topology);
    BOOST_REQUIRE_MESSAGE(made.ok(), made.status().to_string());
    model = std::move(*made);
  }
};

BOOST_AUTO_TEST_SUITE(evaluation_test)

BOOST_AUTO_TEST_CASE(held_out_evaluation_is_the_models_own_on_every_held_out_batch) {
  Classifier c;
  const std::vector<float> theta = initial_parameters(*c.model, c.topology);
  auto sums = evaluate_held_out(c.topology, *c.job, theta);
  BOOST_REQUIRE_MESSAGE(sums.ok(), sums.status().to_string());
  const EvalSums direct = evaluate_all(*c.model, theta, c.job->eval_batches());
  BOOST_REQUIRE_GT(direct.count, 0);
  BOOST_CHECK_EQUAL(sums->count, direct.count);
  BOOST_CHECK_EQUAL(sums->correct, direct.correct);
  BOOST_CHECK_EQUAL(sums->batches, static_cast<int64_t>(c.job->eval_batches().size()));
  BOOST_CHECK_CLOSE(sums->loss(), direct.loss(), 1e-9);
}

BOOST_AUTO_TEST_CASE(a_model_of_zeros_guesses_uniformly) {
  // Every logit is 0: each prediction's cross-entropy is ln(classes).
  Classifier c;
  const std::vector<float> zeros(c.model->layout().size(), 0.0f);
  auto sums = evaluate_held_out(c.topology, *c.job, zeros);
  BOOST_REQUIRE_MESSAGE(sums.ok(), sums.status().to_string());
  BOOST_CHECK_CLOSE(sums->loss(), std::log(static_cast<double>(c.topology.data.classes)), 1e-4);
}

BOOST_AUTO_TEST_CASE(parameters_of_another_layout_are_refused_with_the_reason) {
  Classifier c;
  const std::vector<float> short_theta(c.model->layout().size() - 1, 0.0f);
  auto sums = evaluate_held_out(c.topology, *c.job, short_theta);
  BOOST_REQUIRE(!sums.ok());
  BOOST_CHECK_NE(sums.status().to_string().find("layout"), std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_language_models_sample_has_the_requested_length_and_follows_its_seed) {
  Transformer lm(TransformerConfig{.layers = 1, .width = 16, .heads = 2, .context = 16, .vocab = 256});
  std::vector<float> theta(lm.layout().size());
  lm.init(theta, 7);
  EvaluationOptions o;
  o.sample_prompt = "It was a dark and stormy night; ";  // longer than the context: the window slides
  o.sample_bytes = 40;
  const std::string a = sample_text(lm, theta, o, 1);
  BOOST_CHECK_EQUAL(a.size(), 40u);
  BOOST_CHECK_EQUAL(sample_text(lm, theta, o, 1), a);
  o.sample_bytes = 0;
  BOOST_CHECK(sample_text(lm, theta, o, 1).empty());
}

BOOST_AUTO_TEST_CASE(the_prompt_is_what_the_sample_continues) {
  // The same model, seed and temperature after two prompts: the sample
  // depends on the prompt, so the prompt reached the model.
  Transformer lm(TransformerConfig{.layers = 1, .width = 16, .heads = 2, .context = 16, .vocab = 256});
  std::vector<float> theta(lm.layout().size());
  lm.init(theta, 7);
  EvaluationOptions o;
  o.sample_bytes = 24;
  o.sample_temperature = 0.01;  // nearly greedy: the sample is what the prompt makes most likely
  o.sample_prompt = "aaaaaaaaaaaaaaaa";
  const std::string after_a = sample_text(lm, theta, o, 3);
  o.sample_prompt = "zzzzzzzzzzzzzzzz";
  const std::string after_z = sample_text(lm, theta, o, 3);
  BOOST_CHECK_EQUAL(after_a.size(), 24u);
  BOOST_CHECK_NE(after_a, after_z);
}

BOOST_AUTO_TEST_CASE(a_classifier_writes_no_sample) {
  Classifier c;
  const std::vector<float> theta = initial_parameters(*c.model, c.topology);
  BOOST_CHECK(sample_text(*c.model, theta, EvaluationOptions{}, 1).empty());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
