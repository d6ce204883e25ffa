// The benchmark suite's view of a message-passing library: just enough to write OSU-style
// tests once and run them over rmp (backend_rmp.cpp) and over MPI (backend_mpi.cpp).
// Each benchmark program links exactly one backend, so calls resolve at link time: no
// virtual dispatch on the measured path, and both libraries pay the same harness cost.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace bench {

// Element types and reduction operations of the collective benchmarks (the subset of rmp's
// that MPI names the same way). Both backends map them to their own types once per call.
enum class Elem { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64, c32, c64 };

// Calls f(T{}) with the C++ element type behind `e`: one switch per call, outside any loop.
template <class F>
void with_elem(Elem e, F&& f) {
  switch (e) {
    case Elem::i8: return f(std::int8_t{});
    case Elem::u8: return f(std::uint8_t{});
    case Elem::i16: return f(std::int16_t{});
    case Elem::u16: return f(std::uint16_t{});
    case Elem::i32: return f(std::int32_t{});
    case Elem::u32: return f(std::uint32_t{});
    case Elem::i64: return f(std::int64_t{});
    case Elem::u64: return f(std::uint64_t{});
    case Elem::f32: return f(float{});
    case Elem::f64: return f(double{});
    case Elem::c32: return f(std::complex<float>{});
    case Elem::c64: return f(std::complex<double>{});
  }
}
enum class ReduceOp { sum, prod, min, max, land, lor, band, bor, bxor };
// 16-bit wire format of allreduce (--compress): rmp's Compression; MPI has none.
enum class Compress { none, fp16, bf16 };

std::size_t elem_size(Elem e);
std::string_view elem_name(Elem e);            // "double", "int32", "complex<float>", ...
std::string_view reduce_op_name(ReduceOp op);  // "sum", "max", ...
// Whether rmp (API.md) and MPI both define `op` on `e`.
bool op_applies(ReduceOp op, Elem e);

class Backend {
public:
  // Initialises the library (MPI_Init / rmp::Environment); may consume library arguments.
  Backend(int& argc, char**& argv);
  ~Backend();  // finalises the library
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  static const char* name();  // "rmp", "openmpi" or "mpich"

  int rank() const;
  int size() const;

  // Blocking transfers of raw bytes.
  void send(const void* buf, std::size_t bytes, int peer, int tag);
  void recv(void* buf, std::size_t bytes, int peer, int tag);

  // Non-blocking transfers join the backend's pending set; waitall() completes every pending
  // operation and empties the set. reserve() sizes the set up front so that posting inside a
  // timed loop never allocates.
  void reserve(std::size_t max_pending);
  void isend(const void* buf, std::size_t bytes, int peer, int tag);
  void irecv(void* buf, std::size_t bytes, int peer, int tag);
  void waitall();

  // Collectives over every rank. Counts are elements of `e`; the byte-moving collectives
  // (bcast, allgather, alltoall) also take the element type so that both libraries move the
  // same typed data. allgather/alltoall: `count` elements per rank (buffers of size() blocks);
  // reduce_scatter_block: `count` result elements per rank (`in` holds size() blocks).
  void barrier();
  void bcast(void* buf, std::size_t count, Elem e, int root);
  void reduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op, int root);
  void allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op);
  // Mixed precision (float/double with sum, min, max); rmp only: the MPI backend aborts.
  void allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op, Compress c);
  void allgather(const void* in, void* out, std::size_t count, Elem e);
  void alltoall(const void* in, void* out, std::size_t count, Elem e);
  void reduce_scatter_block(const void* in, void* out, std::size_t count, Elem e, ReduceOp op);

  // A communicator of every rank made (dup of the world, or split with one colour), an
  // allreduce on it, and the communicator freed: what a library that dups its caller's
  // communicator per call costs.
  enum class NewComm { dup, split };
  void comm_allreduce(NewComm how, const void* in, void* out, std::size_t count, Elem e,
                      ReduceOp op);

  // Non-blocking allreduce: joins the pending set like isend/irecv; waitall() completes it.
  void iallreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op);

  double wtime();  // seconds

  [[noreturn]] void abort(int code);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
