// The two ways rlaunch itself fails: a bad command line (exit 2, with a usage hint) and a failed
// system call (exit 1). Failures of ranks are not exceptions; the job reports them.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace rmp::launcher {

// A bad command line; what() is the message without the "rlaunch: " prefix.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A value the ranks would refuse (an RMP_ variable, a --param value): the message names the
// setting and its allowed values, so no usage hint follows it. Exit status 2 as for usage.
class SettingsError : public UsageError {
public:
  using UsageError::UsageError;
};

// A failed system call: what() names the call, what was attempted and the errno text.
class SystemError : public std::runtime_error {
public:
  SystemError(const std::string& what, int err)
      : std::runtime_error(what + ": " + std::strerror(err)), err_(err) {}
  int err() const noexcept { return err_; }

private:
  int err_;
};

}  // namespace rmp::launcher
