// rl_probe: the program the launcher tests run under rlaunch. It links only the bootstrap client
// (runtime/bootstrap/*.cpp), so it speaks the real wire protocol to the real store without the
// messaging library. argv[1] picks a behaviour; each prints what the driver checks.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/bootstrap/wire.hpp"

namespace {

using namespace std::chrono_literals;
using rmp::rt::Bootstrap;

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
std::string text(const std::vector<std::byte>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

int arg_int(int argc, char** argv, int i, int fallback) {
  return i < argc ? std::atoi(argv[i]) : fallback;
}

[[noreturn]] void check_failed(const std::string& what) {
  std::cerr << "probe: CHECK FAILED: " << what << std::endl;
  std::exit(99);
}

void check(bool ok, const std::string& what) {
  if (!ok) check_failed(what);
}

// put/get/fence across ranks: every rank publishes an address, reads its neighbour's, waits for
// a key published late by the last rank, and fences twice.
int kvs() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  const auto& id = b->identity();
  b->put("addr-" + std::to_string(id.rank), bytes("value-of-" + std::to_string(id.rank)));
  b->fence(10s);
  const int next = (id.rank + 1) % id.size;
  check(text(b->get("addr-" + std::to_string(next), 10s)) == "value-of-" + std::to_string(next),
        "neighbour value");
  if (id.rank == id.size - 1) {
    std::this_thread::sleep_for(200ms);
    b->put("late", bytes("late-value"));
  }
  check(text(b->get("late", 10s)) == "late-value", "late value");  // parks in the server
  b->fence(10s);
  b->finalize();
  std::cout << "rank " << id.rank << " of " << id.size << " ok job " << id.job_id << " local "
            << id.local_rank << "/" << id.local_size << " node " << id.node_id << std::endl;
  return 0;
}

int get_timeout() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  try {
    b->get("never-put-key", 300ms);
    check_failed("get of a missing key returned");
  } catch (const rmp::Error& e) {
    check(e.code() == rmp::Errc::timeout, "get timeout code");
    check(std::string(e.what()).find("never-put-key") != std::string::npos,
          "message names the key");
    std::cout << "get-timeout: " << e.what() << std::endl;
  }
  b->finalize();
  return 0;
}

// Rank 0 fences alone and times out; then every rank fences and the barrier still completes
// (the timed-out rank withdrew from the first generation).
int fence_timeout() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  const auto& id = b->identity();
  if (id.rank == 0) {
    try {
      b->fence(300ms);
      check_failed("fence alone returned");
    } catch (const rmp::Error& e) {
      check(e.code() == rmp::Errc::timeout, "fence timeout code");
      std::cout << "fence-timeout: " << e.what() << std::endl;
    }
    b->put("retry", bytes("go"));
  } else {
    b->get("retry", 10s);
  }
  b->fence(10s);
  b->finalize();
  std::cout << "rank " << id.rank << " fenced" << std::endl;
  return 0;
}

// The last rank finalises and leaves; the others' next fence can never complete and must fail
// at once (Errc::peer_failed naming the rank), not after its 60 s timeout.
int fence_peer_exits() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  const auto& id = b->identity();
  b->fence(10s);
  if (id.rank == id.size - 1) {
    b->finalize();
    return 0;
  }
  try {
    b->fence(60s);
    check_failed("fence without the departed rank returned");
  } catch (const rmp::Error& e) {
    check(e.code() == rmp::Errc::peer_failed, "fence peer-gone code");
    std::cout << "fence-peer-exits: " << e.what() << std::endl;
  }
  b->finalize();
  return 0;
}

int bad_token() {
  std::string token = std::getenv("RMP_JOB_TOKEN");
  token[0] = token[0] == '0' ? '1' : '0';
  ::setenv("RMP_JOB_TOKEN", token.c_str(), 1);
  try {
    rmp::rt::make_bootstrap_from_environment();
    check_failed("wrong token accepted");
  } catch (const rmp::Error& e) {
    check(e.code() == rmp::Errc::bootstrap, "bad token code");
    std::cout << "bad-token: " << e.what() << std::endl;
  }
  return 0;
}

// Garbage before HELLO must cost the sender its connection and nothing else.
int garbage() {
  const std::string address = std::getenv("RMP_KVS");
  const std::string path = address.substr(std::strlen("unix:"));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  check(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  const unsigned char frame[] = {0xff, 0xff, 0xff, 0x7f, 2, 0, 0};  // huge length, put before HELLO
  check(::write(fd, frame, sizeof(frame)) == static_cast<ssize_t>(sizeof(frame)), "write garbage");
  char buf[256];
  ssize_t n, total = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) total += n;
  check(n == 0, "server closed the garbage connection");
  ::close(fd);
  std::cout << "garbage: closed after " << total << " reply bytes" << std::endl;
  return kvs();  // and the store still serves everyone
}

// Init, then rank `who` misbehaves while the others wait in a fence that can never complete:
// rlaunch must end the job anyway.
int fail_one(const std::string& how, int who, int code) {
  auto b = rmp::rt::make_bootstrap_from_environment();
  if (b->identity().rank == who) {
    std::this_thread::sleep_for(100ms);  // let the others reach the fence
    if (how == "crash") ::raise(SIGSEGV);
    if (how == "exit") std::_Exit(code);
    if (how == "abort") b->abort(code, "probe gave up");
    if (how == "nofinalize") std::_Exit(0);
  }
  try {
    b->fence(60s);
  } catch (const rmp::Error& e) {
    std::cout << "rank " << b->identity().rank << " fence failed: " << e.what() << std::endl;
    std::this_thread::sleep_for(30s);  // rlaunch stops us
  }
  std::this_thread::sleep_for(30s);
  return 0;
}

