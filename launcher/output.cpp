// Line forwarding of rank output (output.hpp).
#include "launcher/output.hpp"

#include "launcher/fd.hpp"

namespace rmp::launcher {

void OutputSink::write(std::string_view data) {
  if (broken_ || data.empty()) return;
  if (!write_all(fd_, data.data(), data.size())) broken_ = true;
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
  sink_->write(batch);
}

void LineForwarder::finish() {
  if (pending_.empty()) return;
  std::string rest = prefix_ + pending_;
  if (!prefix_.empty()) rest += '\n';
  pending_.clear();
  sink_->write(rest);
}

}  // namespace rmp::launcher
