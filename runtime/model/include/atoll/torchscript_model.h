// TorchScriptModel: a PyTorch module, exported with torch.jit.script(...).save(),
// trained as an atoll Model (model.kind = "torchscript").
//
// The contract a module must keep (docs/models.md, "Bring your own model"):
//
//   forward(inputs: Tensor, targets: Tensor) -> Tensor   the mean loss, a scalar
//
//     byte windows (data.kind = "text"):  inputs int64 [B, T], targets int64 [B, T]
//                                         (targets[b, t] is the byte after inputs[b, t]),
//                                         loss = mean natural-log cross-entropy per byte
//     classifier (mnist, synthetic):      inputs float32 [B, features], targets int64 [B],
//                                         loss = mean cross-entropy per example
//
//   logits(inputs: Tensor) -> Tensor     optional: scores [B, classes] or [B, T, 256];
//                                        when present, held-out accuracy is its argmax hits
//
// Held-out loss is forward()'s mean times the batch's predictions, summed
// over batches and divided by the total: bits per byte = that loss / ln 2.
//
// Parameters: every parameter (float32 required), in named_parameters()
// order and by its TorchScript name ("h.0.attn.qkv.weight"; a tied weight
// once, by its first name), becomes a tensor of the layout. The module's own
// storage is replaced by views into the flat buffer each call passes, so
// fragments, codecs and checkpoints see an ordinary layout.
// Tensors of rank >= 2 decay, others don't. Names matching a glob of
// model.avg merge by weighted mean, the rest by RDA. init() writes the
// weights saved in the file: the topology's seed does not change them.
// Buffers (e.g. a causal mask) stay each replica's own: never merged nor
// checkpointed, and held-out evaluation uses the file's. Buffers that learn
// (BatchNorm running statistics) are not supported.
//
// Threads: libtorch runs its operators on the calling thread (one intra-op
// thread per process, set on first load), so a learner's compute stays inside
// its TBB arena and the cores are never oversubscribed.
//
// libtorch is loaded with the first model opened, not at the program's start
// (runtime/model/torchscript_loader.cc). Without libtorch at build time (CMake
// did not find Torch), or without the module that holds it, loading returns an
// Unavailable error that says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "atoll/model.h"
#include "atoll/status.h"

namespace atl {

struct TorchScriptConfig {
  std::string path;               // the .pt file
  std::vector<std::string> avg;   // globs of tensor names merged by weighted mean
  // The inputs the data gives: byte windows of `context` bytes, or
  // `features` floats per example with labels in [0, classes).
  bool bytes = true;
  int context = 128;
  int features = 784;
  int classes = 10;
};

// Loads the module and checks the contract on a probe batch of two
// examples: a forward and a backward pass. Errors name the file and say what
// was expected and what was found (NotFound, InvalidArgument; Unavailable
// in a build without libtorch).
Result<std::unique_ptr<Model>> load_torchscript_model(const TorchScriptConfig& config);

// Whether this program can open TorchScript models: its build has libtorch,
// and the module that holds it loads (the first call loads it).
bool torchscript_available();

}  // namespace atl
