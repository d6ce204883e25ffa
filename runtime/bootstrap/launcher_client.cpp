// The client side of rlaunch's key-value store: one Unix stream socket per rank, one request in
// flight at a time (wire.hpp). Waiting for a missing key or for a fence happens in the server,
// which replies when the key appears, when every rank has fenced, or when the request's own
// timeout passes; the client adds a margin on top so a stalled launcher still cannot hang it.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/bootstrap/wire.hpp"

namespace rmp::rt {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a request without its own timeout (hello, put, finalize) may wait for its reply.
// The server answers these at once; a launcher silent this long is stuck or gone.
constexpr milliseconds kRequestTimeout = std::chrono::seconds(60);
// Margin over a get's or fence's own timeout: the server replies at that timeout, this only
// covers a launcher that stopped serving.
constexpr milliseconds kReplyMargin = std::chrono::seconds(10);
// After sending abort, how long to wait for rlaunch to stop this process before leaving on our
// own (rlaunch normally SIGTERMs every rank within milliseconds).
constexpr milliseconds kAbortWait = std::chrono::seconds(10);

std::string errno_text(int err) { return std::strerror(err); }

class Socket {
public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
};

std::uint32_t to_wire_ms(milliseconds t) {
  if (t.count() <= 0) return 0;
  constexpr auto kMax = std::numeric_limits<std::uint32_t>::max();
  return t.count() >= static_cast<long long>(kMax) ? kMax : static_cast<std::uint32_t>(t.count());
}

struct Reply {
  wire::Op op;
  std::vector<std::byte> body;
};

class LauncherBootstrap final : public Bootstrap {
public:
  LauncherBootstrap(JobIdentity identity, std::string kvs, std::string path)
      : identity_(std::move(identity)), kvs_(std::move(kvs)), path_(std::move(path)) {}

  void connect_and_hello(std::string_view token) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path_.empty() || path_.size() >= sizeof(addr.sun_path)) {
      throw Error(Errc::bootstrap, "bootstrap: " + std::string(wire::kEnvKvs) + "='" + kvs_ +
                                       "': socket path is empty or longer than " +
                                       std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
    }
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.get() < 0) fail_errno("socket() for", errno);
    int rc = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINTR) {
      // The connection attempt continues in the background: wait for it, then read its result.
      pollfd p{s.get(), POLLOUT, 0};
      while ((rc = ::poll(&p, 1, static_cast<int>(kRequestTimeout.count()))) < 0 &&
             errno == EINTR) {
      }
      int err = rc == 0 ? ETIMEDOUT : 0;
      socklen_t len = sizeof(err);
      if (rc > 0) ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) fail_errno("connect to", errno);
    fd_ = std::move(s);

    const auto reply = request(wire::FrameWriter(wire::Op::hello)
                                   .put_str(token)
                                   .put_u32(static_cast<std::uint32_t>(identity_.rank))
                                   .finish(),
                               "hello", Clock::now() + kRequestTimeout);
    if (reply.op == wire::Op::reply_ok) return;
    throw Error(Errc::bootstrap, "bootstrap: launcher at " + kvs_ + " rejected rank " +
                                     std::to_string(identity_.rank) + ": " + error_text(reply));
  }

  const JobIdentity& identity() const override { return identity_; }

  void put(std::string_view key, std::span<const std::byte> value) override {
    const auto reply =
        request(wire::FrameWriter(wire::Op::put).put_str(key).put_bytes(value).finish(),
                "put of key '" + std::string(key) + "'", Clock::now() + kRequestTimeout);
    expect_ok(reply, "put of key '" + std::string(key) + "'");
  }

  std::vector<std::byte> get(std::string_view key, milliseconds timeout) override {
    const std::string what = "get of key '" + std::string(key) + "'";
    const auto reply =
        request(wire::FrameWriter(wire::Op::get).put_str(key).put_u32(to_wire_ms(timeout)).finish(),
                what, Clock::now() + clamp(timeout) + kReplyMargin);
    if (reply.op == wire::Op::reply_not_found) {
      throw Error(Errc::timeout, "bootstrap get: key '" + std::string(key) +
                                     "' was not put within " + std::to_string(timeout.count()) +
                                     " ms (rank " + std::to_string(identity_.rank) + ", launcher " +
                                     kvs_ + ")");
    }
    expect_ok(reply, what);
    wire::FrameReader r(reply.body);
    auto value = r.bytes();
    if (!value || !r.at_end()) protocol_error(what);
    return {value->begin(), value->end()};
  }

  void fence(milliseconds timeout) override {
    const auto reply =
        request(wire::FrameWriter(wire::Op::fence).put_u32(to_wire_ms(timeout)).finish(), "fence",
                Clock::now() + clamp(timeout) + kReplyMargin);
    if (reply.op == wire::Op::reply_error) {
      wire::FrameReader r(reply.body);
      const auto reason = r.u8();
      const auto message = r.str();
      if (!reason || !message) protocol_error("fence");
      const auto why = static_cast<wire::ErrorReason>(*reason);
      const auto errc = why == wire::ErrorReason::timeout     ? Errc::timeout
                        : why == wire::ErrorReason::peer_gone ? Errc::peer_failed
                                                              : Errc::bootstrap;
      throw Error(errc, "bootstrap fence (rank " + std::to_string(identity_.rank) +
                            "): " + std::string(*message));
    }
    expect_ok(reply, "fence");
  }

  [[noreturn]] void abort(int code, std::string_view why) override {
    const int status = wire::abort_exit_status(code);  // an abort never reads as success
    bool sent = false;
    {
      // Only the send lock: another thread may sit in get() holding request_mutex_ for minutes.
      std::lock_guard lock(send_mutex_);
      if (fd_.get() >= 0) {
        auto frame =
            wire::FrameWriter(wire::Op::abort).put_i32(code).put_str(why.substr(0, 4096)).finish();
        sent = send_all_nothrow(frame);
      }
    }
    if (!sent) {
      // rlaunch cannot print it for us, so say it here.
      std::fprintf(stderr, "rmp: rank %d called abort(%d): %.*s (launcher %s unreachable)\n",
                   identity_.rank, code, static_cast<int>(why.size()), why.data(), kvs_.c_str());
      std::fflush(stderr);
      _exit(status);
    }
    // rlaunch prints the message and stops every rank; leaving before it has read our frame
    // would let it judge us by our exit status instead. Wait for it to close or kill us.
    const auto deadline = Clock::now() + kAbortWait;
    std::byte sink[256];
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) break;
      if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) break;
      const ssize_t n = ::recv(fd_.get(), sink, sizeof(sink), 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
    _exit(status);
  }

  void finalize() override {
    const auto reply = request(wire::FrameWriter(wire::Op::finalize).finish(), "finalize",
                               Clock::now() + kRequestTimeout);
    expect_ok(reply, "finalize");
  }

  std::optional<PeerFailure> poll_peer_failure() override {
    std::unique_lock lock(request_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || failure_ || !broken_.empty()) return failure_;
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) return failure_;
    try {
      // The server writes whole frames: the rest of this one is there or about to be.
      const Reply r = read_one_frame("peer failure notice", Clock::now() + kRequestTimeout);
      if (!note_failure(r))
        protocol_error("unsolicited frame " + std::to_string(static_cast<int>(r.op)));
    } catch (const Error&) {
      // A launcher gone or a garbled stream is not a peer failure; the next request says it.
    }
    return failure_;
  }

