// The bootstrap wire format shared by rlaunch (server) and the library (client). This is the
// only header the launcher shares with the messaging code.
//
// Frames on a stream socket: u32 length (little endian, bytes after this field), u8 opcode,
// then the opcode's body. Strings and blobs are u32 length + bytes. Every connection starts
// with HELLO; the server compares the token in constant time and closes on mismatch.
//
// A client has at most one request outstanding: it sends one frame and waits for its reply
// (abort excepted, which has none). The server parks a get of a missing key until some rank
// puts it or the get's timeout passes, and a fence until every rank has fenced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace rmp::wire {

// The exit status of a job (and of the aborting process) for rmp::abort(code): the low 8 bits
// of code, as a process status holds, and 1 where they are 0 (abort(0), abort(256)): an
// abort always ends the job as a failure.
constexpr int abort_exit_status(int code) {
  const int low = code & 0xff;
  return low == 0 ? 1 : low;
}

inline constexpr std::uint32_t kMaxFrame = 1u << 20;  // a frame larger than this is an error

// Request bodies → reply. Every request but abort gets exactly one reply.
enum class Op : std::uint8_t {
  hello = 1,     // str token, u32 rank       → ok | error (rejected; the server then closes)
  put = 2,       // str key, blob value       → ok
  get = 3,       // str key, u32 timeout_ms   → ok + blob | not_found (after timeout_ms)
  fence = 4,     // u32 timeout_ms            → ok once every rank has fenced | error
  abort = 5,     // i32 code, str why         → none: the launcher ends the job
  finalize = 6,  // (empty)                   → ok
  // Server → client, unsolicited, between or before replies: a rank of the job has failed
  // (u32 rank, str the launcher's line about it). rlaunch stops the job shortly after.
  peer_failed = 7,
  reply_ok = 64,
  reply_not_found = 65,
  reply_error = 66,  // u8 ErrorReason, str message
};

// Why the server refused a request; lets the client pick the rmp::Errc (a fence that timed out
// is Errc::timeout, one that can never complete because a rank has exited Errc::peer_failed).
enum class ErrorReason : std::uint8_t {
  bad_request = 1,  // malformed frame, unknown opcode, request before HELLO
  rejected = 2,     // HELLO refused: wrong token, rank out of range or already connected
  timeout = 3,      // the request's own timeout passed (fence)
  peer_gone = 4,    // a rank the request waits for has exited (fence)
};

// ---------------------------------------------------------------------------------------------
// Environment contract between rlaunch and the ranks (API.md; DESIGN §4). Named once here so
// the launcher and the client cannot disagree.

inline constexpr const char* kEnvRank = "RMP_RANK";
inline constexpr const char* kEnvSize = "RMP_SIZE";
inline constexpr const char* kEnvLocalRank = "RMP_LOCAL_RANK";
inline constexpr const char* kEnvLocalSize = "RMP_LOCAL_SIZE";
inline constexpr const char* kEnvNodeId = "RMP_NODE_ID";
// Cores rlaunch's CPU binding allows on this node: whether ranks outnumber cores is judged
// against it, not against the whole machine.
inline constexpr const char* kEnvLocalCores = "RMP_LOCAL_CORES";
// "unix:/path/to/socket" (one node); later "tcp:host:port".
inline constexpr const char* kEnvKvs = "RMP_KVS";
// The per-job secret presented in HELLO: 32 hex digits (128 bits from getrandom). Passed only
// in the environment, never on a command line (command lines are world-readable in /proc).
inline constexpr const char* kEnvJobToken = "RMP_JOB_TOKEN";
// A public per-job id, 12 hex digits, random and independent of the token: it names the job's
// shared segments (/dev/shm/rmp-<RMP_JOB_ID>-…), which any local user can list, so it must not
// reveal anything about the token. rlaunch removes leftover rmp-<id>-* segments at job end.
inline constexpr const char* kEnvJobId = "RMP_JOB_ID";
// --param values, as "key=value;..." (rlaunch sets it; the ranks read it as the command line's
// knobs).
inline constexpr const char* kEnvCliParams = "RMP_CLI_PARAMS";
// Every variable above: rlaunch sets them for each rank, so a user's value would break the job
// (rejected by -x, dropped from the inherited environment).
inline constexpr std::string_view kLauncherSetVariables[] = {
    kEnvRank, kEnvSize,     kEnvLocalRank, kEnvLocalSize,  kEnvNodeId,
    kEnvKvs,  kEnvJobToken, kEnvJobId,     kEnvLocalCores, kEnvCliParams};
inline constexpr std::string_view kKvsUnixPrefix = "unix:";
inline constexpr std::string_view kShmPrefix = "rmp-";  // + job id + "-" + anything

// ---------------------------------------------------------------------------------------------
// Encoding. Little endian regardless of host order, so a later TCP store across hosts of
// different endianness reads the same bytes.

class FrameWriter {
public:
  explicit FrameWriter(Op op) {
    buf_.resize(4);
    put_u8(static_cast<std::uint8_t>(op));
  }
  FrameWriter& put_u8(std::uint8_t v) {
    buf_.push_back(static_cast<std::byte>(v));
    return *this;
  }
  FrameWriter& put_u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
    return *this;
  }
  FrameWriter& put_i32(std::int32_t v) { return put_u32(static_cast<std::uint32_t>(v)); }
  FrameWriter& put_bytes(std::span<const std::byte> b) {
    put_u32(static_cast<std::uint32_t>(b.size()));
    buf_.insert(buf_.end(), b.begin(), b.end());
    return *this;
  }
  FrameWriter& put_str(std::string_view s) {
    return put_bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
  }
  // The finished frame, length field filled in; leaves the writer empty. The caller checks
  // size() <= 4 + kMaxFrame.
  std::vector<std::byte> finish() {
    const auto n = static_cast<std::uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i)
      buf_[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xffu);
    return std::move(buf_);
  }

private:
  std::vector<std::byte> buf_;
};

inline std::uint32_t decode_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

// Reads a frame body (the bytes after the opcode). Every getter returns nullopt when the body
// is too short, so a malformed frame is detected, never read past.
class FrameReader {
public:
  explicit FrameReader(std::span<const std::byte> body) : rest_(body) {}
  std::optional<std::uint8_t> u8() {
    if (rest_.empty()) return std::nullopt;
    auto v = static_cast<std::uint8_t>(rest_[0]);
    rest_ = rest_.subspan(1);
    return v;
  }
  std::optional<std::uint32_t> u32() {
    if (rest_.size() < 4) return std::nullopt;
    auto v = decode_u32(rest_.data());
    rest_ = rest_.subspan(4);
    return v;
  }
  std::optional<std::int32_t> i32() {
    auto v = u32();
    if (!v) return std::nullopt;
    return static_cast<std::int32_t>(*v);
  }
  std::optional<std::span<const std::byte>> bytes() {
    auto n = u32();
    if (!n || rest_.size() < *n) return std::nullopt;
    auto v = rest_.first(*n);
    rest_ = rest_.subspan(*n);
    return v;
  }
  std::optional<std::string_view> str() {
    auto b = bytes();
    if (!b) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(b->data()), b->size());
  }
  bool at_end() const { return rest_.empty(); }

private:
  std::span<const std::byte> rest_;
};

// Compares two secrets in time that depends only on their lengths, not on where they differ.
inline bool constant_time_equal(std::string_view a, std::string_view b) {
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace rmp::wire
