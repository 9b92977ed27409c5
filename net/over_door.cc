#include "atoll/over_door.h"

#include "atoll/messages.h"

namespace atl {

Result<std::unique_ptr<OverDoor>> OverDoor::open(const std::string& host, uint16_t port, DoorOptions options,
                                                 std::string why) {
  std::unique_ptr<OverDoor> d(new OverDoor);
  d->why_ = std::move(why);
  OverDoor* self = d.get();
  DoorEvents events;
  events.opened = [self](uint64_t conn, uint32_t, Purpose, uint64_t, const std::string&) {
    {
      std::lock_guard lock(self->mu_);
      self->opened_.push_back(conn);
    }
    self->cv_.notify_one();
  };
  events.frame = [](uint64_t, std::vector<uint8_t>) {};  // Registers, pushes: the answer is the same
  events.closed = [](uint64_t, const std::string&) {};
  // Any learner id: a learner of any slot is told the same.
  options.learners = UINT32_MAX;
  auto door = Door::open(std::move(options), std::move(events));
  if (!door.ok()) return door.status();
  d->door_ = std::move(*door);
  d->thread_ = std::thread([self] { self->answer(); });
  auto bound = d->door_->listen(host, port);
  if (!bound.ok()) return bound.status();  // the destructor stops the thread
  d->port_ = *bound;
  return d;
}

OverDoor::~OverDoor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  door_.reset();
}

uint64_t OverDoor::told() const {
  std::lock_guard lock(mu_);
  return told_;
}

void OverDoor::answer() {
  const std::vector<uint8_t> done = encode_message(Done{why_});
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !opened_.empty(); });
    if (stopping_) return;
    const uint64_t conn = opened_.front();
    opened_.pop_front();
    lock.unlock();
    door_->send(conn, done);
    door_->close(conn, "the run is over");
    lock.lock();
    ++told_;
  }
}

}  // namespace atl
