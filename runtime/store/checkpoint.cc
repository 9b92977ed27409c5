#include "atoll/checkpoint.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>

#include "atoll/checkpoint.capnp.h"
#include "atoll/file.h"
#include "framed_record.h"

namespace atl {
namespace {

constexpr FileMagic kMagic = {'A', 'T', 'O', 'L', 'L', 'C', 'K', 'P'};
constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kSuffix = ".atoll";

}  // namespace

CheckpointView view_of(const CheckpointState& state) {
  CheckpointView v{state.fingerprint, state.plan_fingerprint, state.created_unix_ms, state.rounds, {}, state.learners, {},
                   state.figures};
  for (const auto& f : state.fragments) v.fragments.push_back({f.fragment, f.version, f.values, f.momentum});
  if (const auto& o = state.optimizer) v.optimizer = CheckpointView::OptimizerRecord{o->step, o->m, o->v};
  return v;
}

CheckpointState copy_of(const CheckpointView& view) {
  CheckpointState s{view.fingerprint, view.plan_fingerprint, view.created_unix_ms, view.rounds, {}, view.learners, {},
                    view.figures};
  for (const auto& f : view.fragments)
    s.fragments.push_back({f.fragment, f.version, {f.values.begin(), f.values.end()}, {f.momentum.begin(), f.momentum.end()}});
  if (const auto& o = view.optimizer)
    s.optimizer = CheckpointState::OptimizerRecord{o->step, {o->m.begin(), o->m.end()}, {o->v.begin(), o->v.end()}};
  return s;
}

std::vector<uint8_t> encode_checkpoint(const CheckpointView& view) {
  // The message's words, to the word: structs, list tags and the Data fields.
  auto words_of = []<class T>(size_t n) { return n * (T::_capnpPrivate::dataWordSize + T::_capnpPrivate::pointerCount); };
  auto data_words = [](std::span<const float> v) { return (v.size_bytes() + sizeof(capnp::word) - 1) / sizeof(capnp::word); };
  size_t words = 1 + words_of.operator()<schema::Checkpoint>(1) + 1 +
                 words_of.operator()<schema::FragmentRecord>(view.fragments.size()) + 1 +
                 words_of.operator()<schema::LearnerRecord>(view.learners.size());
  for (const auto& f : view.fragments) words += data_words(f.values) + data_words(f.momentum);
  if (const auto& o = view.optimizer)
    words += words_of.operator()<schema::OptimizerRecord>(1) + data_words(o->m) + data_words(o->v);
  words += (view.figures.size() + sizeof(capnp::word) - 1) / sizeof(capnp::word);

  return frame_record_in_place(kMagic, kCheckpointFormatVersion, words, [&](capnp::MessageBuilder& builder) {
    auto root = builder.initRoot<schema::Checkpoint>();
    root.setFormatVersion(kCheckpointFormatVersion);
    root.setFingerprint(view.fingerprint);
    root.setPlanFingerprint(view.plan_fingerprint);
    root.setCreatedUnixMs(view.created_unix_ms);
    root.setRounds(view.rounds);
    auto fs = root.initFragments(static_cast<unsigned>(view.fragments.size()));
    for (unsigned i = 0; i < fs.size(); ++i) {
      const auto& f = view.fragments[i];
      fs[i].setFragment(f.fragment);
      fs[i].setVersion(f.version);
      fs[i].setValues(float_bytes(f.values));
      fs[i].setMomentum(float_bytes(f.momentum));
    }
    auto ls = root.initLearners(static_cast<unsigned>(view.learners.size()));
    for (unsigned i = 0; i < ls.size(); ++i) {
      const auto& l = view.learners[i];
      ls[i].setLearner(l.learner);
      ls[i].setIncarnation(l.incarnation);
      ls[i].setPastSteps(l.past_steps);
      ls[i].setPastTokens(l.past_tokens);
      ls[i].setSteps(l.steps);
      ls[i].setTokens(l.tokens);
      ls[i].setMember(l.member);
      ls[i].setProcess(l.process);
    }
    if (const auto& o = view.optimizer) {
      auto r = root.initOptimizer();
      r.setStep(o->step);
      r.setM(float_bytes(o->m));
      r.setV(float_bytes(o->v));
    }
    if (!view.figures.empty()) root.setFigures(kj::arrayPtr(view.figures.data(), view.figures.size()));
  });
}

std::vector<uint8_t> encode_checkpoint(const CheckpointState& state) { return encode_checkpoint(view_of(state)); }

Result<CheckpointState> decode_checkpoint(std::span<const uint8_t> bytes) {
  std::vector<capnp::word> aligned;
  auto words = unframe_record(bytes, kMagic, kCheckpointFormatVersion, "an atoll checkpoint", aligned);
  if (!words.ok()) return words.status();
  try {
    capnp::FlatArrayMessageReader reader(*words,
                                         record_reader_options(words->size()));
    const auto root = reader.getRoot<schema::Checkpoint>();
    if (root.getFormatVersion() != kCheckpointFormatVersion)
      return Status::corruption("record format version " + std::to_string(root.getFormatVersion()));
    CheckpointState s;
    s.fingerprint = root.getFingerprint();
    s.plan_fingerprint = root.getPlanFingerprint();
    s.created_unix_ms = root.getCreatedUnixMs();
    s.rounds = root.getRounds();
    for (auto f : root.getFragments()) {
      CheckpointState::FragmentRecord r;
      r.fragment = f.getFragment();
      r.version = f.getVersion();
      r.values = floats_of(f.getValues(), "values of fragment " + std::to_string(r.fragment));
      r.momentum = floats_of(f.getMomentum(), "momentum of fragment " + std::to_string(r.fragment));
      if (r.values.size() != r.momentum.size())
        return Status::corruption("fragment " + std::to_string(r.fragment) + " has " +
                                  std::to_string(r.values.size()) + " values but " +
                                  std::to_string(r.momentum.size()) + " momentum entries");
      // A valid checksum proves the bytes, not the numbers: a diverged state
      // restored would freeze its fragment and be written into every later file.
      for (const auto* v : {&r.values, &r.momentum})
        if (auto bad = std::find_if(v->begin(), v->end(), [](float x) { return !std::isfinite(x); }); bad != v->end())
          return Status::corruption("fragment " + std::to_string(r.fragment) + " " +
                                    (v == &r.values ? "values" : "momentum") + " entry " +
                                    std::to_string(bad - v->begin()) + " is not finite");
      s.fragments.push_back(std::move(r));
    }
    for (auto l : root.getLearners())
      s.learners.push_back(
          {l.getLearner(), l.getIncarnation(), l.getPastSteps(), l.getPastTokens(), l.getSteps(), l.getTokens(),
           l.getMember(), l.getProcess()});
    if (root.hasOptimizer()) {
      const auto o = root.getOptimizer();
      CheckpointState::OptimizerRecord r{o.getStep(), floats_of(o.getM(), "optimizer first moment"),
                                         floats_of(o.getV(), "optimizer second moment")};
      if (r.step < 0 || r.m.size() != r.v.size())
        return Status::corruption("optimizer state has step " + std::to_string(r.step) + ", " +
                                  std::to_string(r.m.size()) + " first and " + std::to_string(r.v.size()) +
                                  " second moments");
      const auto finite = [](float x) { return std::isfinite(x); };
      if (!std::all_of(r.m.begin(), r.m.end(), finite) || !std::all_of(r.v.begin(), r.v.end(), finite))
        return Status::corruption("optimizer state is not finite");
      s.optimizer = std::move(r);
    }
    if (root.hasFigures()) {
      const auto f = root.getFigures();
      s.figures.assign(f.begin(), f.end());
    }
    return s;
  } catch (const kj::Exception& e) {
    return Status::corruption(std::string("malformed record: ") + e.getDescription().cStr());
  } catch (const std::runtime_error& e) {
    return Status::corruption(e.what());
  }
}

Result<std::unique_ptr<CheckpointStore>> CheckpointStore::open(const std::string& dir, int keep) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error(dir + ": cannot create the checkpoint folder: " + ec.message());
  const std::string lock_path = dir + "/LOCK";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error(lock_path + ": cannot open the folder's lock file: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char owner[32] = {};
    [[maybe_unused]] const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK)
      return Status::unavailable(dir + " is in use by another syncer (process " +
                                 std::string(owner).substr(0, std::string(owner).find('\n')) +
                                 "): give this run another --run-name, or stop that one");
    return Status::io_error(lock_path + ": cannot lock: " + std::strerror(err));
  }
  // The holder's pid, for the message above; the lock, not the text, is what counts.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // Not fatal: the lock is held; only the message to a second syncer is poorer.
  }
  std::unique_ptr<CheckpointStore> store(new CheckpointStore(dir, keep, fd));
  if (auto listed = store->sequences(); !listed.ok()) return listed.status();
  return store;
}

