// Small POSIX helpers for rlaunch: an owning file descriptor, pipes, complete writes.
#pragma once

#include <unistd.h>
#include <cerrno>
#include <cstddef>
#include <string>
#include <utility>

#include "launcher/errors.hpp"

namespace rmp::launcher {

class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    // close() is not retried on EINTR: on Linux the descriptor is gone either way.
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// pipe2 with O_CLOEXEC, so no rank inherits another rank's pipes.
Pipe make_pipe();
void set_nonblocking(int fd);

// Writes all of data to fd (blocking fd or not: waits with poll on EAGAIN; retries EINTR).
// Returns false with errno set when the write fails (e.g. EPIPE).
bool write_all(int fd, const void* data, std::size_t size);

}  // namespace rmp::launcher
