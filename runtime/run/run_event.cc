#include "atoll/run_event.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <map>

#include "atoll/overload.h"

namespace atl {
namespace {

std::string quoted(std::string_view s) {
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

// One event's fields in order, rendered as a tape line (JSON) or as text for
// people ("inject kind=kill hit=1 learner=2"); non-finite numbers left out.
class Line {
 public:
  Line(double t, const char* event) : t_(t), event_(event) {}
  Line& text(const char* key, std::string_view v) {
    fields_.push_back({key, quoted(v), std::string(v)});
    return *this;
  }
  Line& integer(const char* key, int64_t v) {
    fields_.push_back({key, std::to_string(v), std::to_string(v)});
    return *this;
  }
  Line& number(const char* key, double v) {
    if (!std::isfinite(v)) return *this;
    char json[32], plain[32];
    std::snprintf(json, sizeof json, "%.6g", v);
    std::snprintf(plain, sizeof plain, "%.3g", v);
    fields_.push_back({key, json, plain});
    return *this;
  }
  std::string json() const {
    char head[64];
    std::snprintf(head, sizeof head, "{\"t\":%.3f,\"event\":", std::isfinite(t_) ? t_ : 0.0);
    std::string out = head + quoted(event_);
    for (const auto& f : fields_) out += "," + quoted(f.key) + ":" + f.json;
    return out + "}";
  }
  std::string plain() const {
    std::string out = event_;
    for (const auto& f : fields_) out += " " + f.key + "=" + f.plain;
    return out;
  }

 private:
  struct Field {
    std::string key, json, plain;
  };
  double t_;
  std::string event_;
  std::vector<Field> fields_;
};

// A flat JSON object of strings and numbers (null: absent).
// Whole numbers without sign, point or exponent are kept exact (incarnations
// reach 2^60 in learner processes: a double would round them).
using Flat = std::map<std::string, std::variant<std::string, double, uint64_t>, std::less<>>;

Result<Flat> parse_flat(std::string_view text) {
  Flat out;
  size_t i = 0;
  const auto column = [&] { return " at column " + std::to_string(i + 1); };
  const auto skip = [&] { while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i; };
  const auto expect = [&](char c) {
    skip();
    if (i < text.size() && text[i] == c) return ++i, true;
    return false;
  };
  const auto string = [&]() -> std::optional<std::string> {
    if (!expect('"')) return std::nullopt;
    std::string s;
    while (i < text.size() && text[i] != '"') {
      if (text[i] == '\\' && i + 1 < text.size()) {
        ++i;
        if (text[i] == 'u' && i + 4 < text.size()) {
          s += static_cast<char>(std::strtol(std::string(text.substr(i + 1, 4)).c_str(), nullptr, 16));
          i += 5;
          continue;
        }
      }
      s += text[i++];
    }
    if (i >= text.size()) return std::nullopt;
    ++i;
    return s;
  };
  if (!expect('{')) return Status::corruption("not a JSON object");
  if (expect('}')) return out;
  do {
    auto key = string();
    if (!key || !expect(':')) return Status::corruption("expected \"key\":" + column());
    skip();
    if (i < text.size() && text[i] == '"') {
      auto v = string();
      if (!v) return Status::corruption("unterminated string" + column());
      out[*key] = *v;
    } else if (text.substr(i, 4) == "null") {
      i += 4;
    } else {
      char* end = nullptr;
      const std::string rest(text.substr(i));
      const double v = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) return Status::corruption("expected a string, a number or null" + column());
      const size_t length = static_cast<size_t>(end - rest.c_str());
      const std::string_view literal(rest.data(), length);
      errno = 0;
      const unsigned long long exact = std::strtoull(rest.c_str(), nullptr, 10);
      if (literal.find_first_not_of("0123456789") == std::string_view::npos && errno == 0) out[*key] = uint64_t{exact};
      else out[*key] = v;
      i += length;
    }
  } while (expect(','));
  if (!expect('}')) return Status::corruption("expected , or }" + column());
  return out;
}

// Counts and incarnations on the tape: as written, up to INT64_MAX.
int64_t int64_of(uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)); }

