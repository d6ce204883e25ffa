// rlaunch's key-value store (kvs_server.hpp).
#include "launcher/kvs_server.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <algorithm>

#include "runtime/bootstrap/wire.hpp"

namespace rmp::launcher {

namespace {

using wire::ErrorReason;
using wire::Op;

// Before HELLO a peer has proven nothing: it may only send a small frame.
constexpr std::uint32_t kMaxUnauthenticatedFrame = 4096;

std::vector<std::byte> reply(Op op) { return wire::FrameWriter(op).finish(); }

std::string ms_text(std::uint32_t ms) { return std::to_string(ms) + " ms"; }

}  // namespace

struct KvsServer::Connection {
  UniqueFd fd;
  int rank = -1;  // -1 until HELLO succeeds
  std::vector<std::byte> in;
  std::vector<std::byte> out;
  std::size_t out_sent = 0;
  bool closing = false;  // answer sent, close once it is flushed; input ignored
  bool closed = false;
  bool watching_out = false;  // EPOLLOUT requested
  Wait wait = Wait::none;
  std::string key;  // of a parked get
  std::uint32_t timeout_ms = 0;
  Clock::time_point deadline;  // of a parked get or fence
};

KvsServer::KvsServer(EventLoop& loop, std::string socket_path, std::string token, int size,
                     Listener listener)
    : loop_(loop),
      path_(std::move(socket_path)),
      token_(std::move(token)),
      size_(size),
      listener_(std::move(listener)),
      fd_of_rank_(static_cast<std::size_t>(size), -1),
      exited_(static_cast<std::size_t>(size), false),
      in_fence_(static_cast<std::size_t>(size), false) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) {
    throw SystemError("socket path " + path_ + " is too long", ENAMETOOLONG);
  }
  std::copy(path_.begin(), path_.end(), addr.sun_path);
  listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) throw SystemError("socket(AF_UNIX)", errno);
  if (::bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw SystemError("bind of the store's socket " + path_, errno);
  }
  if (::listen(listen_fd_.get(), SOMAXCONN) != 0) {
    throw SystemError("listen on " + path_, errno);
  }
  loop_.add(listen_fd_.get(), EPOLLIN, [this](std::uint32_t) { accept_ready(); });
}

KvsServer::~KvsServer() {
  for (auto& [fd, c] : connections_) loop_.remove(fd);
  loop_.remove(listen_fd_.get());
}

KvsServer::Connection* KvsServer::connection_of_rank(int rank) {
  if (rank < 0 || rank >= size_) return nullptr;
  const int fd = fd_of_rank_[static_cast<std::size_t>(rank)];
  if (fd < 0) return nullptr;
  const auto it = connections_.find(fd);
  return it == connections_.end() || it->second->closed ? nullptr : it->second.get();
}

void KvsServer::accept_ready() {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN: all accepted. EMFILE and the like: the peer stays in the backlog and is
      // retried on the next wake-up; a rank blocked in connect() times out with a message.
      return;
    }
    auto c = std::make_unique<Connection>();
    c->fd.reset(fd);
    Connection* raw = c.get();
    connections_.emplace(fd, std::move(c));
    loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, raw](std::uint32_t events) {
      on_event(*raw, events);
      reap_closed();
    });
  }
}

void KvsServer::on_event(Connection& c, std::uint32_t events) {
  if (events & EPOLLOUT) flush(c);
  if (c.closed) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) read_ready(c);
}

