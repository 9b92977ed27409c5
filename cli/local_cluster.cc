#include "local_cluster.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "atoll/certificates.h"
#include "atoll/cluster_token.h"

extern char** environ;

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;

// A child in a process group of its own, with `env` as its environment. If
// the parent dies, even by SIGKILL, the child gets SIGTERM and stops too.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    ::execve(exe.c_str(), argv.data(), envp.data());
    std::perror("atoll: exec");
    ::_exit(127);
  }
  return pid;
}

// The exit status of `pid` once it ended (a signal: 128 + it), or nullopt while it runs.
std::optional<int> ended(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for `pid` up to `seconds`; then SIGTERM and up to 5 s more; then SIGKILL.
// Returns its status and whether it had to be stopped.
std::pair<int, bool> reap(pid_t pid, double seconds) {
  const auto until = [](double s) { return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  for (auto [signal, deadline] : {std::pair{SIGTERM, until(seconds)}, std::pair{SIGKILL, until(seconds + 5)}}) {
    while (Clock::now() < deadline) {
      if (auto status = ended(pid)) return {*status, signal == SIGKILL};
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, signal);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);  // SIGKILL cannot be refused
  return {128 + SIGKILL, true};
}

// The port `pid` (`which`: "syncer") writes to `port_file` once it listens
// (every shard's, comma-separated, for a syncer of several shards). Fails if
// it ends first, does not listen within `seconds`,
// or `interrupted` says so (then pid is left to the caller to kill).
Result<std::string> wait_for_port(pid_t& pid, const std::string& port_file, const std::string& which, double seconds,
                                  const std::function<bool()>& interrupted) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  for (;;) {
    std::string port;
    std::ifstream(port_file) >> port;
    if (!port.empty()) return port;
    if (interrupted && interrupted()) return Status::unavailable("interrupted before the " + which + " listened");
    if (auto status = ended(pid)) {
      pid = -1;
      return Status::unavailable("the " + which + " process ended (status " + std::to_string(*status) +
                                 ") before it listened");
    }
    if (Clock::now() >= deadline)
      return Status::unavailable("the " + which + " process did not listen within " +
                                 std::to_string(static_cast<int>(seconds)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status write_secret(const std::string& path, const std::string& text) {
  std::error_code ec;
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int err = errno;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (!ok) return Status::io_error(path + ": cannot write: " + std::strerror(err));
  return {};
}

}  // namespace

Result<std::unique_ptr<LocalCluster>> LocalCluster::start(const LocalClusterOptions& o,
                                                          const std::function<bool()>& interrupted) {
  if (o.atoll.empty()) return Status::invalid_argument("LocalCluster needs the path of the atoll executable");
  if (o.learners == 0) return Status::invalid_argument("LocalCluster needs at least one learner");
  std::vector<std::string> syncer_net, learner_net;
  if (!o.tls_dir.empty()) {
    const std::string ca = o.tls_dir + "/ca.pem";
    if (!std::filesystem::exists(o.tls_dir + "/syncer.pem")) {
      auto made = make_certificates({o.tls_dir, {}, 365, false});
      if (!made.ok()) return made.status();
    }
    syncer_net = {"--tls-cert", o.tls_dir + "/syncer.pem", "--tls-key", o.tls_dir + "/syncer.key", "--tls-ca", ca};
    learner_net = {"--tls-cert", o.tls_dir + "/learner.pem", "--tls-key", o.tls_dir + "/learner.key", "--tls-ca", ca,
                   "--tls-name", "localhost"};
  }
  if (!o.link.empty()) {
    syncer_net.insert(syncer_net.end(), {"--link", o.link});
    learner_net.insert(learner_net.end(), {"--link", o.link});
  }
  // The token goes in the children's environment only: never on a command line.
  const std::string token = make_cluster_token();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with(std::string(kTokenEnv) + "=")) env.emplace_back(*e);
  env.push_back(std::string(kTokenEnv) + "=" + token);
  if (!o.metrics.empty()) {
    if (o.token_file.empty()) return Status::invalid_argument("a status page across processes needs a token file");
    if (Status s = write_secret(o.token_file, token); !s.ok()) return s;
  }

  // A private folder: another local user cannot plant or read the port files.
  std::string scratch = (std::filesystem::temp_directory_path() / "atoll-XXXXXX").string();
  if (!::mkdtemp(scratch.data())) return Status::io_error("cannot make a temporary folder");
  const size_t shards = std::max<size_t>(1, o.shards);
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  // One syncer process holds every shard (each on its own port), so that
  // the run has one report, one held-out evaluation and one model.
  const std::string port_file = scratch + "/ports";
  std::vector<std::string> syncer = {"atoll", "syncer", "--listen", "127.0.0.1:0", "--port-file", port_file,
                                     "--report", o.report_path};
  if (!o.topology_file.empty()) syncer.insert(syncer.begin() + 2, o.topology_file);
  for (const auto& s : o.sets) syncer.insert(syncer.end(), {"--set", s});
  if (o.seconds > 0) syncer.insert(syncer.end(), {"--seconds", std::to_string(o.seconds)});
  if (!o.data.empty()) syncer.insert(syncer.end(), {"--data", o.data});
  if (o.sample_prompt) syncer.insert(syncer.end(), {"--sample-prompt", *o.sample_prompt});
  if (o.curve > 0) syncer.insert(syncer.end(), {"--curve", std::to_string(o.curve)});
  if (o.quiet) syncer.push_back("--quiet");
  if (o.verbose) syncer.push_back("-v");
  if (!o.metrics.empty()) {
    syncer.insert(syncer.end(), {"--metrics", o.metrics});
    if (o.metrics_public) syncer.push_back("--metrics-public");
  }
  syncer.insert(syncer.end(), syncer_net.begin(), syncer_net.end());
  c->syncers_.push_back(spawn(o.atoll, syncer, env));
  auto written = wait_for_port(c->syncers_.back(), port_file, "syncer", o.listen_timeout_seconds, interrupted);
  std::error_code ignored;
  std::filesystem::remove_all(scratch, ignored);
  if (!written.ok()) return written.status();  // the destructor kills the syncer
  std::vector<std::string> ports;  // "P0,P1,...": shard 0 first
  for (size_t begin = 0; begin <= written->size();) {
    const size_t end = std::min(written->find(',', begin), written->size());
    ports.push_back(written->substr(begin, end - begin));
    begin = end + 1;
  }
  if (ports.size() != shards)
    return Status::unavailable("the syncer wrote " + std::to_string(ports.size()) + " ports for " +
                            std::to_string(shards) + " shards: " + *written);
  c->port_ = static_cast<uint16_t>(std::stoul(ports[0]));
  std::string join;
  for (const auto& port : ports) join += (join.empty() ? "" : ",") + std::string("127.0.0.1:") + port;
  c->learner_end_seconds_ = o.learner_end_seconds;
  for (size_t id = 0; id < o.learners; ++id) {
    std::vector<std::string> learner = {"atoll", "learner", "--join", join, "--id", std::to_string(id),
                                        "--threads", "1", "--report", ""};
    if (!o.data.empty()) learner.insert(learner.end(), {"--data", o.data});
    if (o.quiet) learner.push_back("--quiet");
    if (o.verbose) learner.push_back("-v");
    learner.insert(learner.end(), learner_net.begin(), learner_net.end());
    c->learners_.push_back(spawn(o.atoll, learner, env));
  }
  return c;
}

LocalCluster::~LocalCluster() {
  kill();
  for (pid_t pid : syncers_)
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  for (pid_t pid : learners_) ::waitpid(pid, nullptr, 0);
}

uint16_t LocalCluster::port() const { return port_; }

void LocalCluster::stop() {
  for (pid_t pid : syncers_)
    if (pid > 0) ::kill(pid, SIGINT);
}

void LocalCluster::kill() {
  for (pid_t pid : syncers_)
    if (pid > 0) ::kill(pid, SIGKILL);
  for (pid_t pid : learners_) ::kill(pid, SIGKILL);
}

int LocalCluster::wait(const std::function<void()>& poll) {
  int result = 0;
  for (pid_t& pid : syncers_) {
    std::optional<int> status;
    while (pid > 0 && !(status = ended(pid))) {
      if (poll) poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid > 0 && result == 0) result = status.value_or(1);
    pid = -1;
  }
  // Learners end when the syncer says the run is over; one that missed it is stopped.
  learners_failed_ = 0;
  for (pid_t pid : learners_) {
    const auto [code, stopped] = reap(pid, learner_end_seconds_);
    learners_failed_ += stopped || code != 0;  // missing the end of the run is not a clean end
  }
  learners_.clear();
  return syncers_.empty() ? 1 : result;
}

int LocalCluster::learners_failed() const { return learners_failed_; }

}  // namespace atl
