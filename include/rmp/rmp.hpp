// rmp — MPI-style message passing. The public API: everything a user program needs.
// The contract is ../shared/API.md; templates here only map element types to type codes
// and forward to the non-template entry points implemented in the library.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rmp {

// ---------------------------------------------------------------------------------------------
// Errors

enum class Errc {
  invalid_argument,
  invalid_rank,
  invalid_tag,
  invalid_count,
  invalid_comm,
  truncate,
  peer_failed,
  timeout,
  bootstrap,
  transport,
  internal
};

const char* errc_name(Errc c) noexcept;

class Error : public std::runtime_error {
public:
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const noexcept { return code_; }

private:
  Errc code_;
};

// ---------------------------------------------------------------------------------------------
// Element types, operations

enum class Op { sum, prod, min, max, land, lor, band, bor, bxor };
enum class Compression { none, fp16, bf16 };
enum class ThreadLevel { single, funneled, serialized, multiple };

namespace detail {

// Wire/type code of an element type. Integers are identified by size and signedness, so
// `long` and `long long` of the same width reduce identically.
enum class Type : std::uint8_t { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64, c32, c64, byte };

template <class T, class... U>
inline constexpr bool one_of = (std::is_same_v<T, U> || ...);

template <class T>
inline constexpr bool is_integer_element =
    one_of<T, char, signed char, unsigned char, short, unsigned short, int, unsigned, long,
           unsigned long, long long, unsigned long long>;

template <class T>
concept Element = is_integer_element<T> ||
    one_of<T, float, double, std::complex<float>, std::complex<double>, std::byte>;

template <class T>
consteval Type type_code() {
  if constexpr (std::is_same_v<T, float>) return Type::f32;
  else if constexpr (std::is_same_v<T, double>) return Type::f64;
  else if constexpr (std::is_same_v<T, std::complex<float>>) return Type::c32;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return Type::c64;
  else if constexpr (std::is_same_v<T, std::byte>) return Type::byte;
  else {
    constexpr bool s = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1) return s ? Type::i8 : Type::u8;
    else if constexpr (sizeof(T) == 2) return s ? Type::i16 : Type::u16;
    else if constexpr (sizeof(T) == 4) return s ? Type::i32 : Type::u32;
    else return s ? Type::i64 : Type::u64;
  }
}

// Distinct, never-dereferenced storage behind rmp::in_place<T>.
template <class T>
alignas(T) inline const unsigned char in_place_anchor[sizeof(T)] = {};

struct RequestState;
class CommImpl;

// Throws Errc::invalid_argument: rmp::in_place<T> passed to `call` as `arg`, where it has no
// meaning (it would be read or written as a buffer).
[[noreturn, gnu::cold]] void refuse_in_place(const char* call, const char* arg);

}  // namespace detail

// MPI_IN_PLACE: pass rmp::in_place<T> as the input buffer where API.md allows it, and (as MPI
// does, beyond API.md's list) to:
//   gatherv (root), allgatherv: this rank's block is already at its place in `out`
//     (displs[rank]);
//   reduce_scatter: the input is the sum(counts) elements of `out`; the result is left in its
//     first counts[rank] elements.
// Elsewhere (sends, bcast, scatter(v), alltoallv, a non-root's gather(v) or reduce) it is
// refused with Errc::invalid_argument naming the call and the argument.
template <class T>
inline const T* const in_place = reinterpret_cast<const T*>(detail::in_place_anchor<T>);

inline constexpr int any_source = -1;
inline constexpr int any_tag = -1;
inline constexpr int undefined = -32766;
inline constexpr int tag_ub = (1 << 30) - 1;

// ---------------------------------------------------------------------------------------------
// Status and requests

struct Status {
  int source = any_source;
  int tag = any_tag;
  std::size_t bytes = 0;  // bytes actually received
  template <class T>
  std::size_t count() const {
    return bytes / sizeof(T);
  }
};

// Move-only handle of a non-blocking operation. Destroying an active request never blocks:
// an unmatched receive is cancelled, anything else completes in the background.
class Request {
public:
  Request() = default;
  Request(Request&& o) noexcept : state_(o.state_) { o.state_ = nullptr; }
  Request& operator=(Request&& o) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  Status wait();
  std::optional<Status> test();
  bool cancel();  // receives only; true if cancelled before matching
  bool active() const { return state_ != nullptr; }

  // Internal: the library's operation state behind this handle.
  explicit Request(detail::RequestState* s) : state_(s) {}
  detail::RequestState* state_for_internal_use() const { return state_; }

private:
  detail::RequestState* state_ = nullptr;
};

void wait_all(std::span<Request> reqs);
std::size_t wait_any(std::span<Request> reqs, Status* st = nullptr);
bool test_all(std::span<Request> reqs);

// ---------------------------------------------------------------------------------------------
// Communicators

