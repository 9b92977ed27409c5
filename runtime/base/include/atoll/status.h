// Status and Result<T>: errors as values.
//
// Nothing in runtime/ throws across its API. A function that can fail returns
// a Status (or a Result<T> holding either a T or a non-ok Status) whose message
// names what is wrong and where ("data/mnist/train-images: truncated at image
// 1203"), so a caller can print it as is. An ok Status carries no allocation.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace atl {

class Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kInvalidArgument,  // bad config value, bad message field, bad flag
    kNotFound,         // a file or key that should exist does not
    kCorruption,       // a file or payload is malformed or fails its checksum
    kIOError,          // the operating system refused a read, write or sync
    kOutOfRange,       // a size or index beyond a configured limit
    kUnavailable,      // a peer or resource is (for now) not there
    kRefused,          // a peer said no: a bad token, an id it does not know, another model
    kOver,             // a peer's run is over: there is nothing left to join
  };

  Status() = default;  // ok

  static Status invalid_argument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status not_found(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status io_error(std::string msg) { return {Code::kIOError, std::move(msg)}; }
  static Status out_of_range(std::string msg) { return {Code::kOutOfRange, std::move(msg)}; }
  static Status unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
  static Status refused(std::string msg) { return {Code::kRefused, std::move(msg)}; }
  static Status over(std::string msg) { return {Code::kOver, std::move(msg)}; }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return ok() ? Code::kOk : state_->code; }
  // The message without the code name; empty when ok.
  std::string_view message() const { return ok() ? std::string_view{} : state_->message; }
  // "Corruption: <message>", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>"; ok stays ok.
  Status with_context(std::string_view context) const;

 private:
  struct State {
    Code code;
    std::string message;
  };
  Status(Code code, std::string msg)
      : state_(std::make_shared<const State>(State{code, std::move(msg)})) {}

  std::shared_ptr<const State> state_;  // null when ok
};

const char* code_name(Status::Code code);

// Either a value or a non-ok Status.
// REQUIRES: value() / operator* only when ok().
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}     // NOLINT: must not be ok

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace atl

// Returns early from the enclosing function if `expr` (a Status) is not ok.
#define ATOLL_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::atl::Status atoll_status_ = (expr);      \
    if (!atoll_status_.ok()) return atoll_status_; \
  } while (false)
