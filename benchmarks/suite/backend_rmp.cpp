// Benchmark backend over rmp, written only against the public API (include/rmp/rmp.hpp).
#include <rmp/rmp.hpp>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend.hpp"

namespace bench {

struct Backend::Impl {
  std::optional<rmp::Environment> env;
  rmp::Comm world;
  std::vector<rmp::Request> pending;
};

Backend::Backend(int& argc, char**& argv) : impl_(std::make_unique<Impl>()) {
  impl_->env.emplace(argc, argv);
  impl_->world = rmp::world();
}

Backend::~Backend() {
  impl_->pending.clear();
  impl_->world = rmp::Comm();  // drop our handle before finalize
  impl_->env.reset();
}

const char* Backend::name() { return "rmp"; }

int Backend::rank() const { return impl_->world.rank(); }

int Backend::size() const { return impl_->world.size(); }

// Bytes travel as std::byte, rmp's untyped element type.
void Backend::send(const void* buf, std::size_t bytes, int peer, int tag) {
  impl_->world.send(static_cast<const std::byte*>(buf), bytes, peer, tag);
}

void Backend::recv(void* buf, std::size_t bytes, int peer, int tag) {
  impl_->world.recv(static_cast<std::byte*>(buf), bytes, peer, tag);
}

void Backend::reserve(std::size_t max_pending) { impl_->pending.reserve(max_pending); }

void Backend::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  impl_->pending.push_back(
      impl_->world.isend(static_cast<const std::byte*>(buf), bytes, peer, tag));
}

void Backend::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  impl_->pending.push_back(impl_->world.irecv(static_cast<std::byte*>(buf), bytes, peer, tag));
}

void Backend::waitall() {
  rmp::wait_all(impl_->pending);
  impl_->pending.clear();
}

void Backend::barrier() { impl_->world.barrier(); }

namespace {


rmp::Op to_rmp(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return rmp::Op::sum;
    case ReduceOp::prod:
      return rmp::Op::prod;
    case ReduceOp::min:
      return rmp::Op::min;
    case ReduceOp::max:
      return rmp::Op::max;
    case ReduceOp::land:
      return rmp::Op::land;
    case ReduceOp::lor:
      return rmp::Op::lor;
    case ReduceOp::band:
      return rmp::Op::band;
    case ReduceOp::bor:
      return rmp::Op::bor;
    case ReduceOp::bxor:
      return rmp::Op::bxor;
  }
  return rmp::Op::sum;
}

}  // namespace

void Backend::bcast(void* buf, std::size_t count, Elem e, int root) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.bcast(static_cast<T*>(buf), count, root);
  });
}

void Backend::reduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op, int root) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.reduce(static_cast<const T*>(in), static_cast<T*>(out), count, to_rmp(op), root);
  });
}

void Backend::allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.allreduce(static_cast<const T*>(in), static_cast<T*>(out), count, to_rmp(op));
  });
}

void Backend::allreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op,
                        Compress c) {
  const rmp::Compression comp = c == Compress::fp16   ? rmp::Compression::fp16
                                : c == Compress::bf16 ? rmp::Compression::bf16
                                                      : rmp::Compression::none;
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.allreduce(static_cast<const T*>(in), static_cast<T*>(out), count, to_rmp(op),
                           comp);
  });
}

void Backend::comm_allreduce(NewComm how, const void* in, void* out, std::size_t count, Elem e,
                             ReduceOp op) {
  rmp::Comm c =
      how == NewComm::dup ? impl_->world.dup() : impl_->world.split(0, impl_->world.rank());
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    c.allreduce(static_cast<const T*>(in), static_cast<T*>(out), count, to_rmp(op));
  });
}

void Backend::allgather(const void* in, void* out, std::size_t count, Elem e) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.allgather(static_cast<const T*>(in), count, static_cast<T*>(out));
  });
}

void Backend::alltoall(const void* in, void* out, std::size_t count, Elem e) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.alltoall(static_cast<const T*>(in), count, static_cast<T*>(out));
  });
}

void Backend::reduce_scatter_block(const void* in, void* out, std::size_t count, Elem e,
                                   ReduceOp op) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->world.reduce_scatter_block(static_cast<const T*>(in), static_cast<T*>(out), count,
                                      to_rmp(op));
  });
}

void Backend::iallreduce(const void* in, void* out, std::size_t count, Elem e, ReduceOp op) {
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    impl_->pending.push_back(impl_->world.iallreduce(static_cast<const T*>(in),
                                                     static_cast<T*>(out), count, to_rmp(op)));
  });
}

double Backend::wtime() { return rmp::wtime(); }

void Backend::abort(int code) { rmp::abort(code, "benchmark aborted"); }

}  // namespace bench
