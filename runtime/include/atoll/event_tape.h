// EventTape: what a chaos run did and what it saw, as JSON lines.
//
// One object per line, in the order things happened:
//   {"t":12.345,"event":"inject","kind":"kill","learner":2,"recover_after":5}
//   {"t":12.346,"event":"recovered","what":"restart","child":"learner 2","incarnation":2}
//   {"t":17.401,"event":"recovered","what":"registration","learner":2,"incarnation":2,"seconds":5.06}
//   {"t":17.650,"event":"recovered","what":"first_merge","learner":2,"incarnation":2,"seconds":0.25}
// `t` is seconds since the run started. Injections carry every parameter of
// the fault, so a tape can be read back as a timed fault plan. Thread-safe:
// actors write from their own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "atoll/status.h"

namespace atl {

class EventTape {
 public:
  using Value = std::variant<std::string, double, int64_t>;
  using Fields = std::vector<std::pair<std::string, Value>>;

  // `path` empty: kept in memory only. The file is truncated.
  static Result<std::shared_ptr<EventTape>> open(const std::string& path,
                                                 std::chrono::steady_clock::time_point start);
  ~EventTape();

  // Appends one line (flushed at once, so a crash loses nothing written).
  void record(const std::string& event, const Fields& fields);

  struct Entry {
    double t;  // seconds since the start
    std::string event;
    Fields fields;
    // The field's value as a number (strings: NaN), or NaN if absent.
    double number(const std::string& key) const;
    std::string text(const std::string& key) const;  // "" if absent
  };
  std::vector<Entry> entries() const;
  std::vector<std::string> lines() const;
  // How many lines had this event, or this event and this value of `key`.
  uint64_t count(const std::string& event) const;
  uint64_t count(const std::string& event, const std::string& key, const std::string& value) const;
  const std::string& path() const { return path_; }

 private:
  EventTape() = default;
  std::chrono::steady_clock::time_point start_;
  std::string path_;
  std::FILE* file_ = nullptr;
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  std::vector<Entry> entries_;
  std::map<std::string, uint64_t> counts_;  // "event" and "event/key=value"
};

}  // namespace atl
