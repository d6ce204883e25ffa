// Benchmark backend over MPI (built with OpenMPI's compiler wrapper): the reference the rmp
// numbers are compared against. Only the C API is used: skip the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

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

const char* Backend::name() { return "mpi"; }

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

double Backend::wtime() { return MPI_Wtime(); }

void Backend::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this satisfies [[noreturn]]
}

}  // namespace bench
