// Bootstrap: how a rank learns who it is and exchanges small keyed blobs with its peers
// (DESIGN §4). The launcher's key-value store (over a Unix socket on one node), a singleton
// for programs started without a launcher, and an in-process store for ranks-as-threads tests
// all sit behind this one interface.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rmp::rt {

struct JobIdentity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_id = 0;
  // Cores this node's ranks may run on, as the launcher counted them within its own CPU
  // binding; 0 = not told (another launcher, a singleton): Context counts its affinity mask.
  int local_cores = 0;
  std::string job_id = "single";  // public, unique per job: names shared segments
};

// A rank of the job that failed (died, exited non-zero or without finalising), as the launcher
// reported it.
struct PeerFailure {
  int rank = -1;
  std::string message;  // the launcher's words, e.g. "rank 1 (pid 42 on h) exited with status 3"
};

class Bootstrap {
public:
  virtual ~Bootstrap() = default;
  virtual const JobIdentity& identity() const = 0;
  // Publish a value under key. Keys are short ASCII strings; values are small blobs.
  virtual void put(std::string_view key, std::span<const std::byte> value) = 0;
  // Value of key, waiting until some rank has put it (up to timeout; then Errc::timeout
  // naming the key). Never O(N): one round trip for one key.
  virtual std::vector<std::byte> get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Barrier of all ranks of the job (waits at most timeout; Errc::timeout names who is missing
  // if the store can tell).
  virtual void fence(std::chrono::milliseconds timeout) = 0;
  // Ends the whole job: the launcher stops every rank and exits with code.
  [[noreturn]] virtual void abort(int code, std::string_view why) = 0;
  // Tell the launcher this rank finalised cleanly (so an exit 0 is judged a success).
  virtual void finalize() = 0;
  // Whether the launcher has reported a failed rank; never blocks (a request under way on
  // another thread is not waited for). Stores without a launcher never report one.
  virtual std::optional<PeerFailure> poll_peer_failure() { return std::nullopt; }
};

// The launcher's store when RMP_KVS / RMP_JOB_TOKEN / RMP_RANK … are set; a singleton
// (rank 0 of 1) when none of them are; Errc::bootstrap when only some are or the store cannot
// be reached (the message says which variable or what failed).
std::unique_ptr<Bootstrap> make_bootstrap_from_environment();

// Rank 0 of 1 with a private in-memory store: what make_bootstrap_from_environment() returns
// when no launcher variable is set. abort() prints the reason to stderr and _exit()s.
std::unique_ptr<Bootstrap> make_singleton_bootstrap();

// Connects to rlaunch's store at kvs ("unix:/path") as identity.rank and presents token in
// HELLO. Errc::bootstrap naming the path and the errno text when the socket cannot be reached,
// or the launcher's reason when it refuses the HELLO.
std::unique_ptr<Bootstrap> connect_launcher_bootstrap(JobIdentity identity, std::string_view kvs,
                                                      std::string_view token);

// Ranks as threads in one process: every rank of one job shares one InProcessStore.
class InProcessStore;
std::shared_ptr<InProcessStore> make_in_process_store(int size);
std::unique_ptr<Bootstrap> make_in_process_bootstrap(std::shared_ptr<InProcessStore> store,
                                                     int rank);
// As the launcher reports a rank that died: poll_peer_failure() of every rank of `store`
// returns `failure` from now on (tests of the failure paths).
void report_peer_failure(InProcessStore& store, PeerFailure failure);

}  // namespace rmp::rt
