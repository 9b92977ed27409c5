#include "atoll/status.h"

namespace atl {

const char* code_name(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "Invalid argument";
    case Status::Code::kNotFound: return "Not found";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kIOError: return "IO error";
    case Status::Code::kOutOfRange: return "Out of range";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kRefused: return "Refused";
    case Status::Code::kOver: return "Over";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(code_name(state_->code)) + ": " + state_->message;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(state_->code, std::string(context) + ": " + state_->message);
}

}  // namespace atl