private:
  static milliseconds clamp(milliseconds t) {
    constexpr milliseconds kForever = std::chrono::hours(24 * 50);  // beyond the u32 ms range
    if (t.count() < 0) return milliseconds(0);
    return t > kForever ? kForever : t;
  }

  [[noreturn]] void fail_errno(const std::string& what, int err) const {
    throw Error(Errc::bootstrap, "bootstrap: " + what + " launcher socket " + path_ + " (" +
                                     wire::kEnvKvs + "=" + kvs_ + ") failed: " + errno_text(err));
  }

  [[noreturn]] void protocol_error(const std::string& what) {
    broken_ = "malformed reply to " + what;
    throw Error(Errc::bootstrap,
                "bootstrap: malformed reply from launcher " + kvs_ + " to " + what);
  }

  static std::string error_text(const Reply& reply) {
    if (reply.op != wire::Op::reply_error)
      return "unexpected reply opcode " + std::to_string(static_cast<int>(reply.op));
    wire::FrameReader r(reply.body);
    (void)r.u8();
    auto message = r.str();
    return message ? std::string(*message) : std::string("(no reason given)");
  }

  void expect_ok(const Reply& reply, const std::string& what) {
    if (reply.op == wire::Op::reply_ok) return;
    if (reply.op == wire::Op::reply_error) {
      throw Error(Errc::bootstrap,
                  "bootstrap: launcher " + kvs_ + " refused " + what + ": " + error_text(reply));
    }
    protocol_error(what);
  }

  // One request/reply cycle. After any failure the stream may hold a stale reply, so the
  // connection is marked unusable rather than risk pairing a later request with it.
  Reply request(std::vector<std::byte> frame, const std::string& what, Clock::time_point deadline) {
    std::lock_guard request_lock(request_mutex_);
    if (!broken_.empty()) {
      throw Error(Errc::bootstrap, "bootstrap: cannot send " + what + " to launcher " + kvs_ +
                                       ": connection unusable after an earlier error (" + broken_ +
                                       ")");
    }
    if (frame.size() > 4 + wire::kMaxFrame) {
      throw Error(Errc::invalid_argument, "bootstrap: " + what + " is " +
                                              std::to_string(frame.size()) +
                                              " bytes, larger than the store's limit of " +
                                              std::to_string(wire::kMaxFrame) + " bytes");
    }
    {
      std::lock_guard send_lock(send_mutex_);
      if (!send_all_nothrow(frame)) {
        const int err = errno;
        broken_ = "send failed";
        if (err == EPIPE || err == ECONNRESET) closed_while(what);
        throw Error(Errc::bootstrap, "bootstrap: sending " + what + " to launcher " + kvs_ +
                                         " failed: " + errno_text(err));
      }
    }
    return read_frame(what, deadline);
  }

  // The next frame other than a peer failure notice (those are noted on the way).
  Reply read_frame(const std::string& what, Clock::time_point deadline) {
    for (;;) {
      Reply reply = read_one_frame(what, deadline);
      if (!note_failure(reply)) return reply;
    }
  }

  Reply read_one_frame(const std::string& what, Clock::time_point deadline) {
    std::byte header[5];
    recv_exact(header, sizeof(header), what, deadline);
    const std::uint32_t length = wire::decode_u32(header);
    if (length < 1 || length > wire::kMaxFrame) protocol_error(what);
    Reply reply{static_cast<wire::Op>(header[4]), std::vector<std::byte>(length - 1)};
    recv_exact(reply.body.data(), reply.body.size(), what, deadline);
    return reply;
  }

  // True when `reply` was a peer failure notice (the first one is kept).
  bool note_failure(const Reply& reply) {
    if (reply.op != wire::Op::peer_failed) return false;
    wire::FrameReader r(reply.body);
    const auto rank = r.u32();
    const auto message = r.str();
    if (!rank || !message || !r.at_end()) protocol_error("peer failure notice");
    if (!failure_) failure_ = PeerFailure{static_cast<int>(*rank), std::string(*message)};
    return true;
  }

  bool send_all_nothrow(std::span<const std::byte> data) {
    while (!data.empty()) {
      // MSG_NOSIGNAL: a library must not die of SIGPIPE or change the program's disposition.
      const ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      data = data.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }

  [[noreturn]] void closed_while(const std::string& what) {
    broken_ = "launcher closed the connection";
    throw Error(Errc::bootstrap, "bootstrap: launcher " + kvs_ + " closed the connection during " +
                                     what + " (rank " + std::to_string(identity_.rank) +
                                     "; did rlaunch exit?)");
  }

  void recv_exact(std::byte* out, std::size_t size, const std::string& what,
                  Clock::time_point deadline) {
    std::size_t got = 0;
    while (got < size) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        broken_ = "no reply to " + what;
        throw Error(Errc::timeout, "bootstrap: launcher " + kvs_ + " did not answer " + what +
                                       " in time (rank " + std::to_string(identity_.rank) + ")");
      }
      pollfd p{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
      if (rc < 0) {
        if (errno == EINTR) continue;
        broken_ = "poll failed";
        throw Error(Errc::bootstrap, "bootstrap: poll on launcher socket " + path_ +
                                         " failed: " + errno_text(errno));
      }
      if (rc == 0) continue;  // re-checks the deadline
      const ssize_t n = ::recv(fd_.get(), out + got, size - got, 0);
      if (n == 0) closed_while(what);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        const int err = errno;
        if (err == ECONNRESET) closed_while(what);
        broken_ = "recv failed";
        throw Error(Errc::bootstrap, "bootstrap: receiving the reply to " + what +
                                         " from launcher " + kvs_ + " failed: " + errno_text(err));
      }
      got += static_cast<std::size_t>(n);
    }
  }

  JobIdentity identity_;
  std::string kvs_;   // as given, for messages
  std::string path_;  // socket path
  Socket fd_;
  std::mutex request_mutex_;  // one request/reply cycle at a time
  std::mutex send_mutex_;     // whole frames on the stream, also for abort
  std::string broken_;        // why the connection is unusable; empty while it is fine
  std::optional<PeerFailure> failure_;  // the first failure the launcher reported
};

}  // namespace

std::unique_ptr<Bootstrap> connect_launcher_bootstrap(JobIdentity identity, std::string_view kvs,
                                                      std::string_view token) {
  if (!kvs.starts_with(wire::kKvsUnixPrefix)) {
    throw Error(Errc::bootstrap,
                "bootstrap: " + std::string(wire::kEnvKvs) + "='" + std::string(kvs) +
                    "' is not of the form unix:/path (the only store this build can reach)");
  }
  std::string path(kvs.substr(wire::kKvsUnixPrefix.size()));
  auto b =
      std::make_unique<LauncherBootstrap>(std::move(identity), std::string(kvs), std::move(path));
  b->connect_and_hello(token);
  return b;
}

}  // namespace rmp::rt