bool KvsServer::read_ready(Connection& c) {
  std::byte chunk[16384];
  bool eof = false;
  // Bounded per wake-up so one chatty rank cannot starve the others (epoll is level-triggered:
  // the rest is read on the next round).
  for (int round = 0; round < 64; ++round) {
    const ssize_t n = ::recv(c.fd.get(), chunk, sizeof(chunk), 0);
    if (n > 0) {
      if (!c.closing) c.in.insert(c.in.end(), chunk, chunk + n);
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) eof = true;  // ECONNRESET and friends: the peer is gone
    break;
  }

  // Handle every complete frame. The client sends one request and waits for its answer, so
  // while one is parked only abort (sent from another thread of the rank) may follow.
  std::size_t used = 0;
  while (!c.closed && !c.closing && c.in.size() - used >= 4) {
    const std::uint32_t length = wire::decode_u32(c.in.data() + used);
    const std::uint32_t limit = c.rank < 0 ? kMaxUnauthenticatedFrame : wire::kMaxFrame;
    if (length < 1 || length > limit) {
      send_error(
          c, static_cast<std::uint8_t>(ErrorReason::bad_request),
          "frame length " + std::to_string(length) + " outside [1, " + std::to_string(limit) + "]");
      close_after_flush(c);
      break;
    }
    if (c.in.size() - used - 4 < length) break;
    const auto op = static_cast<std::uint8_t>(c.in[used + 4]);
    const std::span<const std::byte> body(c.in.data() + used + 5, length - 1);
    used += 4 + length;
    handle_frame(c, op, body);
  }
  if (!c.closed) c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));

  if (eof && !c.closed) close(c);
  return !c.closed;
}

void KvsServer::handle_frame(Connection& c, std::uint8_t op_byte, std::span<const std::byte> body) {
  const auto op = static_cast<Op>(op_byte);
  if (c.rank < 0 && op != Op::hello) {
    send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request),
               "the first request must be HELLO");
    close_after_flush(c);
    return;
  }
  if (c.wait != Wait::none && op != Op::abort) {
    // A second request while one is parked breaks the one-request-at-a-time rule; answering it
    // would pair replies with the wrong requests.
    send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request),
               "request sent while another is still waiting for its reply");
    close_after_flush(c);
    return;
  }
  switch (op) {
    case Op::hello:
      return handle_hello(c, body);
    case Op::put:
      return handle_put(c, body);
    case Op::get:
      return handle_get(c, body);
    case Op::fence:
      return handle_fence(c, body);
    case Op::abort: {
      wire::FrameReader r(body);
      const auto code = r.i32();
      const auto why = r.str();
      if (!code || !why) break;
      listener_.aborted(c.rank, *code, std::string(*why));
      return;
    }
    case Op::finalize:
      if (!body.empty()) break;
      send(c, reply(Op::reply_ok));
      listener_.finalized(c.rank);
      return;
    default:
      break;
  }
  send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request),
             "malformed request (opcode " + std::to_string(op_byte) + ")");
  close_after_flush(c);
}

void KvsServer::handle_hello(Connection& c, std::span<const std::byte> body) {
  wire::FrameReader r(body);
  const auto token = r.str();
  const auto rank = r.u32();
  const auto reject = [&](const std::string& why) {
    send_error(c, static_cast<std::uint8_t>(ErrorReason::rejected), why);
    close_after_flush(c);
  };
  if (!token || !rank || !r.at_end() || c.rank >= 0) return reject("malformed HELLO");
  // Token first, in constant time, and nothing else said to a peer without it.
  if (!wire::constant_time_equal(*token, token_)) return reject("wrong job token");
  if (*rank >= static_cast<std::uint32_t>(size_)) {
    return reject("rank " + std::to_string(*rank) + " is outside [0, " + std::to_string(size_) +
                  ")");
  }
  const auto index = static_cast<std::size_t>(*rank);
  if (connection_of_rank(static_cast<int>(*rank)) != nullptr) {
    return reject("rank " + std::to_string(*rank) + " is already connected");
  }
  if (exited_[index]) return reject("rank " + std::to_string(*rank) + " has already exited");
  c.rank = static_cast<int>(*rank);
  fd_of_rank_[index] = c.fd.get();
  send(c, reply(Op::reply_ok));
  listener_.hello(c.rank);
}

