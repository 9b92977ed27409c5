// TorchScript models (model.kind = "torchscript"): the contract refusals, the
// parameters as views into atoll's buffer, the layout and its fingerprint,
// the merge rules by name, and, in the spirit of llm.c, atoll's hand-written
// transformer checked against PyTorch's autograd on the same weights.
//
// The modules come from tests/fixtures/torch/make_modules.py (a CTest
// fixture writes them to ATOLL_TORCH_MODULES); without them the suite
// reports itself skipped.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "atoll/adamw.h"
#include "atoll/checkpoint.h"
#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/muon.h"
#include "atoll/topology_file.h"
#include "atoll/torchscript_model.h"
#include "atoll/transformer.h"
#include "test_support.h"

namespace atl {
namespace {

std::string module_path(const std::string& name) {
  const std::string dir = ATOLL_TORCH_MODULES;
  const std::string path = dir + "/" + name + ".pt";
  if (!std::filesystem::exists(path))
    testing::skip(path + " is missing: tests/fixtures/torch/make_modules.py writes it (needs python3-torch)");
  return path;
}

bool mentions(const Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// The tests' synthetic classifier data: 4 features, 3 classes.
Topology classifier_topology(const std::string& module) {
  Topology t = testing::tiny_mlp_topology();
  t.model.kind = ModelKind::kTorchScript;
  t.model.path = module;
  return t;
}

Topology gpt_topology() {
  Topology t;
  t.model.kind = ModelKind::kTorchScript;
  t.model.path = module_path("gpt_tiny");
  t.model.context = 12;
  t.learners = {{1.0, 4}, {1.0, 4}};
  t.outer.fragments = 3;
  t.checkpoint.dir = "";
  return t;
}

Batch classifier_batch(int rows, uint64_t seed) {
  Batch b;
  b.rows = rows;
  b.x_cols = 4;
  b.y_cols = 1;
  b.tokens = rows;
  b.x = testing::random_vector(static_cast<size_t>(rows) * 4, seed);
  for (int r = 0; r < rows; ++r) b.y.push_back(r % 3);
  return b;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torchscript_model_test)

BOOST_AUTO_TEST_CASE(a_module_that_breaks_the_contract_is_refused_saying_what_and_where) {
  struct Case {
    std::string module;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"not_torchscript", {"not a TorchScript archive", "torch.jit.script(model).save"}},
      {"wrong_signature", {"expected forward(inputs: Tensor, targets: Tensor) -> Tensor", "found forward(inputs: Tensor)"}},
      {"not_scalar", {"shape [2]", "expected a scalar"}},
      {"nan_loss", {"loss of nan", "expected a finite number"}},
      {"no_grad", {"does not depend on the parameters"}},
      {"int_loss", {"Long loss, expected float"}},
      {"float64", {"parameter fc.weight [3, 4] is Double", "float32"}},
      {"bad_logits", {"logits() returned a tensor of shape [2]", "expected scores of shape [2, 3]"}},
  };
  for (const auto& c : cases) {
    const std::string path = module_path(c.module);
    auto model = make_model(classifier_topology(path));
    BOOST_REQUIRE_MESSAGE(!model.ok(), c.module + " was accepted");
    BOOST_TEST_MESSAGE(c.module << ": " << model.status().to_string());
    BOOST_CHECK_MESSAGE(mentions(model.status(), "model.path: " + path), model.status().to_string());
    for (const auto& text : c.says)
      BOOST_CHECK_MESSAGE(mentions(model.status(), text), c.module + ": '" + text + "' not in: " + model.status().to_string());
  }
  auto missing = make_model(classifier_topology(std::string(ATOLL_TORCH_MODULES) + "/absent.pt"));
  BOOST_REQUIRE(!missing.ok());
  BOOST_CHECK_EQUAL(static_cast<int>(missing.status().code()), static_cast<int>(Status::Code::kNotFound));
  BOOST_CHECK(mentions(missing.status(), "no such file"));
}

BOOST_AUTO_TEST_CASE(a_topology_file_names_the_line_of_a_bad_model_path) {
  const std::string text = "[model]\nkind = \"torchscript\"\npath = \"" + module_path("not_scalar") +
                           "\"\n[data]\nkind = \"synthetic\"\nfeatures = 4\nclasses = 3\n";
  auto t = parse_topology(text, "t.toml");
  BOOST_REQUIRE(!t.ok());
  BOOST_CHECK_MESSAGE(mentions(t.status(), "t.toml:3: model.path"), t.status().to_string());
  auto no_path = parse_topology("[model]\nkind = \"torchscript\"\n", "u.toml");
  BOOST_REQUIRE(!no_path.ok());
  BOOST_CHECK_MESSAGE(mentions(no_path.status(), "model.path must name the TorchScript file"), no_path.status().to_string());
}

BOOST_AUTO_TEST_CASE(the_layout_is_the_modules_named_parameters_with_their_shapes) {
  auto model = make_model(gpt_topology());
  BOOST_REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  const ParamLayout& layout = (*model)->layout();
  BOOST_CHECK_EQUAL(layout.tensor(0).name, "wte.weight");
  BOOST_CHECK((layout.tensor(0).dims == std::vector<int64_t>{256, 16}));
  const int qkv = layout.find("h.1.attn.qkv.weight");
  BOOST_REQUIRE_GE(qkv, 0);
  BOOST_CHECK((layout.tensor(qkv).dims == std::vector<int64_t>{48, 16}));
  BOOST_CHECK(layout.tensor(qkv).decay);
  BOOST_CHECK(!layout.tensor(layout.find("h.1.attn.qkv.bias")).decay);
  // The default AVG globs catch the embeddings and a top-level output head; model.avg replaces them.
  BOOST_CHECK(layout.tensor(layout.find("wpe.weight")).role == TensorRole::kEmbedding);
  BOOST_CHECK(layout.tensor(layout.find("head.weight")).role == TensorRole::kEmbedding);
  Topology t = gpt_topology();
  t.model.avg = {"wpe.*"};
  auto only_wpe = make_model(t);
  BOOST_REQUIRE(only_wpe.ok());
  BOOST_CHECK((*only_wpe)->layout().tensor(layout.find("head.weight")).role == TensorRole::kBody);
  BOOST_CHECK((*only_wpe)->layout().tensor(0).role == TensorRole::kBody);
  // Roles are in the fingerprint: a learner with other merge rules is refused.
  BOOST_CHECK_NE((*only_wpe)->layout().fingerprint(), layout.fingerprint());
  // The same file gives the same layout; another module another one.
  BOOST_CHECK_EQUAL((*make_model(gpt_topology()))->layout().fingerprint(), layout.fingerprint());
  auto cnn = make_model(classifier_topology(module_path("classifier")));
  BOOST_REQUIRE(cnn.ok());
  BOOST_CHECK_NE((*cnn)->layout().fingerprint(), layout.fingerprint());
}

BOOST_AUTO_TEST_CASE(a_tied_weight_is_one_tensor_that_gets_both_gradients) {
  Topology t = gpt_topology();
  t.model.path = module_path("tied");
  auto made = make_model(t);
  BOOST_REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  Model& model = **made;
  // libtorch lists it as emb.weight and head.weight: one tensor, first name.
  BOOST_REQUIRE_EQUAL(model.layout().count(), 1);
  BOOST_CHECK_EQUAL(model.layout().tensor(0).name, "emb.weight");
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  const Batch batch = testing::text_batch(testing::sotu_excerpt(), 2, 12, 3);
  const float loss = model.forward_backward(params, batch, grads);
  BOOST_REQUIRE(std::isfinite(loss));
  // Along the gradient, the loss falls as the gradient says: the embedding's
  // and the head's contributions both landed in the one slice.
  double norm2 = 0.0;
  for (float g : grads) norm2 += double(g) * g;
  BOOST_REQUIRE_GT(norm2, 0.0);
  const float h = 1e-2f / static_cast<float>(std::sqrt(norm2));
  std::vector<float> p = params, scratch(params.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] -= h * grads[i];
  const double down = model.forward_backward(p, batch, scratch);
  BOOST_CHECK_CLOSE((loss - down) / h, norm2, 2.0);  // percent
}

BOOST_AUTO_TEST_CASE(the_fingerprint_covers_every_dimension_not_just_rows_and_columns) {
  ParamLayout a, b, c;
  a.add("w", std::vector<int64_t>{3, 4}, TensorRole::kBody, true);
  b.add("w", std::vector<int64_t>{3, 2, 2}, TensorRole::kBody, true);  // also 3 x 4 as rows x cols
  c.add("w", std::vector<int64_t>{3, 4}, TensorRole::kBody, true);
  BOOST_CHECK_EQUAL(a.tensor(0).rows, b.tensor(0).rows);
  BOOST_CHECK_EQUAL(a.tensor(0).cols, b.tensor(0).cols);
  BOOST_CHECK_NE(a.fingerprint(), b.fingerprint());
  BOOST_CHECK_EQUAL(a.fingerprint(), c.fingerprint());
}

BOOST_AUTO_TEST_CASE(parameters_are_read_from_the_callers_buffer_and_gradients_written_into_its_own) {
  auto made = make_model(classifier_topology(module_path("classifier")));
  BOOST_REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  Model& model = **made;
  const Batch batch = classifier_batch(6, 3);
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  const float loss = model.forward_backward(params, batch, grads);
  BOOST_REQUIRE(std::isfinite(loss));
  // Central differences in every coordinate: the gradient landed where the
  // layout says, for the parameters in this buffer and no other.
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> p = params, scratch(params.size());
    const float h = 1e-2f;
    p[i] = params[i] + h;
    const double up = model.forward_backward(p, batch, scratch);
    p[i] = params[i] - h;
    const double down = model.forward_backward(p, batch, scratch);
    const double numeric = (up - down) / (2 * h);
    BOOST_CHECK_MESSAGE(std::abs(numeric - grads[i]) <= 2e-3 + 1e-2 * std::abs(numeric),
                        "coordinate " << i << ": autograd " << grads[i] << ", finite differences " << numeric);
  }
  // Another buffer is another model: nothing of the first one stayed bound.
  std::vector<float> zeros(params.size(), 0.0f), g2(params.size());
  BOOST_CHECK_CLOSE(model.forward_backward(zeros, batch, g2), std::log(3.0), 1e-3);
  const EvalSums e = model.evaluate(params, batch);
  BOOST_CHECK_EQUAL(e.count, 6);
  BOOST_CHECK_CLOSE(e.loss(), loss, 1e-3);
  BOOST_CHECK(std::isnan(e.accuracy()));  // no logits() method: no accuracy, not a made-up 0
}

// Muon's orthogonalization against the reference code run by PyTorch
// (make_modules.py writes both the matrices and its results).
BOOST_AUTO_TEST_CASE(newton_schulz_matches_the_pytorch_reference) {
  const std::string path = std::string(ATOLL_TORCH_MODULES) + "/newton_schulz.txt";
  if (!std::filesystem::exists(path))
    testing::skip(path + " is missing: tests/fixtures/torch/make_modules.py writes it (needs python3-torch)");
  std::ifstream in(path);
  int matrices = 0, rows = 0, cols = 0;
  while (in >> rows >> cols) {
    const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    std::vector<float> m(n), reference(n), ours(n);
    for (float& v : m) in >> v;
    for (float& v : reference) in >> v;
    BOOST_REQUIRE(in);
    newton_schulz5(m, rows, cols, ours);
    float worst = 0.0f;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(ours[i] - reference[i]));
    BOOST_CHECK_MESSAGE(worst < 1e-4f, rows << "x" << cols << ": off by up to " << worst);
    ++matrices;
  }
  BOOST_CHECK_EQUAL(matrices, 2);
}

