// Line forwarding of rank output (output.hpp).
#include "launcher/output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <algorithm>
#include <climits>
#include <string>

namespace rmp::launcher {

OutputSink::OutputSink(int fd) : fd_(fd) {
  struct stat st {};
  // Unknown (a closed descriptor): written directly, and the first write reports the error.
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return;
  if (S_ISSOCK(st.st_mode)) {
    mode_ = Mode::socket;
    return;
  }
  if (const int flags = ::fcntl(fd, F_GETFL); flags >= 0 && (flags & O_NONBLOCK) != 0) {
    mode_ = Mode::own_nonblocking;  // handed over non-blocking already: nothing to change
    return;
  }
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  own_.reset(::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (own_) {
    fd_ = own_.get();
    mode_ = Mode::own_nonblocking;
  } else {
    mode_ = Mode::poll_then_write;  // no /proc, or a file that cannot be opened again
  }
}

long OutputSink::write_some() {
  const char* p = queue_.data() + sent_;
  const std::size_t n = queue_.size() - sent_;
  if (mode_ == Mode::direct) {  // waits as long as the file takes (write_all: EAGAIN polls)
    if (write_all(fd_, p, n)) return static_cast<long>(n);
    error_ = errno;
    return -1;
  }
  for (;;) {
    ssize_t w;
    if (mode_ == Mode::socket) {
      w = ::send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else if (mode_ == Mode::poll_then_write) {
      pollfd pfd{fd_, POLLOUT, 0};
      const int ready = ::poll(&pfd, 1, 0);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) return 0;
      // POLLOUT on a pipe: a free page, which a write of PIPE_BUF bytes at most fills without
      // waiting. (POLLERR or POLLHUP: the write below reports it.)
      w = ::write(fd_, p, std::min<std::size_t>(n, PIPE_BUF));
    } else {
      w = ::write(fd_, p, n);
    }
    if (w >= 0) return static_cast<long>(w);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    error_ = errno;
    return -1;
  }
}

bool OutputSink::flush() {
  while (error_ == 0 && sent_ < queue_.size()) {
    const long n = write_some();
    if (n <= 0) break;
    sent_ += static_cast<std::size_t>(n);
  }
  if (error_ != 0 || sent_ == queue_.size()) {
    queue_.clear();
    sent_ = 0;
  } else if (sent_ >= kHighWater / 2) {  // keep the queue's front from growing without bound
    queue_.erase(0, sent_);
    sent_ = 0;
  }
  return queue_.empty();
}

void OutputSink::write(std::string_view data, const void* from) {
  if (error_ != 0 || discarded_ || data.empty()) return;
  if (mid_line_ != nullptr && mid_line_ != from) queue_ += '\n';
  mid_line_ = data.back() == '\n' ? nullptr : from;
  queue_.append(data);
  flush();
}

void OutputSink::drain(int interrupt_fd, const std::function<bool()>& interrupted) {
  while (!flush()) {
    pollfd fds[2] = {{fd_, POLLOUT, 0}, {interrupt_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if ((fds[1].revents & POLLIN) != 0 && interrupted()) return discard();
  }
}

void LineForwarder::feed(std::string_view data) {
  std::string batch;  // one write() for everything complete in this chunk
  // Lines that start and end within `data` are no longer than it (a read: at most 64 KiB).
  const auto first = data.find('\n');
  if (prefix_.empty() && data.size() <= kMaxPendingLine + 1 &&
      (first == std::string_view::npos || pending_.size() + first <= kMaxPendingLine)) {
    // Untagged, and no line longer than a piece: no per-line work, everything up to the last
    // newline goes out as it is.
    const auto last = data.rfind('\n');
    if (last != std::string_view::npos) {
      batch.reserve(pending_.size() + last + 1);
      batch += pending_;
      batch.append(data.substr(0, last + 1));
      pending_.clear();
      data.remove_prefix(last + 1);
    }
  } else {
    for (auto nl = data.find('\n'); nl != std::string_view::npos; nl = data.find('\n')) {
      if (pending_.size() + nl <= kMaxPendingLine) {
        batch += prefix_;
        batch += pending_;
        batch.append(data.substr(0, nl + 1));
      } else {  // a line longer than a piece (the unfinished part and its end): in pieces
        pending_.append(data.substr(0, nl));
        for (std::size_t at = 0; at < pending_.size(); at += kMaxPendingLine) {
          batch += prefix_;
          batch.append(pending_, at, kMaxPendingLine);
          batch += '\n';
        }
      }
      pending_.clear();
      data.remove_prefix(nl + 1);
    }
  }
  pending_.append(data);
  // Bounded memory. A piece of a line that went out without its own newline would have the
  // next rank's output appended to it (and, tagged, a continuation without its tag).
  std::size_t passed = 0;
  while (pending_.size() - passed > kMaxPendingLine) {
    batch += prefix_;
    batch.append(pending_, passed, kMaxPendingLine);
    batch += '\n';
    passed += kMaxPendingLine;
  }
  pending_.erase(0, passed);
  sink_->write(batch, this);
}

void LineForwarder::finish() {
  if (pending_.empty()) return;
  std::string rest = prefix_ + pending_;
  if (!prefix_.empty()) rest += '\n';
  pending_.clear();
  sink_->write(rest, this);
}

}  // namespace rmp::launcher
