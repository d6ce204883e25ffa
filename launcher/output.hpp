// Forwarding of the ranks' stdout/stderr to rlaunch's own, whole lines at a time so lines of
// different ranks never interleave mid-line, optionally prefixed "[rank] " (--tag-output).
// Memory is bounded: at most kMaxPendingLine bytes of a rank's unfinished line are held back.
// Beyond that the line is passed on in pieces of that size, each ended with a newline rlaunch
// adds (so no other rank's output is appended to it) and, with a prefix, each tagged.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "launcher/fd.hpp"

namespace rmp::launcher {

// rlaunch's stdout or stderr. Writes never block the event loop: a reader that stalls (`| less`,
// a paused terminal, `tee` onto a slow disk) must not hold up --timeout, signals or a failed
// rank's shutdown. What the destination does not take at once is queued; past kHighWater the
// job stops reading the ranks' pipes of this stream (they then wait in write(), as in any
// pipeline) until the queue has drained (Job).
//  - Pipes, FIFOs and terminals are written through a descriptor of rlaunch's own, opened
//    anew on the same file (/proc/self/fd) and non-blocking: setting O_NONBLOCK on the one
//    rlaunch inherited would set it for the shell and every other process sharing it.
//  - Sockets: send(MSG_DONTWAIT).
//  - Regular files (and block devices) are written directly: such a write does not wait for
//    a reader, and another descriptor would have an offset of its own (`> log 2>&1` shares one).
//  - Where no descriptor of its own can be opened, a write waits for POLLOUT and writes at
//    most PIPE_BUF bytes, which a pipe with POLLOUT takes without blocking.
// A write that fails ends the sink: EPIPE (`rlaunch … | head`) makes it closed(), any other
// error (ENOSPC: `> /dev/full`) failed(); queued and later output is dropped, and the Job
// decides what follows.
class OutputSink {
public:
  static constexpr std::size_t kHighWater = 1 << 20;

  explicit OutputSink(int fd);
  // Queues data and writes what the destination takes now. `from` is the writer (a
  // LineForwarder): a line one writer left without its newline (a rank's last, at EOF) gets one
  // before another writer's output, so two ranks' lines never join.
  void write(std::string_view data, const void* from = nullptr);
  // Writes what the destination takes now; true when nothing is left queued.
  bool flush();
  // Writes everything queued, waiting for the destination as long as it takes, unless
  // `interrupt_fd` becomes readable and interrupted() then says so (the rest is dropped).
  void drain(int interrupt_fd, const std::function<bool()>& interrupted);
  // Drops what is queued, and all output from now on.
  void discard() {
    queue_.clear();
    sent_ = 0;
    discarded_ = true;
  }
  std::size_t queued() const { return queue_.size() - sent_; }
  // The descriptor to wait on for room (EPOLLOUT), or -1 where writes never wait (a file).
  int poll_fd() const { return mode_ == Mode::direct ? -1 : fd_; }
  bool closed() const { return error_ == EPIPE; }
  bool failed() const { return error_ != 0 && error_ != EPIPE; }
  int error() const { return error_; }

private:
  enum class Mode { direct, own_nonblocking, socket, poll_then_write };
  // Writes from queue_[sent_]: bytes written, 0 when the destination takes nothing now, -1 on
  // failure (error_ set).
  long write_some();

  int fd_;
  UniqueFd own_;  // the descriptor of rlaunch's own (Mode::own_nonblocking)
  Mode mode_ = Mode::direct;
  std::string queue_;
  std::size_t sent_ = 0;
  const void* mid_line_ = nullptr;  // the writer whose line the last byte left unfinished
  int error_ = 0;
  bool discarded_ = false;
};

class LineForwarder {
public:
  // More than this without a newline is passed on as pieces of this size, each made a line.
  static constexpr std::size_t kMaxPendingLine = 64 * 1024;

  LineForwarder(OutputSink& sink, std::string prefix) : sink_(&sink), prefix_(std::move(prefix)) {}
  // Passes on every complete line in data; keeps the unterminated rest for later.
  void feed(std::string_view data);
  // End of the stream: passes on the unterminated rest. With a prefix a newline is added, so
  // the next tagged line starts on its own line; without one the bytes go out exactly as
  // written (the sink ends that line only if another rank's output follows it).
  void finish();
  OutputSink& sink() const { return *sink_; }

private:
  OutputSink* sink_;
  std::string prefix_;
  std::string pending_;  // the unfinished line, at most kMaxPendingLine bytes between calls
};

}  // namespace rmp::launcher
