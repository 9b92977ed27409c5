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

Result<std::string> read_text(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    Status s = S_ISDIR(st.st_mode) ? Status::invalid_argument(path + ": is a folder, not a file")
                                   : errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = errno_status("read failed", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return Status::out_of_range(path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB, too large for a " +
                                  "text file atoll reads");
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp);
  const auto fail = [&](const char* what) {
    Status s = errno_status(what, tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write failed");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync failed");
  if (::close(fd) != 0) {
    Status s = errno_status("close failed", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = errno_status("cannot rename over " + path, tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  // The rename is durable only once the folder's entry is on disk.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno_status("cannot open folder", dir);
  const int rc = ::fsync(dfd);
  Status s = rc != 0 ? errno_status("fsync of folder failed", dir) : Status{};
  ::close(dfd);
  return s;
}

}  // namespace atl