double number(const Flat& f, std::string_view key, double fallback) {
  const auto it = f.find(key);
  if (it == f.end()) return fallback;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&it->second)) return static_cast<double>(*u);
  return fallback;
}
std::string text(const Flat& f, std::string_view key) {
  const auto it = f.find(key);
  return it != f.end() && std::holds_alternative<std::string>(it->second) ? std::get<std::string>(it->second) : "";
}
// A count or an id from a tape: a whole number in range, else the fallback.
uint64_t whole(const Flat& f, std::string_view key, uint64_t fallback = 0) {
  const auto it = f.find(key);
  if (it == f.end()) return fallback;
  if (const auto* u = std::get_if<uint64_t>(&it->second)) return *u;
  const double v = number(f, key, -1);
  return v >= 0 && v <= 9.0e15 && v == std::floor(v) ? static_cast<uint64_t>(v) : fallback;
}

}  // namespace

Child Child::named(std::string_view name) {
  // "syncer shard 1": shard 0 is named without its number, as with one syncer.
  if (const size_t at = name.rfind(" shard "); at != std::string_view::npos) {
    const std::string n(name.substr(at + 7));
    char* end = nullptr;
    const unsigned long v = std::strtoul(n.c_str(), &end, 10);
    const Child base = named(name.substr(0, at));
    if (!n.empty() && *end == '\0' && v > 0 && v <= UINT32_MAX &&
        (base.role == Role::kSyncer || base.role == Role::kCheckpointer || base.role == Role::kSyncerSupervisor))
      return of_shard(base.role, static_cast<uint32_t>(v));
  }
  if (name == "syncer") return {Role::kSyncer, 0, {}};
  if (name == "checkpointer") return {Role::kCheckpointer, 0, {}};
  if (name == "root supervisor") return {Role::kRootSupervisor, 0, {}};
  if (name == "syncer supervisor") return {Role::kSyncerSupervisor, 0, {}};
  if (name == "learner supervisor") return {Role::kLearnerSupervisor, 0, {}};
  if (name.starts_with("learner ")) {
    char* end = nullptr;
    const std::string id(name.substr(8));
    const unsigned long v = std::strtoul(id.c_str(), &end, 10);
    if (!id.empty() && *end == '\0' && v <= UINT32_MAX) return of_learner(static_cast<uint32_t>(v));
  }
  return {Role::kOther, 0, std::string(name)};
}

std::string Child::name() const {
  const std::string of_shard = shard == 0 ? "" : " shard " + std::to_string(shard);
  switch (role) {
    case Role::kLearner: return "learner " + std::to_string(learner);
    case Role::kSyncer: return "syncer" + of_shard;
    case Role::kCheckpointer: return "checkpointer" + of_shard;
    case Role::kRootSupervisor: return "root supervisor";
    case Role::kSyncerSupervisor: return "syncer supervisor" + of_shard;
    case Role::kLearnerSupervisor: return "learner supervisor";
    case Role::kOther: return other;
  }
  return other;
}

int64_t learner_of(const RunEvent& e) {
  return std::visit(Overload{
                        [](const event::Injected& x) { return x.learner; },
                        [](const event::Restarted& x) {
                          return x.child.role == Child::Role::kLearner ? int64_t{x.child.learner} : int64_t{-1};
                        },
                        [](const event::GaveUp& x) {
                          return x.child.role == Child::Role::kLearner ? int64_t{x.child.learner} : int64_t{-1};
                        },
                        [](const event::Registered& x) { return int64_t{x.learner}; },
                        [](const event::FirstMerge& x) { return int64_t{x.learner}; },
                        [](const event::Reintegrated& x) { return int64_t{x.learner}; },
                        [](const event::VersionDecreased&) { return int64_t{-1}; },
                        [](const event::Failed&) { return int64_t{-1}; },
                        [](const event::Joined& x) { return int64_t{x.learner}; },
                        [](const event::Departed& x) { return int64_t{x.learner}; },
                    },
                    e);
}

