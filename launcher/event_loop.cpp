// epoll event loop (event_loop.hpp).
#include "launcher/event_loop.hpp"

#include <sys/epoll.h>
#include <algorithm>
#include <array>

namespace rmp::launcher {

EventLoop::EventLoop() : epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_) throw SystemError("epoll_create1", errno);
}

void EventLoop::add(int fd, std::uint32_t events, Handler handler) {
  const std::uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw SystemError("epoll_ctl(ADD) of fd " + std::to_string(fd), errno);
  }
  entries_.emplace(id, Entry{fd, std::move(handler)});
  by_fd_[fd] = id;
}

void EventLoop::modify(int fd, std::uint32_t events) {
  const auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
    throw SystemError("epoll_ctl(MOD) of fd " + std::to_string(fd), errno);
  }
}

void EventLoop::remove(int fd) {
  const auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  entries_.erase(it->second);
  by_fd_.erase(it);
}

void EventLoop::wait(std::optional<Clock::time_point> deadline) {
  int timeout_ms = -1;
  if (deadline) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
  }
  std::array<epoll_event, 64> ready{};
  const int n =
      ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return;
    throw SystemError("epoll_wait", errno);
  }
  for (int i = 0; i < n; ++i) {
    const auto it = entries_.find(ready[static_cast<std::size_t>(i)].data.u64);
    if (it == entries_.end()) continue;  // removed by an earlier handler of this batch
    // Copy: the handler may remove its own entry.
    auto handler = it->second.handler;
    handler(ready[static_cast<std::size_t>(i)].events);
  }
}

}  // namespace rmp::launcher
