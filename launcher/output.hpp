// Forwarding of the ranks' stdout/stderr to rlaunch's own, whole lines at a time so lines of
// different ranks never interleave mid-line, optionally prefixed "[rank] " (--tag-output).
// Memory is bounded: at most kMaxPendingLine bytes of a rank's unfinished line are held back.
// Beyond that the line is passed on in pieces of that size, each ended with a newline rlaunch
// adds (so no other rank's output is appended to it) and, with a prefix, each tagged.
#pragma once

#include <string>
#include <string_view>

namespace rmp::launcher {

// rlaunch's stdout or stderr. Once a write fails (EPIPE: `rlaunch … | head`), further output
// to it is dropped, but the ranks' pipes are still drained so no rank blocks on a full pipe.
class OutputSink {
public:
  explicit OutputSink(int fd) : fd_(fd) {}
  void write(std::string_view data);

private:
  int fd_;
  bool broken_ = false;
};

class LineForwarder {
public:
  // More than this without a newline is passed on as pieces of this size, each made a line.
  static constexpr std::size_t kMaxPendingLine = 64 * 1024;

  LineForwarder(OutputSink& sink, std::string prefix) : sink_(&sink), prefix_(std::move(prefix)) {}
  // Passes on every complete line in data; keeps the unterminated rest for later.
  void feed(std::string_view data);
  // End of the stream: passes on the unterminated rest. With a prefix a newline is added, so
  // the next tagged line starts on its own line; without one the bytes go out exactly as written.
  void finish();

private:
  OutputSink* sink_;
  std::string prefix_;
  std::string pending_;  // the unfinished line, at most kMaxPendingLine bytes between calls
};

}  // namespace rmp::launcher
