// The launcher's single-threaded event loop: epoll over the KVS sockets, the ranks' output
// pipes, the signalfd and stdin, with one handler per descriptor. Deadlines (timeouts, grace
// periods) are the caller's: it passes the nearest one to wait().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>

#include "launcher/fd.hpp"

namespace rmp::launcher {

using Clock = std::chrono::steady_clock;

class EventLoop {
public:
  using Handler = std::function<void(std::uint32_t events)>;

  EventLoop();
  // events: EPOLLIN / EPOLLOUT …; the handler runs when fd is ready. fd stays owned by the caller,
  // who must remove() it before closing it.
  void add(int fd, std::uint32_t events, Handler handler);
  void modify(int fd, std::uint32_t events);
  void remove(int fd);
  bool watching(int fd) const { return by_fd_.contains(fd); }

  // Waits until some descriptor is ready or deadline passes, then runs the ready handlers.
  void wait(std::optional<Clock::time_point> deadline);

private:
  struct Entry {
    int fd;
    Handler handler;
  };
  UniqueFd epoll_;
  // Ready events carry an id, not the fd: a handler may remove (and the process reuse) another
  // descriptor that is ready in the same batch, and its stale event must find nothing.
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::unordered_map<int, std::uint64_t> by_fd_;
};

}  // namespace rmp::launcher
