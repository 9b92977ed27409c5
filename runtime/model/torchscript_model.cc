// The only translation unit that includes libtorch (about 30 s to compile):
// everything else sees the Model interface of torchscript_model.h. It is a
// module of its own, libatoll_torchscript.so, which a program loads the first
// time it opens a TorchScript model (torchscript_loader.cc); builds and
// programs without libtorch get torchscript_unavailable.cc instead
// (runtime/CMakeLists.txt says which).
#include "atoll/torchscript_model.h"


#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include <ATen/Parallel.h>
#include <torch/script.h>

#include "atoll/log.h"
#include "atoll/module_layout.h"
#include "torchscript_entry.h"

namespace atl {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string message_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// One intra-op thread per process: operators run on the thread that calls
// them, inside that learner's arena. Inter-op threads only serve fork/wait.
// When libblas.so.3 is OpenBLAS (Debian's alternatives), its own thread pool
// would run each matrix product on every core: one thread too.
void use_calling_thread_only() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::set_num_threads(1);
    if (auto* set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
    try {
      at::set_num_interop_threads(1);
    } catch (const std::exception&) {  // the embedding service started the pool first: it stays
    }
  });
}

class TorchScriptModel final : public Model {
 public:
  // Loads and checks everything but the probe pass (see load_torchscript_model).
  static Result<std::unique_ptr<TorchScriptModel>> open(const TorchScriptConfig& config);

  std::string describe() const override { return description_; }
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, uint64_t /*seed*/) const override {
    std::copy(initial_.begin(), initial_.end(), params.begin());
  }
  float forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) override;
  EvalSums evaluate(std::span<const float> params, const Batch& batch) override;

  // The module's parameters as the layout, with their values in the file.
  Status take_parameters();
  // A forward and backward pass on two examples made up of valid inputs:
  // shows a broken contract at load, not in the middle of a run.
  Status probe();

 private:
  explicit TorchScriptModel(TorchScriptConfig config) : config_(std::move(config)) {}

  struct Inputs {
    at::Tensor x, y;
    int64_t predictions = 0;
  };
  Inputs to_tensors(const Batch& batch) const;
  // Points every parameter at its slice of `params` (no copy).
  void bind(std::span<const float> params);
  // Runs forward(); the loss as a checked scalar, or the broken clause.
  Result<at::Tensor> loss_of(const Inputs& in);

  TorchScriptConfig config_;
  torch::jit::Module module_;
  std::optional<torch::jit::Method> logits_;
  std::vector<at::Tensor> params_;  // the module's parameters, in layout order
  ParamLayout layout_;
  std::vector<float> initial_;      // the weights saved in the file
  std::string description_;
};

