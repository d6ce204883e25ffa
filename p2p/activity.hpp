// A multi-step operation driven by the progress engine (non-blocking collectives): p2p calls
// advance() from every progress() until it reports completion, and completes the request the
// user holds. p2p knows nothing of what the steps are.
#pragma once

#include <string>

#include <rmp/rmp.hpp>

namespace rmp::detail {

class Engine;

class Activity {
public:
  virtual ~Activity() = default;
  // Moves the operation on as far as it can without blocking; true once it is complete.
  // Failures are recorded with fail(), not thrown.
  virtual bool advance(Engine& e) = 0;
  // The caller gave the operation up (its wait ended by a failed peer), and its buffers may
  // be gone: stop where it is and withdraw the receives nothing has matched yet, so that
  // nothing more lands in them. Transfers already under way run on; advance() then reports
  // completion once they are over.
  virtual void abandon(Engine& e) = 0;

  void fail(Errc code, std::string what) {
    if (failed_) return;
    failed_ = true;
    code_ = code;
    what_ = std::move(what);
  }
  bool failed() const { return failed_; }
  Errc code() const { return code_; }
  const std::string& what() const { return what_; }

private:
  bool failed_ = false;
  Errc code_ = Errc::internal;
  std::string what_;
};

}  // namespace rmp::detail
