// Benchmark backend over rmp, written only against the public API (include/rmp/rmp.hpp).
#include <rmp/rmp.hpp>

#include <cstddef>
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

double Backend::wtime() { return rmp::wtime(); }

void Backend::abort(int code) { rmp::abort(code, "benchmark aborted"); }

}  // namespace bench