Result<std::unique_ptr<TorchScriptModel>> TorchScriptModel::open(const TorchScriptConfig& config) {
  const std::string& path = config.path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status::not_found(path + ": no such file (export a module with torch.jit.script(model).save(path); "
                             "examples/torch/ shows how)");
  if (std::filesystem::is_directory(path, ec)) return Status::invalid_argument(path + ": is a folder, not a TorchScript file");
  use_calling_thread_only();
  std::unique_ptr<TorchScriptModel> m(new TorchScriptModel(config));
  try {
    m->module_ = torch::jit::load(path);
  } catch (const std::exception& e) {
    std::string why = message_of(e);
    why = why.substr(0, why.find('\n'));
    return Status::invalid_argument(path + ": not a TorchScript archive (torch.jit.load says: " + why +
                                    "); save it with torch.jit.script(model).save(path)");
  }
  auto forward = m->module_.find_method("forward");
  if (!forward) return Status::invalid_argument(path + ": the module has no forward() method");
  const auto& schema = forward->function().getSchema();
  // arguments() includes self.
  const auto& args = schema.arguments();
  std::string found = "forward(";
  for (size_t i = 1; i < args.size(); ++i) found += (i > 1 ? ", " : "") + args[i].name() + ": " + args[i].type()->str();
  found += ") -> ";
  for (size_t i = 0; i < schema.returns().size(); ++i) found += (i ? ", " : "") + schema.returns()[i].type()->str();
  const auto is_tensor = [](const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; };
  const bool ok = args.size() == 3 && is_tensor(args[1].type()) && is_tensor(args[2].type()) &&
                  schema.returns().size() == 1 && is_tensor(schema.returns()[0].type());
  if (!ok)
    return Status::invalid_argument(path + ": expected forward(inputs: Tensor, targets: Tensor) -> Tensor (the mean "
                                    "loss), found " + found);
  if (auto logits = m->module_.find_method("logits")) {
    const auto& ls = logits->function().getSchema();
    if (ls.arguments().size() != 2 || !is_tensor(ls.arguments()[1].type()))
      return Status::invalid_argument(path + ": expected logits(inputs: Tensor) -> Tensor, found logits with " +
                                      std::to_string(ls.arguments().size() - 1) + " arguments");
    m->logits_.emplace(std::move(*logits));
  }

  const size_t buffers = m->module_.named_buffers(/*recurse=*/true).size();
  ATOLL_RETURN_IF_ERROR(m->take_parameters());
  if (m->params_.empty()) return Status::invalid_argument(path + ": the module has no parameters to train");

  std::string name = m->module_.type()->name() ? m->module_.type()->name()->name() : "module";
  m->description_ = "torchscript " + name + " from " + path + " (" + std::to_string(m->params_.size()) + " tensors" +
                    (buffers ? ", " + std::to_string(buffers) + " buffers kept per replica" : std::string()) + ")";
  return m;
}

Status TorchScriptModel::take_parameters() try {
  const std::string& path = config_.path;
  std::set<const c10::TensorImpl*> seen;
  std::vector<NamedShape> shapes;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    const at::Tensor& v = p.value;
    // libtorch lists a tied weight under each of its names: it is one tensor
    // of the layout, under its first name (a second slice would never see a
    // gradient, and AdamW would decay it apart).
    if (!seen.insert(v.unsafeGetTensorImpl()).second) continue;
    const std::string where = path + ": parameter " + p.name + " " + shape_of(v);
    if (v.layout() != at::kStrided || !v.device().is_cpu())
      return Status::invalid_argument(where + " is not a dense CPU tensor: atoll trains dense float32 parameters "
                                      "on the CPU");
    if (v.scalar_type() != at::kFloat)
      return Status::invalid_argument(where + " is " + std::string(c10::toString(v.scalar_type())) +
                                      ": atoll trains float32 parameters (call model.float() before scripting)");
    if (!v.requires_grad())
      return Status::invalid_argument(where + " does not require grad: atoll trains every parameter (make a "
                                      "frozen tensor a buffer)");
    shapes.push_back({p.name, v.sizes().vec()});
    params_.push_back(v);
    const at::Tensor flat = v.detach().contiguous().reshape({-1});
    initial_.insert(initial_.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  auto layout = module_layout(shapes, config_.avg);
  if (!layout.ok()) return layout.status().with_context(path);
  layout_ = std::move(*layout);
  return {};
} catch (const std::exception& e) {
  return Status::invalid_argument(config_.path + ": its parameters cannot be read: " + message_of(e));
}

TorchScriptModel::Inputs TorchScriptModel::to_tensors(const Batch& batch) const {
  Inputs in;
  if (config_.bytes) {
    const int64_t B = batch.rows, T = batch.y_cols - 1;
    in.x = torch::empty({B, T}, torch::kLong);
    in.y = torch::empty({B, T}, torch::kLong);
    auto* x = in.x.data_ptr<int64_t>();
    auto* y = in.y.data_ptr<int64_t>();
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        const auto row = static_cast<size_t>(r * batch.y_cols);
        x[r * T + t] = batch.y[row + static_cast<size_t>(t)];
        y[r * T + t] = batch.y[row + static_cast<size_t>(t) + 1];
      }
    in.predictions = B * T;
  } else {
    // A copy, not a view: a module may change its inputs in place, and the
    // held-out batches are shared by every evaluation.
    in.x = torch::from_blob(const_cast<float*>(batch.x.data()), {batch.rows, batch.x_cols}, torch::kFloat).clone();
    in.y = torch::empty({batch.rows}, torch::kLong);
    auto* y = in.y.data_ptr<int64_t>();
    for (int r = 0; r < batch.rows; ++r) y[r] = batch.y[static_cast<size_t>(r)];
    in.predictions = batch.rows;
  }
  return in;
}

