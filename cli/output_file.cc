#include "output_file.h"

#include <cstdio>
#include <filesystem>

#include "atoll/file.h"

namespace atl::cli {

bool write_output(const std::string& path, const std::string& text, const char* what) {
  std::error_code ec;
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  const Status s = ec ? Status::io_error(path + ": cannot create its folder: " + ec.message())
                      : write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  if (!s.ok()) {
    std::fprintf(stderr, "atoll: cannot write the %s: %s\n", what, s.to_string().c_str());
    return false;
  }
  std::printf("%s written to %s\n", what, path.c_str());
  return true;
}

}  // namespace atl::cli
