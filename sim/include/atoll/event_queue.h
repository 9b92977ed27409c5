// EventQueue: a discrete-event simulation's agenda, taken in (time, sequence)
// order: the earliest first, events at the same time in the order they were
// scheduled.
//
// Most of a simulation's events are scheduled a fixed delay ahead (a message
// over a link, an inner step), so the events of one kind mostly come in time
// order. Each such kind keeps a run of its own, first in first out (constant
// time each way); the rest, and an event that would not keep its run sorted,
// go to a binary heap. Each run is sorted and the heap's top is its least,
// and top() is the least of those, so the order is exactly one heap's: a
// simulation gives the same result with either, only sooner with this one.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace atl {

// E has `double t` and `uint64_t seq`, and seq grows with every push().
template <class E>
class EventQueue {
 public:
  static constexpr size_t kRuns = 4;
  static constexpr size_t kHeap = kRuns;  // push()'s `run` for an event of no run

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // `run`: below kRuns, the run of e's kind; kHeap: none.
  void push(E e, size_t run = kHeap) {
    ++size_;
    // A run stays sorted: e's seq is the largest yet, so its time decides.
    if (run < kRuns && (runs_[run].empty() || runs_[run].back().t <= e.t)) {
      if (runs_[run].empty()) least_ = kUnknown;  // e is its front now
      runs_[run].push_back(std::move(e));
      return;
    }
    heap_.push_back(std::move(e));
    std::push_heap(heap_.begin(), heap_.end(), later);
    least_ = kUnknown;
  }

  // REQUIRES: !empty().
  const E& top() const {
    find_least();
    return least_ == kHeap ? heap_.front() : runs_[least_].front();
  }

  // REQUIRES: !empty().
  void pop() {
    find_least();
    --size_;
    if (least_ == kHeap) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      heap_.pop_back();
    } else {
      runs_[least_].pop_front();
    }
    least_ = kUnknown;
  }

 private:
  using Run = std::deque<E>;
  static constexpr size_t kUnknown = kRuns + 1;  // where top() is, beside a run or kHeap

  // a after b: a heap with the earliest on top.
  static bool later(const E& a, const E& b) { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }

  void find_least() const {
    if (least_ != kUnknown) return;
    const E* least = heap_.empty() ? nullptr : &heap_.front();
    size_t where = kHeap;
    for (size_t i = 0; i < kRuns; ++i)
      if (!runs_[i].empty() && (!least || later(*least, runs_[i].front()))) least = &runs_[i].front(), where = i;
    least_ = where;
  }

  std::array<Run, kRuns> runs_;
  std::vector<E> heap_;
  size_t size_ = 0;
  mutable size_t least_ = kUnknown;  // where top() is: a run, the heap, or not known yet
};

}  // namespace atl
