// Topology files: what users write by hand. Every mistake is reported with
// the file, the line and the key; a good file means exactly what it says.
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <thread>

#include <sys/stat.h>

#include "atoll/job.h"
#include "atoll/topology_file.h"
#include "atoll/torchscript_model.h"
#include "test_support.h"

namespace atl {
namespace {

std::string error_of(std::string_view text, const std::vector<std::string>& sets = {}) {
  auto t = parse_topology(text, "topo.toml", sets);
  BOOST_REQUIRE_MESSAGE(!t.ok(), "accepted: " << text);
  return std::string(t.status().message());
}

void expect_error(std::string_view text, std::string_view wanted, const std::vector<std::string>& sets = {}) {
  const std::string e = error_of(text, sets);
  BOOST_CHECK_MESSAGE(e.find(wanted) != std::string::npos, "wanted '" << wanted << "' in: " << e);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(topology_file_test)

BOOST_AUTO_TEST_CASE(a_file_sets_exactly_what_it_says) {
  auto t = parse_topology(R"(
mode = "dp"
tokens = 5000
[model]
hidden = [32, 16]
[outer]
quorum = 2
push_codec = "int8"
barrier = true
[[learners]]
speed = 1.0
[[learners]]
speed = 0.5
batch_size = 16
)",
                          "topo.toml");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  Topology want;
  want.mode = Mode::kDp;
  want.tokens = 5000;
  want.model.hidden = {32, 16};
  want.outer.quorum = 2;
  want.outer.push_codec = Codec::kInt8;
  want.outer.barrier = true;
  want.learners = {{1.0, 8}, {0.5, 16}};
  BOOST_CHECK(*t == want);
}

BOOST_AUTO_TEST_CASE(an_empty_file_is_the_default) {
  auto t = parse_topology("", "empty.toml");
  BOOST_REQUIRE(t.ok());
  BOOST_CHECK(*t == Topology{});
}

BOOST_AUTO_TEST_CASE(unknown_keys_name_file_line_and_a_suggestion) {
  expect_error("mode = \"dp\"\n[outer]\nquorm = 2\n", "topo.toml:3: outer.quorm: unknown key (did you mean outer.quorum?)");
  expect_error("[outr]\nquorum = 2\n", "topo.toml:1: outr: unknown key");
  expect_error("[[learners]]\nspeed = 1.0\nsped = 2\n", "topo.toml:3: learners[0].sped: unknown key");
}

BOOST_AUTO_TEST_CASE(wrong_types_name_file_line_and_key) {
  expect_error("\n[outer]\nquorum = \"two\"\n", "topo.toml:3: outer.quorum: expected an integer, got a string");
  expect_error("seed = 1.5\n", "topo.toml:1: seed: expected an integer, got a number");
  expect_error("[outer]\nbarrier = 1\n", "topo.toml:2: outer.barrier: expected true or false, got an integer");
  expect_error("learners = 4\n", "topo.toml:1: learners: expected an array of tables");
  expect_error("mode = \"fast\"\n", "topo.toml:1: mode: unknown mode 'fast' (expected decoupled, dp, elastic_dp)");
}

BOOST_AUTO_TEST_CASE(out_of_range_values_name_file_line_and_key) {
  expect_error("\n\n[outer]\nquorum = 9\n", "topo.toml:4: outer.quorum = 9 exceeds the 4 learners");
  expect_error("[syncer]\nshards = 0\n", "topo.toml:2: syncer.shards = 0 is outside [1, 12]");
  expect_error("[membership]\nmax_learners = 3\n",
               "topo.toml:2: membership.max_learners = 3 is below the 4 [[learners]]: give 0 (no open slots) or at least 4");
  expect_error("[membership]\nmax_learners = 5\n[outer]\nquorum = 6\n",
               "topo.toml:4: outer.quorum = 6 exceeds the 5 learner slots (membership.max_learners)");
  expect_error("[[learners]]\nspeed = 0.0\n", "topo.toml:2: learners[0].speed = 0 is outside");
  expect_error("[inner]\nlr = -1\n", "topo.toml:2: inner.lr = -1 is outside");
  expect_error("hardware_headroom = 0.9\n", "topo.toml:1: hardware_headroom = 0.9 is outside [1, 10]");
  expect_error("[outer]\nmomentum_every = 0\n", "topo.toml:2: outer.momentum_every = 0 is outside");
  expect_error("[outer]\npush_density = 0\n", "topo.toml:2: outer.push_density = 0 is outside");
  expect_error("[outer]\ncarry_progress = false\npush_error_feedback = true\n",
               "outer.push_error_feedback keeps what a push left out in the carried progress: it needs "
               "outer.carry_progress");
  expect_error("[outer]\nforce_avg = true\nforce_rda = true\n",
               "outer.force_avg and outer.force_rda both choose every fragment's merge rule: choose one");
  expect_error("[outer]\ncarry_progress = false\neager_updates = true\n",
               "outer.eager_updates keeps a share of the progress that carry_progress keeps whole: it needs "
               "outer.carry_progress");
  expect_error("[outer]\nquorum = 99999999999\n", "topo.toml:2: outer.quorum: 99999999999 is outside");
  // Found by scripts/fuzz: the divisibility check divided by zero (SIGFPE) after the range check failed.
  expect_error("[model]\nheads = 0\n", "topo.toml:2: model.heads = 0 is outside");
  // Found by scripts/fuzz: a float where an integer belongs was converted unchecked (UB for 7e52).
  expect_error("[model]\ncontext = 7e52\n", "topo.toml:2: model.context: expected an integer, got a number");
}

BOOST_AUTO_TEST_CASE(syntax_errors_name_the_line) {
  expect_error("mode = \"dp\"\n[outer\n", "topo.toml:2:");
}

BOOST_AUTO_TEST_CASE(overrides_apply_in_order_with_the_same_checks) {
  auto t = parse_topology("[outer]\nquorum = 1\n", "topo.toml",
                          {"outer.quorum=2", "mode=elastic_dp", "learners=[{speed=1.0},{speed=0.25,batch_size=8}]",
                           "outer.quorum=1", "data.dir=/srv/data"});
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  BOOST_CHECK_EQUAL(t->outer.quorum, 1);
  BOOST_CHECK(t->mode == Mode::kElasticDp);  // a bare word is a string
  BOOST_REQUIRE_EQUAL(t->learners.size(), 2u);
  BOOST_CHECK_EQUAL(t->learners[1].batch_size, 8);
  BOOST_CHECK_EQUAL(t->data.dir, "/srv/data");
  expect_error("", "--set outer.quorum=x: outer.quorum: expected an integer", {"outer.quorum=x"});
  expect_error("", "--set outer.qorum=2: outer.qorum: unknown key", {"outer.qorum=2"});
  expect_error("", "expected key=value", {"quorum"});
}

BOOST_AUTO_TEST_CASE(printed_topologies_read_back_unchanged) {
  Topology t;
  t.mode = Mode::kDp;
  t.inner.lr = 3e-4f;
  t.inner.beta2 = 0.95f;
  t.outer.nesterov = {0.5f, 0.9f, 4};
  t.outer.blend_alpha = 0.1f;
  t.outer.carry_progress = false;  // excludes blend_alpha
  t.model.kind = ModelKind::kMlp;
  t.data.kind = DataKind::kMnist;
  t.model.hidden = {128, 64};
  t.learners = {{1.0, 32}, {0.7, 48}};
  t.membership.max_learners = 6;
  t.outer.sync_by_speed = true;
  t.outer.stream = 3;
  t.hardware = Hardware::kDedicated;
  t.hardware_headroom = 1.6;
  auto back = parse_topology(to_toml(t), "printed.toml");
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(*back == t);
  BOOST_CHECK(*parse_topology(to_toml(Topology{}), "default.toml") == Topology{});
  Topology sharded;
  sharded.outer.fragments = 4;
  sharded.syncer.shards = 2;
  BOOST_CHECK(*parse_topology(to_toml(sharded), "sharded.toml") == sharded);
}

BOOST_AUTO_TEST_CASE(printed_floats_are_the_shortest_decimals_that_read_back) {
  Topology t;
  t.inner.lr = 3e-3f;
  t.hardware_headroom = 1.15;
  t.learners = {{0.7, 32}};
  t.checkpoint.dir = "runs/1.2345678901234567";  // a string that looks like a float stays as it is
  const std::string toml = to_toml(t), json = to_json(t);
  BOOST_CHECK_NE(toml.find("lr = 0.003\n"), std::string::npos);
  BOOST_CHECK_NE(toml.find("hardware_headroom = 1.15\n"), std::string::npos);
  BOOST_CHECK_NE(toml.find("speed = 0.7\n"), std::string::npos);
  BOOST_CHECK_NE(toml.find("runs/1.2345678901234567"), std::string::npos);
  for (const std::string& text : {toml, json}) {
    BOOST_CHECK_EQUAL(text.find("0000000"), std::string::npos);
    BOOST_CHECK_EQUAL(text.find("9999999"), std::string::npos);
  }
  BOOST_CHECK_NE(json.find("0.003"), std::string::npos);
  auto back = parse_topology(toml, "shortest.toml");
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(*back == t);
}

BOOST_AUTO_TEST_CASE(a_missing_file_is_not_found_by_name) {
  auto t = load_topology("/nonexistent/topo.toml");
  BOOST_CHECK(t.status().code() == Status::Code::kNotFound);
  BOOST_CHECK(t.status().message().find("/nonexistent/topo.toml") != std::string_view::npos);
}

// Files a user may hand over by mistake, or on purpose: each gets a clear
// answer, never the default job, a crash or a minutes-long parse.
BOOST_AUTO_TEST_CASE(a_folder_is_refused_and_a_pipe_is_read) {
  testing::TempDir dir;
  const auto folder = load_topology(dir.path());
  BOOST_REQUIRE(!folder.ok());
  BOOST_CHECK_MESSAGE(folder.status().message().find("is a folder, not a file") != std::string_view::npos,
                      folder.status().to_string());
  // What `atoll run <(...)` hands over: a FIFO, which has no size to read ahead.
  const std::string fifo = dir.file("topo.fifo");
  BOOST_REQUIRE_EQUAL(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo) << "seed = 7\n"; });
  const auto piped = load_topology(fifo);
  writer.join();
  BOOST_REQUIRE_MESSAGE(piped.ok(), piped.status().to_string());
  BOOST_CHECK_EQUAL(piped->seed, 7u);
}