std::string kind_of(const RunEvent& e) {
  return std::visit(Overload{
                        [](const event::Injected& x) { return "fault " + std::string(fault_kind_name(x.kind)); },
                        [](const event::Restarted&) { return std::string("restart"); },
                        [](const event::GaveUp&) { return std::string("gave up"); },
                        [](const event::Registered&) { return std::string("registration"); },
                        [](const event::FirstMerge&) { return std::string("first_merge"); },
                        [](const event::Reintegrated&) { return std::string("reintegrated"); },
                        [](const event::VersionDecreased&) { return std::string("version decreased"); },
                        [](const event::Failed&) { return std::string("failed"); },
                        [](const event::Joined&) { return std::string("joined"); },
                        [](const event::Departed&) { return std::string("departed"); },
                    },
                    e);
}

namespace {

// The one place an event's fields are named, for both renderings.
Line line_of(const TimedEvent& te) {
  const double t = te.t;
  return std::visit(
      Overload{
          [t](const event::Injected& x) {
            Line l(t, "inject");
            l.text("kind", fault_kind_name(x.kind)).integer("hit", x.hit ? 1 : 0);
            if (targets_learners(x.kind)) l.integer("learner", x.learner);
            else l.integer("shard", x.shard);
            if (x.recover_after > 0) l.number("recover_after", x.recover_after);
            if (x.duration > 0) l.number("duration", x.duration);
            if (x.kind == FaultKind::kSlow) l.number("factor", x.factor);
            if (x.seconds > 0) l.number("seconds", x.seconds);
            if (x.probability < 1) l.number("probability", x.probability);
            if (x.speed > 0) l.number("speed", x.speed);
            if (x.batch_size > 0) l.integer("batch_size", x.batch_size);
            if (!x.plan.empty()) l.text("plan", x.plan);
            if (!x.by.empty()) l.text("by", x.by);
            return l;
          },
          [t](const event::Restarted& x) {
            Line l(t, "recovered");
            l.text("what", "restart").text("child", x.child.name()).integer("incarnation", int64_of(x.incarnation));
            return l;
          },
          [t](const event::GaveUp& x) {
            Line l(t, "gave_up");
            l.text("child", x.child.name());
            return l;
          },
          [t](const event::Registered& x) {
            Line l(t, "recovered");
            l.text("what", "registration").integer("learner", x.learner);
            l.integer("incarnation", int64_of(x.incarnation)).number("seconds", x.seconds);
            return l;
          },
          [t](const event::FirstMerge& x) {
            Line l(t, "recovered");
            l.text("what", "first_merge").integer("learner", x.learner);
            l.integer("incarnation", int64_of(x.incarnation)).number("seconds", x.seconds);
            return l;
          },
          [t](const event::Reintegrated& x) {
            Line l(t, "reintegrated");
            l.integer("learner", x.learner).integer("incarnation", int64_of(x.incarnation)).number("seconds", x.seconds);
            return l;
          },
          [t](const event::VersionDecreased& x) {
            Line l(t, "version_decreased");
            l.integer("fragment", x.fragment).integer("from", int64_of(x.from)).integer("to", int64_of(x.to));
            return l;
          },
          [t](const event::Failed& x) {
            Line l(t, "failed");
            l.text("why", x.why);
            return l;
          },
          [t](const event::Joined& x) {
            Line l(t, "joined");
            l.integer("learner", x.learner).integer("incarnation", int64_of(x.incarnation)).number("speed", x.speed);
            l.integer("batch_size", x.batch_size);
            return l;
          },
          [t](const event::Departed& x) {
            Line l(t, "departed");
            l.integer("learner", x.learner).integer("incarnation", int64_of(x.incarnation));
            l.integer("orderly", x.orderly ? 1 : 0).text("reason", x.reason);
            return l;
          },
      },
      te.event);
}

}  // namespace