CheckpointStore::CheckpointStore(std::string dir, int keep, int lock_fd)
    : dir_(std::move(dir)), keep_(std::max(2, keep)), lock_fd_(lock_fd) {}

CheckpointStore::~CheckpointStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string CheckpointStore::path_of(uint64_t sequence) const {
  char name[64];
  std::snprintf(name, sizeof name, "%s%012llu%s", kPrefix, static_cast<unsigned long long>(sequence), kSuffix);
  return dir_ + "/" + name;
}

Result<std::vector<uint64_t>> CheckpointStore::sequences() const { return scan(nullptr); }

Result<std::vector<uint64_t>> CheckpointStore::scan(std::vector<std::string>* strays) const {
  namespace fs = std::filesystem;
  std::vector<uint64_t> out;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec);
  if (ec == std::errc::no_such_file_or_directory) return out;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    const std::string_view digits =
        std::string_view(name).substr(std::strlen(kPrefix), name.size() - std::strlen(kPrefix) - std::strlen(kSuffix));
    uint64_t sequence = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), sequence);
    if (digits.empty() || err != std::errc{} || end != digits.data() + digits.size()) {
      if (strays && err == std::errc::result_out_of_range) strays->push_back(name);
      continue;
    }
    out.push_back(sequence);
  }
  if (ec) return Status::io_error(dir_ + ": cannot list the checkpoint folder: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> CheckpointStore::write(const CheckpointState& state) {
  return write_encoded(encode_checkpoint(state));
}