class Comm {
public:
  Comm();
  ~Comm();
  Comm(const Comm&);
  Comm(Comm&&) noexcept;
  Comm& operator=(const Comm&);
  Comm& operator=(Comm&&) noexcept;

  int rank() const;
  int size() const;
  Comm dup() const;
  Comm split(int color, int key) const;
  bool valid() const;

  // point to point
  template <detail::Element T>
  void send(const T* buf, std::size_t count, int dest, int tag) const {
    if (buf == in_place<T>) detail::refuse_in_place("send", "buf");
    send_(buf, count, sizeof(T), detail::type_code<T>(), dest, tag, false);
  }
  template <detail::Element T>
  void ssend(const T* buf, std::size_t count, int dest, int tag) const {
    if (buf == in_place<T>) detail::refuse_in_place("ssend", "buf");
    send_(buf, count, sizeof(T), detail::type_code<T>(), dest, tag, true);
  }
  template <detail::Element T>
  Status recv(T* buf, std::size_t count, int source, int tag) const {
    return recv_(buf, count, sizeof(T), detail::type_code<T>(), source, tag);
  }
  template <detail::Element T>
  Request isend(const T* buf, std::size_t count, int dest, int tag) const {
    if (buf == in_place<T>) detail::refuse_in_place("isend", "buf");
    return isend_(buf, count, sizeof(T), detail::type_code<T>(), dest, tag);
  }
  template <detail::Element T>
  Request irecv(T* buf, std::size_t count, int source, int tag) const {
    return irecv_(buf, count, sizeof(T), detail::type_code<T>(), source, tag);
  }
  template <detail::Element T>
  Status sendrecv(const T* sbuf, std::size_t scount, int dest, int stag, T* rbuf,
                  std::size_t rcount, int source, int rtag) const {
    if (sbuf == in_place<T>) detail::refuse_in_place("sendrecv", "sbuf");
    return sendrecv_(sbuf, scount, dest, stag, rbuf, rcount, source, rtag, sizeof(T),
                     detail::type_code<T>());
  }
  // std::span conveniences
  template <detail::Element T>
  void send(std::span<const T> buf, int dest, int tag) const {
    send(buf.data(), buf.size(), dest, tag);
  }
  template <detail::Element T>
  Status recv(std::span<T> buf, int source, int tag) const {
    return recv(buf.data(), buf.size(), source, tag);
  }

  Status probe(int source, int tag) const;
  std::optional<Status> iprobe(int source, int tag) const;

  // collectives (every rank of the communicator calls them in the same order)
  void barrier() const;
  template <detail::Element T>
  void bcast(T* buf, std::size_t count, int root) const {
    bcast_(buf, buf == in_place<T>, count, sizeof(T), detail::type_code<T>(), root);
  }
  template <detail::Element T>
  void reduce(const T* in, std::type_identity_t<T>* out, std::size_t count, Op op, int root) const {
    reduce_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op, root);
  }
  template <detail::Element T>
  void allreduce(const T* in, T* out, std::size_t count, Op op) const {
    allreduce_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op,
               Compression::none, false);
  }
  template <detail::Element T>
  void allreduce(const T* in, T* out, std::size_t count, Op op, Compression c) const {
    allreduce_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op, c, true);
  }
  template <detail::Element T>
  void gather(const T* in, std::size_t count, std::type_identity_t<T>* out, int root) const {
    gather_(in, in == in_place<T>, count, out, sizeof(T), detail::type_code<T>(), root);
  }
  template <detail::Element T>
  void scatter(const std::type_identity_t<T>* in, std::size_t count, T* out, int root) const {
    scatter_(in, in == in_place<T>, count, out, sizeof(T), detail::type_code<T>(), root);
  }
  template <detail::Element T>
  void allgather(const T* in, std::size_t count, T* out) const {
    allgather_(in, in == in_place<T>, count, out, sizeof(T), detail::type_code<T>());
  }
  template <detail::Element T>
  void alltoall(const T* in, std::size_t count, T* out) const {
    alltoall_(in, in == in_place<T>, count, out, sizeof(T), detail::type_code<T>());
  }
  template <detail::Element T>
  void reduce_scatter_block(const T* in, T* out, std::size_t count, Op op) const {
    reduce_scatter_block_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op);
  }
  template <detail::Element T>
  void scan(const T* in, T* out, std::size_t count, Op op) const {
    scan_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op, false);
  }
  template <detail::Element T>
  void exscan(const T* in, T* out, std::size_t count, Op op) const {
    scan_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op, true);
  }
  template <detail::Element T>
  void gatherv(const T* in, std::size_t count, std::type_identity_t<T>* out,
               std::span<const std::size_t> counts, std::span<const std::size_t> displs,
               int root) const {
    gatherv_(in, in == in_place<T>, count, out, counts, displs, sizeof(T), detail::type_code<T>(),
             root);
  }
  template <detail::Element T>
  void scatterv(const std::type_identity_t<T>* in, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, T* out, std::size_t count, int root) const {
    scatterv_(in, in == in_place<T>, counts, displs, out, count, sizeof(T), detail::type_code<T>(),
              root);
  }
  template <detail::Element T>
  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts, Op op) const {
    reduce_scatter_(in, in == in_place<T>, out, counts, sizeof(T), detail::type_code<T>(), op);
  }
  template <detail::Element T>
  void allgatherv(const T* in, std::size_t count, T* out, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs) const {
    allgatherv_(in, in == in_place<T>, count, out, counts, displs, sizeof(T),
                detail::type_code<T>());
  }
  template <detail::Element T>
  void alltoallv(const T* in, std::span<const std::size_t> scounts,
                 std::span<const std::size_t> sdispls, T* out, std::span<const std::size_t> rcounts,
                 std::span<const std::size_t> rdispls) const {
    alltoallv_(in, in == in_place<T>, scounts, sdispls, out, rcounts, rdispls, sizeof(T),
               detail::type_code<T>());
  }

  // non-blocking collectives
  Request ibarrier() const;
  template <detail::Element T>
  Request ibcast(T* buf, std::size_t count, int root) const {
    return ibcast_(buf, buf == in_place<T>, count, sizeof(T), detail::type_code<T>(), root);
  }
  template <detail::Element T>
  Request iallreduce(const T* in, T* out, std::size_t count, Op op) const {
    return iallreduce_(in, in == in_place<T>, out, count, sizeof(T), detail::type_code<T>(), op);
  }

  // Internal: the implementation object (used by the library and its tests).
  explicit Comm(std::shared_ptr<detail::CommImpl> impl);
  detail::CommImpl* impl() const { return impl_.get(); }

