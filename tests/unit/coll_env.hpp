// Environment changes for the collectives' unit tests: RMP_<COLL>_ALGO and the knobs that
// thread-rank contexts read at creation. Set from the test's main thread while no rank runs.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace rmp::testing {

// Sets an environment variable for the scope, restoring the previous value afterwards.
class ScopedEnv {
public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) old_ = v;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace rmp::testing