void KvsServer::handle_put(Connection& c, std::span<const std::byte> body) {
  wire::FrameReader r(body);
  const auto key = r.str();
  const auto value = r.bytes();
  if (!key || !value || !r.at_end()) {
    send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request), "malformed put");
    return close_after_flush(c);
  }
  auto& stored = values_[std::string(*key)];
  stored.assign(value->begin(), value->end());
  send(c, reply(Op::reply_ok));

  const auto waiting = waiting_for_key_.find(std::string(*key));
  if (waiting == waiting_for_key_.end()) return;
  const std::vector<int> fds = std::move(waiting->second);
  waiting_for_key_.erase(waiting);
  const auto answer = wire::FrameWriter(Op::reply_ok).put_bytes(stored).finish();
  for (const int fd : fds) {
    const auto it = connections_.find(fd);
    if (it == connections_.end() || it->second->closed || it->second->wait != Wait::get) continue;
    Connection& w = *it->second;
    deadlines_.erase({w.deadline, fd});
    w.wait = Wait::none;
    send(w, answer);
  }
}

void KvsServer::handle_get(Connection& c, std::span<const std::byte> body) {
  wire::FrameReader r(body);
  const auto key = r.str();
  const auto timeout_ms = r.u32();
  if (!key || !timeout_ms || !r.at_end()) {
    send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request), "malformed get");
    return close_after_flush(c);
  }
  const auto found = values_.find(std::string(*key));
  if (found != values_.end())
    return send(c, wire::FrameWriter(Op::reply_ok).put_bytes(found->second).finish());
  if (*timeout_ms == 0) return send(c, reply(Op::reply_not_found));
  c.wait = Wait::get;
  c.key = std::string(*key);
  c.timeout_ms = *timeout_ms;
  c.deadline = Clock::now() + std::chrono::milliseconds(*timeout_ms);
  deadlines_.emplace(c.deadline, c.fd.get());
  waiting_for_key_[c.key].push_back(c.fd.get());
}

void KvsServer::handle_fence(Connection& c, std::span<const std::byte> body) {
  wire::FrameReader r(body);
  const auto timeout_ms = r.u32();
  if (!timeout_ms || !r.at_end()) {
    send_error(c, static_cast<std::uint8_t>(ErrorReason::bad_request), "malformed fence");
    return close_after_flush(c);
  }
  const auto index = static_cast<std::size_t>(c.rank);
  in_fence_[index] = true;
  ++fence_count_;
  if (fence_count_ == size_) return complete_fence();

  // A rank that has exited never reaches this fence (an exited rank is never counted in one):
  // say so now rather than after the timeout.
  if (first_exited_ >= 0) {
    in_fence_[index] = false;
    --fence_count_;
    return send_error(
        c, static_cast<std::uint8_t>(ErrorReason::peer_gone),
        "rank " + std::to_string(first_exited_) + " exited without reaching the fence");
  }
  c.wait = Wait::fence;
  c.timeout_ms = *timeout_ms;
  c.deadline = Clock::now() + std::chrono::milliseconds(*timeout_ms);
  deadlines_.emplace(c.deadline, c.fd.get());
}

void KvsServer::complete_fence() {
  const auto ok = reply(Op::reply_ok);
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!in_fence_[i]) continue;
    in_fence_[i] = false;
    Connection* c = connection_of_rank(r);
    if (c == nullptr) continue;
    if (c->wait == Wait::fence) deadlines_.erase({c->deadline, c->fd.get()});
    c->wait = Wait::none;
    send(*c, ok);
  }
  fence_count_ = 0;
}

std::string KvsServer::missing_fence_ranks() const {
  constexpr int kShown = 8;  // enough to act on; the count says how many more
  std::string list;
  int missing = 0;
  for (int r = 0; r < size_; ++r) {
    if (in_fence_[static_cast<std::size_t>(r)]) continue;
    if (missing++ < kShown) list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (missing > kShown) list += " and " + std::to_string(missing - kShown) + " more";
  return list;
}

void KvsServer::fail_fence_waiters(const std::string& message) {
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!in_fence_[i]) continue;
    in_fence_[i] = false;
    Connection* c = connection_of_rank(r);
    if (c == nullptr || c->wait != Wait::fence) continue;
    deadlines_.erase({c->deadline, c->fd.get()});
    c->wait = Wait::none;
    send_error(*c, static_cast<std::uint8_t>(ErrorReason::peer_gone), message);
  }
  fence_count_ = 0;
}