void TorchScriptModel::bind(std::span<const float> params) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& t = layout_.tensor(static_cast<int>(i));
    // libtorch only reads parameters through these views: atoll's AdamW,
    // not libtorch, writes the buffer.
    auto view = torch::from_blob(const_cast<float*>(params.data() + t.offset), params_[i].sizes(), torch::kFloat);
    params_[i].set_data(view);
  }
}

Result<at::Tensor> TorchScriptModel::loss_of(const Inputs& in) {
  const c10::IValue out = module_.forward({in.x, in.y});
  if (!out.isTensor())
    return Status::invalid_argument(config_.path + ": forward() returned " + out.tagKind() +
                                    ", expected a Tensor holding the mean loss");
  at::Tensor loss = out.toTensor();
  if (loss.numel() != 1)
    return Status::invalid_argument(config_.path + ": forward() returned a tensor of shape " + shape_of(loss) +
                                    ", expected a scalar (the mean loss over the batch)");
  if (!at::isFloatingType(loss.scalar_type()))
    return Status::invalid_argument(config_.path + ": forward() returned a " +
                                    std::string(c10::toString(loss.scalar_type())) + " loss, expected float");
  return loss.reshape({});
}

float TorchScriptModel::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) {
  std::fill(grads.begin(), grads.end(), 0.0f);
  try {
    bind(params);
    module_.train(true);
    const Inputs in = to_tensors(batch);
    auto loss = loss_of(in);
    if (!loss.ok()) throw std::runtime_error(std::string(loss.status().message()));
    // Autograd adds into a defined .grad in place: point each at its slice
    // of `grads`, so the backward pass writes there without a copy.
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& t = layout_.tensor(static_cast<int>(i));
      params_[i].mutable_grad() = torch::from_blob(grads.data() + t.offset, params_[i].sizes(), torch::kFloat);
    }
    loss->backward();
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& g = params_[i].mutable_grad();
      const auto& t = layout_.tensor(static_cast<int>(i));
      if (g.defined() && g.data_ptr<float>() != grads.data() + t.offset)  // replaced, not accumulated
        std::copy_n(g.contiguous().data_ptr<float>(), t.size(), grads.begin() + static_cast<ptrdiff_t>(t.offset));
      g = at::Tensor();  // no view of the caller's buffer outlives the call
    }
    return loss->item<float>();
  } catch (const std::exception& e) {
    // The module broke its contract mid-run (the probe passed): a non-finite
    // step makes the learner restart from the global model, loudly.
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    log_error(config_.path + ": forward/backward failed: " + message_of(e));
    std::fill(grads.begin(), grads.end(), std::numeric_limits<float>::quiet_NaN());
    return std::numeric_limits<float>::quiet_NaN();
  }
}

