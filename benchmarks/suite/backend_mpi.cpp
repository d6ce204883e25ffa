// Benchmark backend over MPI: the references the rmp numbers are compared against. Compiled
// once per MPI found (OpenMPI through mpicxx.openmpi, MPICH through mpicxx.mpich). Only the C API is used: skip the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend.hpp"

namespace bench {

struct Backend::Impl {
  std::vector<MPI_Request> pending;
};

Backend::Backend(int& argc, char**& argv) : impl_(std::make_unique<Impl>()) {
  MPI_Init(&argc, &argv);
}

Backend::~Backend() { MPI_Finalize(); }

// BENCH_MPI_NAME: which MPI this object was built for ("openmpi", "mpich"; CMake sets it).
#ifndef BENCH_MPI_NAME
#define BENCH_MPI_NAME "mpi"
#endif
const char* Backend::name() { return BENCH_MPI_NAME; }

int Backend::rank() const {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Backend::size() const {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// MPI counts are int: the suite's largest message (well under 2 GiB) fits.
void Backend::send(const void* buf, std::size_t bytes, int peer, int tag) {
  MPI_Send(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
}

void Backend::recv(void* buf, std::size_t bytes, int peer, int tag) {
  MPI_Recv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

void Backend::reserve(std::size_t max_pending) { impl_->pending.reserve(max_pending); }

void Backend::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  MPI_Request r;
  MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r);
  impl_->pending.push_back(r);
}

void Backend::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  MPI_Request r;
  MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r);
  impl_->pending.push_back(r);
}

void Backend::waitall() {
  MPI_Waitall(static_cast<int>(impl_->pending.size()), impl_->pending.data(), MPI_STATUSES_IGNORE);
  impl_->pending.clear();
}

void Backend::barrier() { MPI_Barrier(MPI_COMM_WORLD); }

namespace {

MPI_Datatype to_mpi(Elem e) {
  switch (e) {
    case Elem::i8:
      return MPI_INT8_T;
    case Elem::u8:
      return MPI_UINT8_T;
    case Elem::i16:
      return MPI_INT16_T;
    case Elem::u16:
      return MPI_UINT16_T;
    case Elem::i32:
      return MPI_INT32_T;
    case Elem::u32:
      return MPI_UINT32_T;
    case Elem::i64:
      return MPI_INT64_T;
    case Elem::u64:
      return MPI_UINT64_T;
    case Elem::f32:
      return MPI_FLOAT;
    case Elem::f64:
      return MPI_DOUBLE;
    case Elem::c32:
      return MPI_C_FLOAT_COMPLEX;
    case Elem::c64:
      return MPI_C_DOUBLE_COMPLEX;
  }
  return MPI_BYTE;
}

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::land:
      return MPI_LAND;
    case ReduceOp::lor:
      return MPI_LOR;
    case ReduceOp::band:
      return MPI_BAND;
    case ReduceOp::bor:
      return MPI_BOR;
    case ReduceOp::bxor:
      return MPI_BXOR;
  }
  return MPI_SUM;
}

int count_of(std::size_t count) { return static_cast<int>(count); }

}  // namespace

void Backend::bcast(void* buf, std::size_t count, Elem e, int root) {
  MPI_Bcast(buf, count_of(count), to_mpi(e), root, MPI_COMM_WORLD);
}

void Backend::reduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op, int root) {
  MPI_Reduce(in, out, count_of(count), to_mpi(e), to_mpi(op), root, MPI_COMM_WORLD);
}

void Backend::allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op) {
  MPI_Allreduce(in, out, count_of(count), to_mpi(e), to_mpi(op), MPI_COMM_WORLD);
}

void Backend::allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op,
                        Compress c) {
  if (c == Compress::none) return allreduce(in, out, count, e, op);
  std::fprintf(stderr, "bench: MPI has no compressed allreduce (--compress is rmp only)\n");
  abort(2);
}

void Backend::comm_allreduce(NewComm how, const void* in, void* out, std::size_t count, Elem e,
                             ReduceOp op) {
  MPI_Comm c;
  if (how == NewComm::dup) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  else MPI_Comm_split(MPI_COMM_WORLD, 0, rank(), &c);
  MPI_Allreduce(in, out, count_of(count), to_mpi(e), to_mpi(op), c);
  MPI_Comm_free(&c);
}

void Backend::allgather(const void* in, void* out, std::size_t count, Elem e) {
  MPI_Allgather(in, count_of(count), to_mpi(e), out, count_of(count), to_mpi(e), MPI_COMM_WORLD);
}

void Backend::alltoall(const void* in, void* out, std::size_t count, Elem e) {
  MPI_Alltoall(in, count_of(count), to_mpi(e), out, count_of(count), to_mpi(e), MPI_COMM_WORLD);
}

void Backend::reduce_scatter_block(const void* in, void* out, std::size_t count, Elem e,
                                   ReduceOp op) {
  MPI_Reduce_scatter_block(in, out, count_of(count), to_mpi(e), to_mpi(op), MPI_COMM_WORLD);
}

void Backend::iallreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op) {
  MPI_Request r;
  MPI_Iallreduce(in, out, count_of(count), to_mpi(e), to_mpi(op), MPI_COMM_WORLD, &r);
  impl_->pending.push_back(r);
}

double Backend::wtime() { return MPI_Wtime(); }

void Backend::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this satisfies [[noreturn]]
}

}  // namespace bench