void KvsServer::notify_peer_failed(int rank, const std::string& message) {
  const auto frame = wire::FrameWriter(Op::peer_failed)
                         .put_u32(static_cast<std::uint32_t>(rank))
                         .put_str(message.substr(0, 4096))
                         .finish();
  for (int r = 0; r < size_; ++r) {
    if (r == rank || exited_[static_cast<std::size_t>(r)]) continue;
    if (Connection* c = connection_of_rank(r)) send(*c, frame);
  }
}

std::optional<Clock::time_point> KvsServer::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void KvsServer::expire(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const int fd = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    const auto it = connections_.find(fd);
    if (it == connections_.end() || it->second->closed) continue;
    Connection& c = *it->second;
    if (c.wait == Wait::get) {
      clear_wait(c);
      send(c, reply(Op::reply_not_found));
    } else if (c.wait == Wait::fence) {
      // Counted before withdrawing, so the message includes the rank that gave up.
      const std::string message = "timed out after " + ms_text(c.timeout_ms) + " with " +
                                  std::to_string(fence_count_) + " of " + std::to_string(size_) +
                                  " ranks arrived; missing: ranks " + missing_fence_ranks();
      clear_wait(c);
      send_error(c, static_cast<std::uint8_t>(ErrorReason::timeout), message);
    }
  }
  reap_closed();
}

void KvsServer::drain(int rank) {
  if (Connection* c = connection_of_rank(rank)) read_ready(*c);
  reap_closed();
}

void KvsServer::rank_exited(int rank) {
  if (rank < 0 || rank >= size_) return;
  const auto index = static_cast<std::size_t>(rank);
  exited_[index] = true;
  if (first_exited_ < 0) first_exited_ = rank;
  if (in_fence_[index]) {
    in_fence_[index] = false;
    --fence_count_;
  }
  if (fence_count_ > 0) {
    fail_fence_waiters("rank " + std::to_string(rank) + " exited without reaching the fence");
  }
  reap_closed();
}

void KvsServer::clear_wait(Connection& c) {
  if (c.wait == Wait::none) return;
  deadlines_.erase({c.deadline, c.fd.get()});
  if (c.wait == Wait::get) {
    const auto it = waiting_for_key_.find(c.key);
    if (it != waiting_for_key_.end()) {
      std::erase(it->second, c.fd.get());
      if (it->second.empty()) waiting_for_key_.erase(it);
    }
  } else if (c.rank >= 0 && in_fence_[static_cast<std::size_t>(c.rank)]) {
    in_fence_[static_cast<std::size_t>(c.rank)] = false;
    --fence_count_;
  }
  c.wait = Wait::none;
}

void KvsServer::send(Connection& c, std::vector<std::byte> frame) {
  if (c.closed) return;
  if (c.out_sent == c.out.size()) {
    c.out = std::move(frame);
    c.out_sent = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  flush(c);
}

void KvsServer::send_error(Connection& c, std::uint8_t reason, const std::string& message) {
  send(c, wire::FrameWriter(Op::reply_error).put_u8(reason).put_str(message).finish());
}

void KvsServer::flush(Connection& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      c.out_sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    return close(c);  // the peer is gone
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    if (c.closing) return close(c);
  }
  update_interest(c);
}

void KvsServer::update_interest(Connection& c) {
  if (c.closed) return;
  const bool pending = c.out_sent < c.out.size();
  if (pending == c.watching_out) return;
  c.watching_out = pending;
  loop_.modify(c.fd.get(), EPOLLIN | EPOLLRDHUP | (pending ? EPOLLOUT : 0u));
}

void KvsServer::close_after_flush(Connection& c) {
  c.closing = true;
  clear_wait(c);
  if (c.out_sent == c.out.size()) close(c);
}

void KvsServer::close(Connection& c) {
  if (c.closed) return;
  clear_wait(c);
  c.closed = true;
  loop_.remove(c.fd.get());
  if (c.rank >= 0 && fd_of_rank_[static_cast<std::size_t>(c.rank)] == c.fd.get()) {
    fd_of_rank_[static_cast<std::size_t>(c.rank)] = -1;
  }
  closed_.push_back(c.fd.get());
}

void KvsServer::reap_closed() {
  for (const int fd : closed_) connections_.erase(fd);
  closed_.clear();
}

}  // namespace rmp::launcher