BOOST_AUTO_TEST_CASE(a_file_beyond_the_size_limit_is_refused_before_parsing) {
  testing::TempDir dir;
  {
    std::ofstream f(dir.file("huge.toml"));
    f << "junk = [";
    for (size_t i = 0; i < kMaxConfigFileBytes / 2 + 1; ++i) f << "1,";
    f << "1]\n";
  }
  const auto t = load_topology(dir.file("huge.toml"));
  BOOST_REQUIRE(!t.ok());
  BOOST_CHECK(t.status().code() == Status::Code::kOutOfRange);
  BOOST_CHECK_MESSAGE(t.status().message().find("huge.toml: larger than 1 MiB") != std::string_view::npos,
                      t.status().to_string());
}

BOOST_AUTO_TEST_CASE(more_fragments_than_the_model_has_tensors_gives_one_per_tensor) {
  // The default (12) must fit any model: an MLP of 4 tensors gets 4 fragments, no error.
  auto t = parse_topology("[model]\nkind = \"mlp\"\n[data]\nkind = \"synthetic\"\n", "topo.toml");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  BOOST_CHECK_EQUAL(t->outer.fragments, 12);
  auto model = make_model(*t);
  BOOST_REQUIRE(model.ok());
  auto fragments = plan_fragments((*model)->layout(), *t);
  BOOST_REQUIRE_MESSAGE(fragments.ok(), fragments.status().to_string());
  BOOST_CHECK_EQUAL(fragments->size(), 4u);
  for (const auto& f : *fragments) BOOST_CHECK_EQUAL(f.pieces.size(), 1u);
}

