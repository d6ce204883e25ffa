// In-memory bootstraps: ranks as threads sharing one InProcessStore (unit tests, after Gloo's
// spawnThreads), and the singleton — a store of one rank — for programs started without a
// launcher. Both keep keys in a map under a mutex; get and fence wait on a condition variable.
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/bootstrap/wire.hpp"

namespace rmp::rt {

class InProcessStore {
public:
  InProcessStore(int size, std::string job_id) : size_(size), job_id_(std::move(job_id)) {}

  int size() const { return size_; }
  const std::string& job_id() const { return job_id_; }

  void put(std::string_view key, std::span<const std::byte> value) {
    {
      std::lock_guard lock(mutex_);
      values_.insert_or_assign(std::string(key),
                               std::vector<std::byte>(value.begin(), value.end()));
    }
    changed_.notify_all();
  }

  std::vector<std::byte> get(std::string_view key, std::chrono::milliseconds timeout, int rank) {
    const auto deadline = std::chrono::steady_clock::now() + clamp(timeout);
    std::unique_lock lock(mutex_);
    auto found = values_.end();
    const bool ok = changed_.wait_until(lock, deadline, [&] {
      found = values_.find(key);
      return found != values_.end();
    });
    if (!ok) {
      throw Error(Errc::timeout, "bootstrap get: key '" + std::string(key) +
                                     "' was not put within " + std::to_string(timeout.count()) +
                                     " ms (rank " + std::to_string(rank) + " of in-process job " +
                                     job_id_ + ")");
    }
    return found->second;
  }

  // A generation barrier: the last rank to arrive starts the next generation and wakes the
  // others. A rank that times out withdraws, so later fences still count correctly.
  void fence(std::chrono::milliseconds timeout, int rank) {
    const auto deadline = std::chrono::steady_clock::now() + clamp(timeout);
    std::unique_lock lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      lock.unlock();
      changed_.notify_all();
      return;
    }
    if (changed_.wait_until(lock, deadline, [&] { return generation_ != generation; })) return;
    const int arrived = arrived_;
    --arrived_;
    throw Error(Errc::timeout, "bootstrap fence: timed out after " +
                                   std::to_string(timeout.count()) + " ms with " +
                                   std::to_string(arrived) + " of " + std::to_string(size_) +
                                   " ranks arrived (rank " + std::to_string(rank) +
                                   " of in-process job " + job_id_ + ")");
  }

  // As the launcher would: every rank's poll_peer_failure() reports `f` from now on.
  void report_peer_failure(PeerFailure f) {
    std::lock_guard lock(mutex_);
    failure_ = std::move(f);
  }
  std::optional<PeerFailure> peer_failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

private:
  // steady_clock::now() + milliseconds::max() overflows; a day is "forever" for a bootstrap.
  static std::chrono::milliseconds clamp(std::chrono::milliseconds t) {
    constexpr std::chrono::milliseconds kForever = std::chrono::hours(24);
    if (t < std::chrono::milliseconds(0)) return std::chrono::milliseconds(0);
    return t > kForever ? kForever : t;
  }

  const int size_;
  const std::string job_id_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<std::byte>, std::less<>> values_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::optional<PeerFailure> failure_;
};

namespace {

enum class AbortAction {
  throw_error,   // threads of one process: ending "the job" would end the test runner too
  exit_process,  // singleton: the job is this process
};

class InProcessBootstrap final : public Bootstrap {
public:
  InProcessBootstrap(std::shared_ptr<InProcessStore> store, JobIdentity identity,
                     AbortAction on_abort)
      : store_(std::move(store)), identity_(std::move(identity)), on_abort_(on_abort) {}

  const JobIdentity& identity() const override { return identity_; }

  void put(std::string_view key, std::span<const std::byte> value) override {
    store_->put(key, value);
  }

  std::vector<std::byte> get(std::string_view key, std::chrono::milliseconds timeout) override {
    return store_->get(key, timeout, identity_.rank);
  }

  void fence(std::chrono::milliseconds timeout) override { store_->fence(timeout, identity_.rank); }

  [[noreturn]] void abort(int code, std::string_view why) override {
    const std::string message = "rmp: rank " + std::to_string(identity_.rank) + " called abort(" +
                                std::to_string(code) + "): " + std::string(why);
    if (on_abort_ == AbortAction::throw_error) throw Error(Errc::internal, message);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    // Same rule as rlaunch: an abort never reads as success, even abort(0).
    _exit(wire::abort_exit_status(code));
  }

  void finalize() override {}
  std::optional<PeerFailure> poll_peer_failure() override { return store_->peer_failure(); }

private:
  std::shared_ptr<InProcessStore> store_;
  JobIdentity identity_;
  AbortAction on_abort_;
};

}  // namespace

std::shared_ptr<InProcessStore> make_in_process_store(int size) {
  if (size < 1) {
    throw Error(Errc::invalid_argument,
                "make_in_process_store: size must be at least 1, got " + std::to_string(size));
  }
  // Unique per store within the process and across processes, so concurrent tests never share
  // segment names.
  static std::atomic<unsigned> counter{0};
  return std::make_shared<InProcessStore>(
      size, "t" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1)));
}

void report_peer_failure(InProcessStore& store, PeerFailure failure) {
  store.report_peer_failure(std::move(failure));
}

// abort() on this bootstrap throws Error(Errc::internal) instead of ending the process: the
// "job" is a set of threads inside a test runner, and there is no process of its own to end.
std::unique_ptr<Bootstrap> make_in_process_bootstrap(std::shared_ptr<InProcessStore> store,
                                                     int rank) {
  if (!store) throw Error(Errc::invalid_argument, "make_in_process_bootstrap: store is null");
  if (rank < 0 || rank >= store->size()) {
    throw Error(Errc::invalid_rank, "make_in_process_bootstrap: rank " + std::to_string(rank) +
                                        " is outside [0, " + std::to_string(store->size()) + ")");
  }
  JobIdentity id;
  id.rank = rank;
  id.size = store->size();
  id.local_rank = rank;
  id.local_size = store->size();
  id.node_id = 0;
  id.job_id = store->job_id();
  return std::make_unique<InProcessBootstrap>(std::move(store), std::move(id),
                                              AbortAction::throw_error);
}

std::unique_ptr<Bootstrap> make_singleton_bootstrap() {
  JobIdentity id;  // rank 0 of 1, local 0 of 1, node 0
  id.job_id = "single-" + std::to_string(getpid());
  auto store = std::make_shared<InProcessStore>(1, id.job_id);
  return std::make_unique<InProcessBootstrap>(std::move(store), std::move(id),
                                              AbortAction::exit_process);
}

}  // namespace rmp::rt