std::string encode_event_line(const TimedEvent& e) { return line_of(e).json(); }
std::string event_text(const RunEvent& e) { return line_of({0.0, e}).plain(); }

Result<std::optional<TimedEvent>> decode_event_line(std::string_view line) {
  auto parsed = parse_flat(line);
  if (!parsed.ok()) return parsed.status();
  const Flat& f = *parsed;
  TimedEvent te;
  te.t = number(f, "t", std::numeric_limits<double>::quiet_NaN());
  if (!std::isfinite(te.t) || te.t < 0) return Status::corruption("\"t\" is missing or not a time since the start");
  const std::string name = text(f, "event"), what = text(f, "what");
  const auto learner = [&] { return static_cast<uint32_t>(std::min<uint64_t>(whole(f, "learner"), UINT32_MAX)); };
  if (name == "inject") {
    auto kind = parse_fault_kind(text(f, "kind"));
    if (!kind.ok()) return kind.status();
    event::Injected x;
    x.kind = *kind;
    x.hit = number(f, "hit", 0) == 1;
    const double learner_number = number(f, "learner", -1);
    if (!(learner_number >= -1 && learner_number <= INT32_MAX)) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "learner %g is outside [-1, %d]", learner_number, INT32_MAX);
      return Status::corruption(buf);
    }
    x.learner = static_cast<int64_t>(learner_number);
    x.recover_after = number(f, "recover_after", 0);
    x.duration = number(f, "duration", 0);
    x.factor = number(f, "factor", 1);
    x.seconds = number(f, "seconds", 0);
    x.probability = number(f, "probability", 1);
    x.speed = number(f, "speed", 0);
    x.batch_size = static_cast<uint32_t>(std::min<uint64_t>(whole(f, "batch_size"), UINT32_MAX));
    x.shard = static_cast<uint32_t>(std::min<uint64_t>(whole(f, "shard"), UINT32_MAX));  // absent (older tapes): 0
    x.plan = text(f, "plan");
    x.by = text(f, "by");
    te.event = x;
  } else if (name == "recovered" && what == "restart") {
    te.event = event::Restarted{Child::named(text(f, "child")), whole(f, "incarnation")};
  } else if (name == "recovered" && what == "registration") {
    te.event = event::Registered{learner(), whole(f, "incarnation"), number(f, "seconds", kUnknownSeconds)};
  } else if (name == "recovered" && what == "first_merge") {
    te.event = event::FirstMerge{learner(), whole(f, "incarnation"), number(f, "seconds", kUnknownSeconds)};
  } else if (name == "reintegrated") {
    te.event = event::Reintegrated{learner(), whole(f, "incarnation"), number(f, "seconds", kUnknownSeconds)};
  } else if (name == "gave_up") {
    te.event = event::GaveUp{Child::named(text(f, "child"))};
  } else if (name == "version_decreased") {
    te.event = event::VersionDecreased{static_cast<uint32_t>(std::min<uint64_t>(whole(f, "fragment"), UINT32_MAX)),
                                       whole(f, "from"), whole(f, "to")};
  } else if (name == "failed") {
    te.event = event::Failed{text(f, "why")};
  } else if (name == "joined") {
    te.event = event::Joined{learner(), whole(f, "incarnation"), number(f, "speed", 0),
                             static_cast<uint32_t>(std::min<uint64_t>(whole(f, "batch_size"), UINT32_MAX))};
  } else if (name == "departed") {
    te.event = event::Departed{learner(), whole(f, "incarnation"), number(f, "orderly", 1) == 1, text(f, "reason")};
  } else if (name.empty()) {
    return Status::corruption("no \"event\"");
  } else {
    return std::optional<TimedEvent>{};
  }
  return std::optional<TimedEvent>{std::move(te)};
}

}  // namespace atl