BOOST_AUTO_TEST_CASE(more_shards_than_the_model_has_fragments_names_file_and_line) {
  expect_error("[model]\nkind = \"mlp\"\n[data]\nkind = \"synthetic\"\n[syncer]\nshards = 6\n",
               "syncer.shards (6) exceeds the 4 fragments of the model (4 tensors): a shard would hold none");
}

BOOST_AUTO_TEST_CASE(shards_that_divide_outer_fragments_but_not_the_models_fewer_fragments_are_refused) {
  expect_error("[model]\nkind = \"mlp\"\n[data]\nkind = \"synthetic\"\n[outer]\nfragments = 12\n[syncer]\nshards = 3\n",
               "syncer.shards = 3 does not divide the 4 fragments of the model (4 tensors");
}

BOOST_AUTO_TEST_CASE(default_toml_is_the_built_in_default_written_out) {
  auto t = load_topology(std::string(ATOLL_SOURCE_DIR) + "/examples/topologies/default.toml");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  BOOST_CHECK_MESSAGE(*t == Topology{}, "default.toml differs from the built-in default:\n" << to_toml(*t));
}

BOOST_AUTO_TEST_CASE(the_example_topologies_are_valid) {
  const std::string dir = std::string(ATOLL_SOURCE_DIR) + "/examples/topologies";
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    ++seen;
    auto t = load_topology(e.path().string());
    BOOST_CHECK_MESSAGE(t.ok(), e.path() << ": " << t.status().to_string());
  }
  BOOST_CHECK_GE(seen, 3);
}

