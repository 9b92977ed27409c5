// TorchScript models in a program built with libtorch. The model's code is a
// module, libatoll_torchscript.so (torchscript_model.cc), loaded the first
// time a model is opened: libtorch's start-up (about 0.9 s of CPU and some
// 280 shared libraries on Debian 12) is paid by the runs that use it, not by
// every `atoll learner`, `atoll syncer` or `atoll --help`.
#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

#include "atoll/torchscript_model.h"
#include "torchscript_entry.h"

namespace atl {
namespace {

struct Module {
  TorchScriptOpen open = nullptr;
  std::string why;  // when not loaded
};

// Beside an installed program (PREFIX/bin/../lib/atoll/, whatever the prefix
// it was installed to), where the build put the module, where `cmake
// --install` puts it by default.
std::vector<std::string> places() {
  std::vector<std::string> paths;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) paths.push_back((exe.parent_path().parent_path() / ATOLL_TORCHSCRIPT_MODULE_IN_PREFIX).string());
  paths.push_back(ATOLL_TORCHSCRIPT_MODULE_BUILT);
  paths.push_back(ATOLL_TORCHSCRIPT_MODULE_INSTALLED);
  return paths;
}

const Module& module() {
  static const Module m = [] {
    Module found;
    std::string looked;
    for (const std::string& path : places()) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        looked += (looked.empty() ? "" : ", ") + path;
        continue;
      }
      // RTLD_GLOBAL: libtorch's libraries are then found by name, as when linked
      // (torchscript_model.cc looks up OpenBLAS's thread count that way).
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (!handle) {
        found.why = "cannot load " + path + ": " + dlerror();
        return found;
      }
      found.open = reinterpret_cast<TorchScriptOpen>(dlsym(handle, kTorchScriptOpenSymbol));
      if (!found.open) found.why = path + " has no " + kTorchScriptOpenSymbol + ": a module of another atoll?";
      return found;
    }
    found.why = "libatoll_torchscript.so, the part of atoll that holds libtorch, is in none of the places this "
                "program looks (" + looked + "): build atoll again, or install it with cmake --install";
    return found;
  }();
  return m;
}

}  // namespace

bool torchscript_available() { return module().open != nullptr; }

Result<std::unique_ptr<Model>> load_torchscript_model(const TorchScriptConfig& config) {
  const Module& m = module();
  if (!m.open) return Status::unavailable("model.kind = \"torchscript\": " + m.why);
  Result<std::unique_ptr<Model>> out = Status::unavailable("libatoll_torchscript.so did not answer");
  m.open(config, &log, out);
  return out;
}

}  // namespace atl
