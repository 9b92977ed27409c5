// TorchScript models in a program without libtorch: a build that did not
// find Torch, or the Python module, which lives in a process that may hold
// another torch (runtime/CMakeLists.txt).
#include "atoll/torchscript_model.h"

namespace atl {

bool torchscript_available() { return false; }

Result<std::unique_ptr<Model>> load_torchscript_model(const TorchScriptConfig&) {
  return Status::unavailable(
      "model.kind = \"torchscript\": this program has no libtorch. The atoll command has it when built with "
      "libtorch-dev (scripts/setup installs it; configure again, or pass -DATOLL_TORCH=ON to see why CMake did not "
      "find Torch). The Python module never has it, as it shares its process with your own torch: train the module "
      "in Python with atoll.Learner instead");
}

}  // namespace atl