BOOST_AUTO_TEST_CASE(a_torchscript_model_names_its_file_or_says_why_this_build_cannot_load_it) {
  Topology t = testing::tiny_mlp_topology();
  t.model.kind = ModelKind::kTorchScript;
  t.model.path = "no/such/module.pt";
  auto model = make_model(t);
  BOOST_REQUIRE(!model.ok());
  const std::string msg = model.status().to_string();
  if (torchscript_available())
    BOOST_CHECK_MESSAGE(msg.find("model.path: no/such/module.pt: no such file") != std::string::npos, msg);
  else  // built without libtorch (or the Python module): the run that asks for it says why
    BOOST_CHECK_MESSAGE(msg.find("has no libtorch") != std::string::npos &&
                            msg.find("libtorch-dev") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(model_avg_takes_an_array_of_globs_and_says_so_otherwise) {
  auto t = parse_topology("[model]\nkind = \"mlp\"\navg = [\"emb*\", \"head.?\"]\n[data]\nkind = \"synthetic\"\n"
                          "[outer]\nfragments = 2\n", "a.toml");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  BOOST_CHECK((t->model.avg == std::vector<std::string>{"emb*", "head.?"}));
  auto back = parse_topology(to_toml(*t), "round-trip");
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(back->model == t->model);
  auto bad = parse_topology("[model]\navg = \"emb*\"\n", "b.toml");
  BOOST_REQUIRE(!bad.ok());
  BOOST_CHECK_MESSAGE(bad.status().to_string().find("b.toml:2") != std::string::npos &&
                          bad.status().to_string().find("expected an array of tensor-name globs") != std::string::npos,
                      bad.status().to_string());
}

// From a robustness corpus: a list of 100,000 layer widths once took minutes
// to validate, building the model. Refused at once, saying why.
BOOST_AUTO_TEST_CASE(a_model_of_a_hundred_thousand_hidden_layers_is_refused) {
  std::string text = "[model]\nkind = \"mlp\"\nhidden = [4";
  for (int i = 1; i < 100000; ++i) text += ", 4";
  text += "]\n[data]\nkind = \"synthetic\"\n";
  expect_error(text, "model.hidden (layers)");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