Result<std::string> CheckpointStore::write_encoded(std::span<const uint8_t> file) {
  // Never put a file on disk that load_latest() would refuse.
  if (auto check = decode_checkpoint(file); !check.ok()) return check.status().with_context("not written");
  auto existing = sequences();
  if (!existing.ok()) return existing.status();
  if (!existing->empty() && existing->back() == std::numeric_limits<uint64_t>::max())
    return Status::out_of_range(path_of(existing->back()) + ": no sequence number is left after this file's");
  const uint64_t next = existing->empty() ? 1 : existing->back() + 1;
  const std::string path = path_of(next);
  ATOLL_RETURN_IF_ERROR(write_file_atomic(path, file));
  // Prune only after the new one is durable, oldest first.
  existing->push_back(next);
  std::error_code ec;
  for (size_t i = 0; i + static_cast<size_t>(keep_) < existing->size(); ++i)
    std::filesystem::remove(path_of((*existing)[i]), ec);
  return path;
}

Result<std::string> CheckpointStore::write_point(uint32_t point, std::span<const uint8_t> file) {
  if (auto check = decode_checkpoint(file); !check.ok()) return check.status().with_context("not written");
  const std::string path = dir_ + "/point-" + std::to_string(point) + kSuffix;
  ATOLL_RETURN_IF_ERROR(write_file_atomic(path, file));
  return path;
}

Result<std::optional<CheckpointState>> CheckpointStore::load_point(uint32_t point, uint64_t fingerprint) const {
  const std::string path = dir_ + "/point-" + std::to_string(point) + kSuffix;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<CheckpointState>{};
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  auto state = decode_checkpoint(*bytes);
  if (!state.ok()) return state.status().with_context(path);
  if (state->fingerprint != fingerprint)
    return Status::invalid_argument(path + ": written for another model (fingerprint " +
                                    std::to_string(state->fingerprint) + ", this model " + std::to_string(fingerprint) + ")");
  return std::optional<CheckpointState>(std::move(*state));
}

Result<std::optional<CheckpointState>> CheckpointStore::load_latest(
    uint64_t fingerprint, const std::function<void(const std::string&)>& warn) const {
  std::vector<std::string> strays;
  const auto seqs = scan(&strays);
  if (!seqs.ok()) return seqs.status();
  for (const auto& name : strays)
    warn(dir_ + "/" + name + ": skipped: its sequence number does not fit in 64 bits (not written by atoll)");
  for (auto it = seqs->rbegin(); it != seqs->rend(); ++it) {
    const std::string path = path_of(*it);
    auto bytes = read_file(path);
    if (!bytes.ok()) {
      warn(path + ": skipped: " + bytes.status().to_string());
      continue;
    }
    auto state = decode_checkpoint(*bytes);
    if (!state.ok()) {
      warn(path + ": skipped: " + state.status().to_string());
      continue;
    }
    if (state->fingerprint != fingerprint) {
      warn(path + ": skipped: written for another model (fingerprint " + std::to_string(state->fingerprint) +
           ", this model " + std::to_string(fingerprint) + ")");
      continue;
    }
    return std::optional<CheckpointState>(std::move(*state));
  }
  return std::optional<CheckpointState>{};
}

}  // namespace atl