// atoll's Eigen transformer and the PyTorch GPT of examples/torch/gpt.py, on
// the same weights and bytes: the same loss and the same gradient for every
// tensor. The layouts differ only in names and in storage order: atoll's
// matrices are column-major (out, in), libtorch's row-major [out, in], so
// weight matrices transpose and the embeddings ((C, V) against [V, C]) do not.
BOOST_AUTO_TEST_CASE(atolls_transformer_matches_pytorch_autograd_loss_and_every_gradient) {
  auto made = make_model(gpt_topology());
  BOOST_REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  Model& torch = **made;
  Transformer eigen(TransformerConfig{2, 16, 2, 12, 256});
  struct Pair {
    std::string atoll, torch;
    bool transpose;
  };
  std::vector<Pair> pairs = {{"wte", "wte.weight", false}, {"wpe", "wpe.weight", false}};
  for (int l = 0; l < 2; ++l) {
    const std::string a = "h" + std::to_string(l) + ".", p = "h." + std::to_string(l) + ".";
    for (const char* ln : {"ln1", "ln2"}) {
      pairs.push_back({a + ln + ".w", p + ln + ".weight", false});
      pairs.push_back({a + ln + ".b", p + ln + ".bias", false});
    }
    for (const char* lin : {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"}) {
      pairs.push_back({a + lin + ".weight", p + lin + ".weight", true});
      pairs.push_back({a + lin + ".bias", p + lin + ".bias", false});
    }
  }
  pairs.push_back({"lnf.w", "lnf.weight", false});
  pairs.push_back({"lnf.b", "lnf.bias", false});
  pairs.push_back({"head", "head.weight", true});
  BOOST_REQUIRE_EQUAL(pairs.size(), static_cast<size_t>(eigen.layout().count()));
  BOOST_REQUIRE_EQUAL(pairs.size(), static_cast<size_t>(torch.layout().count()));
  BOOST_REQUIRE_EQUAL(eigen.layout().size(), torch.layout().size());

  // atoll (R, C) column-major a[i + j R] <-> libtorch [R, C] row-major t[i C + j].
  const auto move = [&](std::span<const float> from, std::span<float> to, bool atoll_to_torch) {
    for (const auto& p : pairs) {
      const TensorSpec& a = eigen.layout().tensor(eigen.layout().find(p.atoll));
      const int ti = torch.layout().find(p.torch);
      BOOST_REQUIRE_MESSAGE(ti >= 0, p.torch + " not in the module");
      const TensorSpec& t = torch.layout().tensor(ti);
      BOOST_REQUIRE_EQUAL(a.size(), t.size());
      const TensorSpec& src = atoll_to_torch ? a : t;
      const TensorSpec& dst = atoll_to_torch ? t : a;
      for (size_t k = 0; k < a.size(); ++k) {
        size_t ka = k, kt = k;
        if (p.transpose) {
          const size_t R = static_cast<size_t>(a.rows), i = k % R, j = k / R;
          kt = i * static_cast<size_t>(a.cols) + j;
        }
        to[dst.offset + (atoll_to_torch ? kt : ka)] = from[src.offset + (atoll_to_torch ? ka : kt)];
      }
    }
  };

  const std::string text = testing::sotu_excerpt();
  BOOST_REQUIRE_GT(text.size(), 1000u);
  double worst = 0.0;
  for (uint64_t seed : {1u, 2u}) {
    std::vector<float> pa(eigen.layout().size()), pt(pa.size()), ga(pa.size()), gt(pa.size()), back(pa.size());
    eigen.init(pa, seed);
    // Norm gains and biases away from 1 and 0, so their gradients are tested too.
    for (const auto& t : eigen.layout().tensors())
      if (!t.decay) {
        const auto noise = testing::random_vector(t.size(), seed * 100 + t.offset, 0.1);
        for (size_t k = 0; k < t.size(); ++k) pa[t.offset + k] += noise[k];
      }
    move(pa, pt, true);
    const Batch batch = testing::text_batch(text, 3, 12, 40 * seed);
    const float la = eigen.forward_backward(pa, batch, ga);
    const float lt = torch.forward_backward(pt, batch, gt);
    BOOST_TEST_MESSAGE("seed " << seed << ": loss atoll " << la << ", PyTorch " << lt);
    BOOST_CHECK_CLOSE(la, lt, 1e-4);  // percent: a relative 1e-6
    move(gt, back, false);
    for (const auto& t : eigen.layout().tensors()) {
      double max_ref = 0.0, max_diff = 0.0;
      for (size_t k = t.offset; k < t.offset + t.size(); ++k) {
        max_ref = std::max(max_ref, std::abs(double(back[k])));
        max_diff = std::max(max_diff, std::abs(double(ga[k]) - double(back[k])));
      }
      const double rel = max_diff / std::max(max_ref, 1e-12);
      worst = std::max(worst, rel);
      // Tolerance: the largest difference within 1e-5 of the tensor's largest
      // gradient (float32 sums in another order; measured: 5.4e-7 at worst).
      BOOST_CHECK_MESSAGE(max_diff <= 1e-5 * max_ref + 1e-9,
                          t.name << ": max |atoll - PyTorch| = " << max_diff << " against max |g| = " << max_ref);
      BOOST_CHECK_MESSAGE(max_ref > 0.0, t.name << ": zero gradient, nothing compared");
    }
  }
  BOOST_TEST_MESSAGE("worst gradient difference, relative to each tensor's largest: " << worst);
}

BOOST_AUTO_TEST_CASE(adamw_on_the_buffer_trains_the_module) {
  auto made = make_model(gpt_topology());
  BOOST_REQUIRE(made.ok());
  Model& model = **made;
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  AdamWConfig cfg;
  cfg.lr = 3e-3f;
  cfg.warmup_steps = 0;
  AdamW opt(model.layout(), cfg);
  const std::string text = testing::sotu_excerpt();
  const Batch batch = testing::text_batch(text, 4, 12, 0);
  const float first = model.forward_backward(params, batch, grads);
  float last = first;
  for (int s = 0; s < 60; ++s) {
    last = model.forward_backward(params, batch, grads);
    opt.update(params, grads);
  }
  BOOST_TEST_MESSAGE("loss on one batch: " << first << " -> " << last);
  BOOST_CHECK_LT(last, 0.6f * first);
  const EvalSums e = model.evaluate(params, batch);
  BOOST_CHECK_EQUAL(e.count, 48);
  BOOST_CHECK(e.accuracy() > 0.0);  // gpt.py exports logits(): next-byte hits are counted
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_a_torchscript_model_round_trips) {
  const Topology t = gpt_topology();
  auto made = make_model(t);
  BOOST_REQUIRE(made.ok());
  Model& model = **made;
  auto fragments = plan_fragments(model.layout(), t);
  BOOST_REQUIRE(fragments.ok());
  std::vector<float> params = initial_parameters(model, t);
  for (size_t i = 0; i < params.size(); i += 7) params[i] += 0.25f;
  CheckpointState s;
  s.fingerprint = model.layout().fingerprint();
  s.rounds = 9;
  for (const auto& f : *fragments) {
    CheckpointState::FragmentRecord r;
    r.fragment = static_cast<uint32_t>(f.id);
    r.version = 3;
    r.values.resize(f.size);
    gather(f, params, r.values);
    r.momentum.assign(f.size, 0.01f);
    s.fragments.push_back(std::move(r));
  }
  auto back = decode_checkpoint(encode_checkpoint(s));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(*back == s);
  std::vector<float> restored(params.size());
  for (size_t i = 0; i < fragments->size(); ++i) scatter((*fragments)[i], back->fragments[i].values, restored);
  BOOST_CHECK(restored == params);
  const Batch batch = testing::text_batch(testing::sotu_excerpt(), 2, 12, 5);
  BOOST_CHECK_EQUAL(model.evaluate(restored, batch).loss(), model.evaluate(params, batch).loss());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
