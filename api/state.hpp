// Process-wide state behind the public API: the default context, its engine and the world
// communicator (the one global of STYLE.md), plus argument checks shared by the API files.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <rmp/rmp.hpp>

#include "p2p/engine.hpp"

namespace rmp::api {

struct Process {
  std::unique_ptr<rt::Context> context;
  std::unique_ptr<detail::Engine> engine;
  Comm world;
  bool initialized = false;
  bool finalized = false;
  ThreadLevel provided = ThreadLevel::serialized;
};
extern Process g_process;
inline Process& process() { return g_process; }

// Throws invalid_comm for a null or finalised communicator.
detail::CommImpl& comm_of(const Comm& c, const char* call);

// Validation helpers (API.md §Errors): each names the call, the argument and the value.
std::size_t checked_bytes(const char* call, const char* arg, std::size_t count, std::size_t esize);
void check_buffer(const char* call, const char* arg, const void* buf, std::size_t count);
void check_rank(const char* call, const char* arg, int rank, int size, bool allow_any);
void check_tag(const char* call, const char* arg, int tag, bool allow_any);

}  // namespace rmp::api
