#include "atoll/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace atl {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = path + ": " + what + ": " + std::strerror(e);
  return e == ENOENT ? Status::not_found(std::move(msg)) : Status::io_error(std::move(msg));
}

}  // namespace

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument(path + ": not a regular file");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = errno_status("read failed", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;  // shrank while reading
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

}  // namespace atl
