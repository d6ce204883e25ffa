// POSIX helpers for rlaunch (fd.hpp).
#include "launcher/fd.hpp"

#include <fcntl.h>
#include <poll.h>

namespace rmp::launcher {

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe2", errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw SystemError("fcntl(O_NONBLOCK) on fd " + std::to_string(fd), errno);
  }
}

bool write_all(int fd, const void* data, std::size_t size) {
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n >= 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      // Someone handed us a non-blocking stdout: wait for room rather than drop output.
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace rmp::launcher