// Rank `who` ends with status 0 after `delay_ms` without initialising; the others initialise
// and wait in a fence that can never complete. rlaunch must end the job (the others would wait
// for the missing rank until their bootstrap timeout).
int no_init(int who, int delay_ms) {
  const char* rank = std::getenv("RMP_RANK");
  if (rank && std::atoi(rank) == who) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    return 0;
  }
  return fail_one("none", -1, 0);
}

// A rank that creates a job-named shared segment and crashes before anyone unlinks it.
int shm_leak() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  const std::string name =
      "/rmp-" + b->identity().job_id + "-probe-leak-" + std::to_string(b->identity().rank);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  check(fd >= 0, "shm_open " + name);
  std::cout << "created /dev/shm" << name << std::endl;
  b->fence(10s);
  if (b->identity().rank == 0) ::raise(SIGSEGV);
  std::this_thread::sleep_for(30s);
  return 0;
}

int affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  check(::sched_getaffinity(0, sizeof(set), &set) == 0, "sched_getaffinity");
  std::string cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  }
  std::cout << "rank " << std::getenv("RMP_RANK") << " cpus " << cpus << std::endl;
  return 0;
}

int read_stdin() {
  const std::string all{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  std::cout << "rank " << std::getenv("RMP_RANK") << " stdin " << all.size() << " bytes: [" << all
            << "]" << std::endl;
  return 0;
}

int print_env() {
  for (const char* name :
       {"RMP_RANK", "RMP_SIZE", "RMP_LOCAL_RANK", "RMP_LOCAL_SIZE", "RMP_NODE_ID",
        "RMP_LOCAL_CORES", "RMP_KVS", "RMP_JOB_TOKEN", "RMP_JOB_ID", "RMP_PROFILE",
        "RMP_CLI_PARAMS", "RMP_PRINT_PARAMS", "PROBE_X"}) {
    const char* v = std::getenv(name);
    std::cout << "rank " << (std::getenv("RMP_RANK") ? std::getenv("RMP_RANK") : "?") << " " << name
              << "=" << (v ? v : "<unset>") << std::endl;
  }
  return 0;
}

// Outside rlaunch: no variables → a singleton; some variables → an error naming the missing ones.
int singleton() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  const auto& id = b->identity();
  check(id.rank == 0 && id.size == 1 && id.local_rank == 0 && id.local_size == 1 && id.node_id == 0,
        "identity");
  check(id.job_id == "single-" + std::to_string(::getpid()), "job id " + id.job_id);
  b->put("k", bytes("v"));
  check(text(b->get("k", 1s)) == "v", "singleton get");
  b->fence(1s);
  b->finalize();
  std::cout << "singleton ok " << id.job_id << std::endl;
  return 0;
}

int partial_env() {
  try {
    rmp::rt::make_bootstrap_from_environment();
    check_failed("partial environment accepted");
  } catch (const rmp::Error& e) {
    check(e.code() == rmp::Errc::bootstrap, "partial env code");
    std::cout << "partial-env: " << e.what() << std::endl;
  }
  return 0;
}

int finalize_ok() {
  auto b = rmp::rt::make_bootstrap_from_environment();
  b->fence(10s);
  b->finalize();
  return 0;
}

int ignore_term() {
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  std::cout << "rank " << std::getenv("RMP_RANK") << " ignoring SIGTERM" << std::endl;
  std::this_thread::sleep_for(60s);
  return 0;
}

// Output without a final newline, and stderr, for the forwarding checks.
int output() {
  const std::string r = std::getenv("RMP_RANK");
  std::cout << "line one from " << r << "\nline two from " << r << "\n" << std::flush;
  std::cerr << "error line from " << r << std::endl;
  std::cout << "partial from " << r << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "kvs") return kvs();
    if (mode == "get-timeout") return get_timeout();
    if (mode == "fence-timeout") return fence_timeout();
    if (mode == "fence-peer-exits") return fence_peer_exits();
    if (mode == "bad-token") return bad_token();
    if (mode == "garbage") return garbage();
    if (mode == "crash" || mode == "exit" || mode == "abort" || mode == "nofinalize") {
      return fail_one(mode, arg_int(argc, argv, 2, 0), arg_int(argc, argv, 3, 0));
    }
    if (mode == "noinit") return no_init(arg_int(argc, argv, 2, 0), arg_int(argc, argv, 3, 0));
    if (mode == "shm-leak") return shm_leak();
    if (mode == "affinity") return affinity();
    if (mode == "stdin") return read_stdin();
    if (mode == "env") return print_env();
    if (mode == "singleton") return singleton();
    if (mode == "partial-env") return partial_env();
    if (mode == "finalize-ok") return finalize_ok();
    if (mode == "ignore-term") return ignore_term();
    if (mode == "output") return output();
  } catch (const std::exception& e) {
    std::cerr << "probe " << mode << ": " << e.what() << std::endl;
    return 98;
  }
  std::cerr << "probe: unknown mode '" << mode << "'" << std::endl;
  return 97;
}
