// The one door into libatoll_torchscript.so: the loader (torchscript_loader.cc)
// finds this function by name with dlsym, and the module (torchscript_model.cc)
// defines it. Both are built from the same headers by the same compiler, so
// C++ types cross; the name is C so that dlsym can find it.
#pragma once

#include <memory>
#include <string>

#include "atoll/log.h"
#include "atoll/torchscript_model.h"

namespace atl {

// The program's log, which the module's lines go to: the module has its own
// copy of the runtime's code, and of the log's destination with it.
using TorchScriptLog = void (*)(LogLevel, const std::string&);
// Does what load_torchscript_model() says, into `out`.
using TorchScriptOpen = void (*)(const TorchScriptConfig& config, TorchScriptLog log,
                                 Result<std::unique_ptr<Model>>& out);
inline constexpr const char* kTorchScriptOpenSymbol = "atoll_torchscript_open";

}  // namespace atl
