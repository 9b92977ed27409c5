#include "atoll/event_tape.h"

#include <cerrno>
#include <cstring>
#include <limits>

namespace atl {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string text_of(const EventTape::Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return quoted(*s);
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", std::get<double>(v));
  return buf;
}

std::string plain(const EventTape::Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return text_of(v);
}

}  // namespace

Result<std::shared_ptr<EventTape>> EventTape::open(const std::string& path,
                                                   std::chrono::steady_clock::time_point start) {
  std::shared_ptr<EventTape> tape(new EventTape());
  tape->start_ = start;
  tape->path_ = path;
  if (!path.empty()) {
    tape->file_ = std::fopen(path.c_str(), "w");
    if (!tape->file_) return Status::io_error(path + ": cannot write the event tape: " + std::strerror(errno));
  }
  return tape;
}

EventTape::~EventTape() {
  if (file_) std::fclose(file_);
}

void EventTape::record(const std::string& event, const Fields& fields) {
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char head[64];
  std::snprintf(head, sizeof head, "{\"t\":%.3f,\"event\":", t);
  std::string line = head + quoted(event);
  for (const auto& [k, v] : fields) line += "," + quoted(k) + ":" + text_of(v);
  line += "}";
  std::lock_guard lock(mu_);
  ++counts_[event];
  for (const auto& [k, v] : fields) ++counts_[event + "/" + k + "=" + plain(v)];
  if (file_) {
    std::fputs(line.c_str(), file_);
    std::fputc('\n', file_);
    std::fflush(file_);
  }
  lines_.push_back(std::move(line));
  entries_.push_back({t, event, fields});
}

std::vector<EventTape::Entry> EventTape::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

double EventTape::Entry::number(const std::string& key) const {
  for (const auto& [k, v] : fields) {
    if (k != key) continue;
    if (const auto* d = std::get_if<double>(&v)) return *d;
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string EventTape::Entry::text(const std::string& key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return plain(v);
  return "";
}

std::vector<std::string> EventTape::lines() const {
  std::lock_guard lock(mu_);
  return lines_;
}

uint64_t EventTape::count(const std::string& event) const {
  std::lock_guard lock(mu_);
  const auto it = counts_.find(event);
  return it == counts_.end() ? 0 : it->second;
}

uint64_t EventTape::count(const std::string& event, const std::string& key, const std::string& value) const {
  std::lock_guard lock(mu_);
  const auto it = counts_.find(event + "/" + key + "=" + value);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace atl