private:
  using Type = detail::Type;
  using sizes = std::span<const std::size_t>;
  void send_(const void* buf, std::size_t count, std::size_t esize, Type t, int dest, int tag,
             bool sync) const;
  Status recv_(void* buf, std::size_t count, std::size_t esize, Type t, int source, int tag) const;
  Request isend_(const void* buf, std::size_t count, std::size_t esize, Type t, int dest,
                 int tag) const;
  Request irecv_(void* buf, std::size_t count, std::size_t esize, Type t, int source,
                 int tag) const;
  Status sendrecv_(const void* sbuf, std::size_t scount, int dest, int stag, void* rbuf,
                   std::size_t rcount, int source, int rtag, std::size_t esize, Type t) const;
  // `inplace` where in_place has no meaning: the call refuses it (Errc::invalid_argument).
  void bcast_(void* buf, bool inplace, std::size_t count, std::size_t esize, Type t,
              int root) const;
  void reduce_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
               Type t, Op op, int root) const;
  void allreduce_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
                  Type t, Op op, Compression c, bool explicit_compression) const;
  void gather_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
               Type t, int root) const;
  void scatter_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                Type t, int root) const;
  void allgather_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                  Type t) const;
  void alltoall_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                 Type t) const;
  void reduce_scatter_block_(const void* in, bool inplace, void* out, std::size_t count,
                             std::size_t esize, Type t, Op op) const;
  void scan_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize, Type t,
             Op op, bool exclusive) const;
  void gatherv_(const void* in, bool inplace, std::size_t count, void* out, sizes counts,
                sizes displs, std::size_t esize, Type t, int root) const;
  void scatterv_(const void* in, bool inplace, sizes counts, sizes displs, void* out,
                 std::size_t count, std::size_t esize, Type t, int root) const;
  void reduce_scatter_(const void* in, bool inplace, void* out, sizes counts, std::size_t esize,
                       Type t, Op op) const;
  void allgatherv_(const void* in, bool inplace, std::size_t count, void* out, sizes counts,
                   sizes displs, std::size_t esize, Type t) const;
  void alltoallv_(const void* in, bool inplace, sizes scounts, sizes sdispls, void* out,
                  sizes rcounts, sizes rdispls, std::size_t esize, Type t) const;
  Request ibcast_(void* buf, bool inplace, std::size_t count, std::size_t esize, Type t,
                  int root) const;
  Request iallreduce_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
                      Type t, Op op) const;

  std::shared_ptr<detail::CommImpl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Environment

class Environment {
public:
  Environment();
  Environment(int& argc, char**& argv);
  Environment(int& argc, char**& argv, ThreadLevel required);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ThreadLevel thread_level() const;

private:
  explicit Environment(ThreadLevel required);
  ThreadLevel level_ = ThreadLevel::serialized;
};

Comm& world();
double wtime();
[[noreturn]] void abort(int code, std::string_view why = {});
bool initialized();
bool finalized();

// ---------------------------------------------------------------------------------------------
// Tuning (inspection)

struct ParamInfo {
  std::string name;
  std::string value;
  std::string unit;
  std::string source;  // default | profile | formula | calibrated | env | cli
};
std::vector<ParamInfo> effective_params(std::string_view transport = {});

}  // namespace rmp