EvalSums TorchScriptModel::evaluate(std::span<const float> params, const Batch& batch) {
  EvalSums sums;
  sums.predicts = logits_.has_value();
  try {
    torch::NoGradGuard no_grad;
    bind(params);
    module_.train(false);
    const Inputs in = to_tensors(batch);
    auto loss = loss_of(in);
    if (!loss.ok()) throw std::runtime_error(std::string(loss.status().message()));
    sums.count = in.predictions;
    sums.loss_sum = loss->item<double>() * static_cast<double>(in.predictions);
    if (logits_) {
      const at::Tensor scores = (*logits_)({in.x}).toTensor();
      sums.correct = scores.argmax(-1).reshape(in.y.sizes()).eq(in.y).sum().item<int64_t>();
    }
  } catch (const std::exception& e) {
    log_error(config_.path + ": evaluation failed: " + message_of(e));
    sums.count = std::max<int64_t>(1, batch.tokens);
    sums.loss_sum = std::numeric_limits<double>::quiet_NaN();
  }
  return sums;
}

Status TorchScriptModel::probe() {
  Batch b;
  b.rows = 2;
  if (config_.bytes) {
    b.y_cols = config_.context + 1;
    for (int i = 0; i < b.rows * b.y_cols; ++i) b.y.push_back((i * 37 + 11) % 256);
  } else {
    b.x_cols = config_.features;
    for (int i = 0; i < b.rows * b.x_cols; ++i) b.x.push_back(static_cast<float>(i % 7) / 7.0f);
    b.y = {0, config_.classes - 1};
  }
  const std::string expected =
      config_.bytes ? "forward(int64 [2, " + std::to_string(config_.context) + "], int64 [2, " +
                          std::to_string(config_.context) + "])"
                    : "forward(float32 [2, " + std::to_string(config_.features) + "], int64 [2])";
  try {
    bind(initial_);
    module_.train(true);
    auto loss = loss_of(to_tensors(b));
    if (!loss.ok()) return loss.status();
    const double v = loss->item<double>();
    if (!std::isfinite(v))
      return Status::invalid_argument(config_.path + ": " + expected + " returned a loss of " + std::to_string(v) +
                                      " with the file's weights: expected a finite number");
    if (!loss->requires_grad())
      return Status::invalid_argument(config_.path + ": " + expected +
                                      " returned a loss that does not depend on the parameters (no grad)");
    loss->backward();
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    if (logits_) {
      torch::NoGradGuard no_grad;
      const Inputs in = to_tensors(b);
      const c10::IValue out = (*logits_)({in.x});
      const int64_t scores = config_.bytes ? 256 : config_.classes;
      const std::string want = config_.bytes ? "[2, " + std::to_string(config_.context) + ", 256]"
                                             : "[2, " + std::to_string(config_.classes) + "]";
      if (!out.isTensor() || out.toTensor().dim() != in.y.dim() + 1 || out.toTensor().size(-1) != scores ||
          out.toTensor().sizes().slice(0, static_cast<size_t>(in.y.dim())) != in.y.sizes())
        return Status::invalid_argument(config_.path + ": logits() returned " +
                                        (out.isTensor() ? "a tensor of shape " + shape_of(out.toTensor())
                                                        : std::string(out.tagKind())) +
                                        ", expected scores of shape " + want);
    }
  } catch (const std::exception& e) {
    std::string why = message_of(e);
    if (why.size() > 600) why = why.substr(0, 600) + " ...";
    return Status::invalid_argument(config_.path + ": " + expected + " failed: " + why);
  }
  return {};
}

Result<std::unique_ptr<Model>> open_and_probe(const TorchScriptConfig& config) {
  auto m = TorchScriptModel::open(config);
  if (!m.ok()) return m.status();
  ATOLL_RETURN_IF_ERROR((*m)->probe());
  return std::unique_ptr<Model>(std::move(*m));
}

}  // namespace
}  // namespace atl

// The module's entry (torchscript_entry.h): TorchScriptOpen.
extern "C" __attribute__((visibility("default"))) void atoll_torchscript_open(
    const atl::TorchScriptConfig& config, atl::TorchScriptLog log, atl::Result<std::unique_ptr<atl::Model>>& out) {
  static std::once_flag once;
  std::call_once(once, [log] { atl::set_log_sink(log); });
  out = atl::open_and_probe(config);
}
