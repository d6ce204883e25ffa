// rlaunch's key-value store (DESIGN §4): a Unix stream socket, one connection per rank, the
// frames of runtime/bootstrap/wire.hpp. A get of a missing key parks until some rank puts it or
// the get's own timeout passes; a fence parks until every rank has fenced. Everything runs on
// the launcher's event loop; nothing here blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "launcher/event_loop.hpp"
#include "launcher/fd.hpp"

namespace rmp::launcher {

class KvsServer {
public:
  // What the job needs to hear about (all called from inside the event loop).
  struct Listener {
    std::function<void(int rank)> hello;
    std::function<void(int rank)> finalized;
    std::function<void(int rank, int code, std::string why)> aborted;
  };

  // Listens on socket_path (which must not exist); ranks are 0 … size-1.
  KvsServer(EventLoop& loop, std::string socket_path, std::string token, int size,
            Listener listener);
  ~KvsServer();
  KvsServer(const KvsServer&) = delete;
  KvsServer& operator=(const KvsServer&) = delete;

  // The nearest deadline of a parked request, for the loop's wait.
  std::optional<Clock::time_point> next_deadline() const;
  // Answers parked requests whose timeout has passed.
  void expire(Clock::time_point now);
  // Reads and handles whatever rank's connection has buffered. Called before judging a rank
  // that has exited, so a finalize or abort it sent just before exiting is not missed.
  void drain(int rank);
  // rank's process has exited: a fence it has not reached can never complete.
  void rank_exited(int rank);
  // Tells every other connected rank that `rank` failed (a peer_failed frame, ahead of any
  // reply), so that a call waiting for it ends with Errc::peer_failed.
  void notify_peer_failed(int rank, const std::string& message);

private:
  struct Connection;
  enum class Wait : std::uint8_t { none, get, fence };

  void accept_ready();
  void on_event(Connection& c, std::uint32_t events);
  bool read_ready(Connection& c);  // false when the connection was closed
  void handle_frame(Connection& c, std::uint8_t op, std::span<const std::byte> body);
  void handle_hello(Connection& c, std::span<const std::byte> body);
  void handle_put(Connection& c, std::span<const std::byte> body);
  void handle_get(Connection& c, std::span<const std::byte> body);
  void handle_fence(Connection& c, std::span<const std::byte> body);
  void complete_fence();
  void fail_fence_waiters(const std::string& message);
  void send(Connection& c, std::vector<std::byte> frame);
  void send_error(Connection& c, std::uint8_t reason, const std::string& message);
  void flush(Connection& c);
  void close_after_flush(Connection& c);
  void close(Connection& c);
  void clear_wait(Connection& c);
  void update_interest(Connection& c);
  Connection* connection_of_rank(int rank);
  std::string missing_fence_ranks() const;

  EventLoop& loop_;
  std::string path_;
  std::string token_;
  int size_;
  Listener listener_;
  UniqueFd listen_fd_;

  std::unordered_map<int, std::unique_ptr<Connection>> connections_;  // by fd
  std::vector<int> fd_of_rank_;  // -1 while the rank has no connection
  std::vector<bool> exited_;     // the rank's process is gone

  std::unordered_map<std::string, std::vector<std::byte>> values_;
  std::unordered_map<std::string, std::vector<int>> waiting_for_key_;  // key → fds of parked gets
  std::set<std::pair<Clock::time_point, int>> deadlines_;              // parked request → fd

  std::vector<bool> in_fence_;  // by rank, current generation
  int fence_count_ = 0;
  int first_exited_ = -1;  // some rank whose process has exited, for messages

  // Closed connections stay allocated (and their fd open) until the current event is handled,
  // so code further up the stack never touches a freed Connection or a reused fd.
  std::vector<int> closed_;
  void reap_closed();
};

}  // namespace rmp::launcher
