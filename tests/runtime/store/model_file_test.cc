// A module's layout (one rule for TorchScript files, model files and Python
// learners), model files (atoll.save_model, `atoll syncer --save-model`), and
// the external model a syncer builds from one.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>

#include "atoll/file.h"
#include "atoll/job.h"
#include "atoll/model_replica.h"
#include "atoll/model_file.h"
#include "atoll/module_layout.h"
#include "atoll/topology_file.h"
#include "test_support.h"

namespace atl {
namespace {

std::vector<NamedShape> gpt_like() {
  return {{"wte.weight", {16, 8}}, {"h.0.ln1.weight", {8}}, {"h.0.attn.qkv.weight", {24, 8}},
          {"h.0.attn.qkv.bias", {24}}, {"gain", {}}, {"head.weight", {16, 8}}};
}

ModelFile gpt_like_file() {
  ModelFile m;
  m.tensors = gpt_like();
  size_t n = 0;
  for (const auto& t : m.tensors) {
    size_t size = 1;
    for (int64_t d : t.dims) size *= static_cast<size_t>(d);
    n += size;
  }
  m.values = testing::random_vector(n, 3);
  m.description = "a GPT-like test model";
  return m;
}

bool mentions(const Status& s, std::string_view text) { return s.message().find(text) != std::string_view::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(model_file_test)

BOOST_AUTO_TEST_CASE(the_layout_rule_decays_matrices_averages_globs_and_makes_a_scalar_one_value) {
  auto layout = module_layout(gpt_like(), {"wte.*", "head.*"});
  BOOST_REQUIRE_MESSAGE(layout.ok(), layout.status().to_string());
  BOOST_REQUIRE_EQUAL(layout->count(), 6);
  BOOST_CHECK(layout->tensor(0).role == TensorRole::kEmbedding && layout->tensor(0).decay);
  BOOST_CHECK(layout->tensor(1).role == TensorRole::kBody && !layout->tensor(1).decay);
  BOOST_CHECK(layout->tensor(2).decay && !layout->tensor(3).decay);
  BOOST_CHECK_EQUAL(layout->tensor(4).size(), 1u);
  BOOST_CHECK(!layout->tensor(4).decay);
  BOOST_CHECK(layout->tensor(5).role == TensorRole::kEmbedding);
  BOOST_CHECK_EQUAL(layout->size(), 16u * 8 + 8 + 24 * 8 + 24 + 1 + 16 * 8);
  // The globs are part of the layout: other globs, another fingerprint.
  auto plain = module_layout(gpt_like(), {});
  BOOST_CHECK_NE(plain->fingerprint(), layout->fingerprint());
  BOOST_CHECK_EQUAL(module_layout(gpt_like(), {"wte.*", "head.*"})->fingerprint(), layout->fingerprint());
}

BOOST_AUTO_TEST_CASE(the_default_globs_find_embeddings_and_heads_by_the_names_public_models_use) {
  // Written here from the public models' parameter names (not fetched):
  // GPT-2 / nanoGPT (lm_head tied to wte, so not listed), LLaMA in Meta's
  // and in Hugging Face's names, BERT, the PyTorch word_language_model.
  const std::vector<std::vector<std::string>> averaged = {
      {"transformer.wte.weight", "transformer.wpe.weight"},
      {"tok_embeddings.weight", "output.weight"},
      {"model.embed_tokens.weight", "lm_head.weight"},
      {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight"},
      {"encoder.weight", "decoder.weight"},
  };
  const std::vector<std::string> body = {"transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.c_fc.weight",
                                         "transformer.ln_f.weight", "layers.0.attention.wq.weight", "norm.weight",
                                         "model.layers.0.self_attn.q_proj.weight", "rnn.weight_ih_l0",
                                         "bert.encoder.layer.0.output.dense.weight", "decoder.bias"};
  const Topology defaults;
  for (const auto& model : averaged) {
    std::vector<NamedShape> tensors;
    for (const auto& name : model) tensors.push_back({name, {16, 8}});
    for (const auto& name : body) tensors.push_back({name, {8, 8}});
    auto layout = module_layout(tensors, defaults.model.avg);
    BOOST_REQUIRE(layout.ok());
    for (int i = 0; i < layout->count(); ++i) {
      const bool avg = i < static_cast<int>(model.size());
      BOOST_CHECK_MESSAGE((layout->tensor(i).role == TensorRole::kEmbedding) == avg,
                          layout->tensor(i).name << (avg ? " is not averaged" : " is averaged"));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_merge_rules_are_said_by_tensor_name_and_when_nothing_is_averaged) {
  const std::vector<NamedShape> gpt2 = {{"transformer.wte.weight", {256, 8}}, {"transformer.wpe.weight", {4, 8}},
                                        {"transformer.h.0.attn.c_attn.weight", {24, 8}},
                                        {"transformer.h.0.attn.c_attn.bias", {24}},
                                        {"transformer.ln_f.weight", {8}}};
  auto layout = module_layout(gpt2, Topology{}.model.avg);
  BOOST_REQUIRE(layout.ok());
  // Four fragments: each embedding alone. Three: wpe shares its fragment (averaged) with two small tensors.
  auto four = plan_fragments(*layout, 4);
  BOOST_REQUIRE(four.ok());
  BOOST_CHECK_EQUAL(describe_merge_rules(*layout, *four),
                    "weighted mean for transformer.wte.weight, transformer.wpe.weight (2 of 4 fragments); RDA for "
                    "the other 3 tensors");
  auto three = plan_fragments(*layout, 3);
  BOOST_REQUIRE(three.ok());
  BOOST_CHECK_EQUAL(describe_merge_rules(*layout, *three),
                    "weighted mean for transformer.wte.weight, transformer.wpe.weight (2 of 3 fragments, 4 tensors "
                    "with those beside them); RDA for the other tensor");
  auto plain = module_layout(gpt2, {"nothing.*"});
  auto plain_fragments = plan_fragments(*plain, 4);
  BOOST_CHECK(describe_merge_rules(*plain, *plain_fragments).starts_with("RDA for all 5 tensors: none is an embedding"));
}

BOOST_AUTO_TEST_CASE(a_layout_names_what_it_refuses) {
  auto twice = module_layout({{"w", {2}}, {"w", {3}}}, {});
  BOOST_CHECK(!twice.ok() && mentions(twice.status(), "w [3]: the name is given twice"));
  auto zero = module_layout({{"w", {2, 0}}}, {});
  BOOST_CHECK(!zero.ok() && mentions(zero.status(), "every dimension must be at least 1"));
  auto huge = module_layout({{"w", {1 << 16, 1 << 16}}}, {});
  BOOST_CHECK(!huge.ok() && mentions(huge.status(), "2^31 - 1"));
  auto unnamed = module_layout({{"", {2}}}, {});
  BOOST_CHECK(!unnamed.ok() && mentions(unnamed.status(), "empty name"));
}

BOOST_AUTO_TEST_CASE(layouts_that_differ_say_where) {
  auto a = gpt_like(), b = gpt_like();
  BOOST_CHECK_EQUAL(layout_difference(a, b, "mine", "yours"), "");
  b[2].dims = {24, 4};
  const std::string d = layout_difference(a, b, "mine", "yours");
  BOOST_CHECK_MESSAGE(d.find("tensor 2: mine h.0.attn.qkv.weight [24, 8], yours h.0.attn.qkv.weight [24, 4]") !=
                          std::string::npos,
                      d);
  b.pop_back();
  BOOST_CHECK(layout_difference(a, b, "mine", "yours").starts_with("mine has 6 tensors, yours 5"));
}

BOOST_AUTO_TEST_CASE(a_model_file_round_trips_and_every_corruption_is_refused) {
  testing::TempDir dir;
  const ModelFile m = gpt_like_file();
  BOOST_REQUIRE(save_model_file(dir.file("m.atoll"), m).ok());
  auto back = load_model_file(dir.file("m.atoll"));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(back->tensors == m.tensors);
  BOOST_CHECK(back->values == m.values);
  BOOST_CHECK_EQUAL(back->description, m.description);

  const auto bytes = encode_model_file(m);
  for (size_t at : {size_t{0}, size_t{9}, size_t{13}, bytes.size() / 2, bytes.size() - 1}) {
    auto flipped = bytes;
    flipped[at] ^= 0x40;
    BOOST_CHECK_MESSAGE(!decode_model_file(flipped).ok(), "a flipped byte at " << at << " was taken");
  }
  auto cut = bytes;
  cut.resize(bytes.size() - 8);
  BOOST_CHECK(mentions(decode_model_file(cut).status(), "truncated"));
  BOOST_CHECK(mentions(load_model_file(dir.file("none.atoll")).status(), "none.atoll"));
}

BOOST_AUTO_TEST_CASE(a_model_file_reads_from_bytes_at_any_alignment_and_its_shapes_alone) {
  testing::TempDir dir;
  const ModelFile m = gpt_like_file();
  const auto bytes = encode_model_file(m);
  // A record is parsed in place where it is 8-byte aligned, and from a copy where it is not.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  auto back = decode_model_file(std::span<const uint8_t>(shifted).subspan(1));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(back->values == m.values);

  BOOST_REQUIRE(save_model_file(dir.file("m.atoll"), m).ok());
  auto shapes = load_model_shapes(dir.file("m.atoll"));
  BOOST_REQUIRE_MESSAGE(shapes.ok(), shapes.status().to_string());
  BOOST_CHECK(*shapes == m.tensors);
  // The shapes alone are still checked against the whole file.
  auto flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  {
    std::ofstream out(dir.file("flipped.atoll"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(flipped.data()), static_cast<std::streamsize>(flipped.size()));
  }
  const Status bad = load_model_shapes(dir.file("flipped.atoll")).status();
  BOOST_CHECK_MESSAGE(mentions(bad, "flipped.atoll") && mentions(bad, "checksum"), bad.to_string());
}

BOOST_AUTO_TEST_CASE(a_model_file_with_values_that_do_not_fit_or_are_not_finite_is_not_written) {
  testing::TempDir dir;
  ModelFile m = gpt_like_file();
  m.values.pop_back();
  Status short_values = save_model_file(dir.file("m.atoll"), m);
  BOOST_CHECK_MESSAGE(mentions(short_values, "the file has"), short_values.to_string());
  m = gpt_like_file();
  m.values[16 * 8 + 3] = std::nanf("");
  Status nan = save_model_file(dir.file("m.atoll"), m);
  BOOST_CHECK_MESSAGE(mentions(nan, "tensor h.0.ln1.weight value 3 is not finite"), nan.to_string());
  BOOST_CHECK(!std::filesystem::exists(dir.file("m.atoll")));
}

BOOST_AUTO_TEST_CASE(an_external_model_is_the_files_layout_and_weights_and_needs_no_data) {
  testing::TempDir dir;
  const ModelFile m = gpt_like_file();
  BOOST_REQUIRE(save_model_file(dir.file("m.atoll"), m).ok());
  auto t = parse_topology("[model]\nkind = \"external\"\npath = \"" + dir.file("m.atoll") +
                              "\"\navg = [\"wte.*\", \"head.*\"]\n[outer]\nfragments = 2\n[checkpoint]\ndir = \"\"\n",
                          "t.toml");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  auto model = make_model(*t);
  BOOST_REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  BOOST_CHECK_EQUAL((*model)->layout().fingerprint(), module_layout(m.tensors, t->model.avg)->fingerprint());
  BOOST_CHECK(initial_parameters(**model, *t) == m.values);  // the seed does not change them
  auto job = Job::load(*t, "/no/such/data");  // no data to load
  BOOST_REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  BOOST_CHECK((*job)->eval_batches().empty());
  // atoll runs no learner of it.
  auto learner = ModelReplica::create(0, 1, *job);
  BOOST_CHECK(!learner.ok() && mentions(learner.status(), "atoll.Learner"));
}

BOOST_AUTO_TEST_CASE(an_external_topology_needs_its_file_and_decoupled_mode) {
  const auto refused = [](const std::string& text, std::string_view why) {
    auto t = parse_topology(text, "t.toml");
    BOOST_CHECK_MESSAGE(!t.ok() && mentions(t.status(), why), text << " -> " << t.status().to_string());
  };
  refused("[model]\nkind = \"external\"\n", "model.path must name the model file");
  refused("mode = \"dp\"\n[model]\nkind = \"external\"\npath = \"m.atoll\"\n", "decoupled");
  refused("[model]\nkind = \"external\"\npath = \"m.atoll\"\n[outer]\nbarrier = true\n", "outer.barrier");
  // The file is read when the topology is: a missing one is an error there.
  refused("[model]\nkind = \"external\"\npath = \"/no/m.atoll\"\n", "atoll.save_model");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
