// The node-local shared-segment service (DESIGN §1): a segment shared by a group of ranks of
// one node, for flag barriers and shared-memory reductions in collectives. Collectives reach
// shared memory only through this interface.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "runtime/shared_memory.hpp"

namespace rmp::rt {

class Context;

class NodeSegment {
public:
  // Exactly one member creates the segment (zero-filled) before the others open it; the
  // caller orders the two (e.g. with a barrier between them). The last of `members` to map
  // it removes its name.
  static std::unique_ptr<NodeSegment> create(const Context& ctx, const std::string& key,
                                             std::size_t bytes, int members);
  static std::unique_ptr<NodeSegment> open(const Context& ctx, const std::string& key,
                                           int members);
  // Removes the segment's name when not every member will map it.
  static void remove(const Context& ctx, const std::string& key);
  // For tests: called by open() first, with the opening rank's context; what it throws,
  // open() throws (a mapping that fails on one rank alone). Empty: none.
  static void set_open_fault(std::function<void(const Context&)> fault);

  // Usable bytes (after the segment's own header).
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

private:
  NodeSegment(shm::Mapping m, std::size_t header);
  shm::Mapping map_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Cross-memory attach between members of one node (process_vm_readv; the caller honours
// RMP_SHM_CMA): copies n bytes at `remote`, an address in process `pid`, to `local`. Returns 0,
// or the errno that stopped it (EPERM where ptrace rules forbid it).
int read_member_memory(int pid, const void* remote, void* local, std::size_t n);
// The other way (process_vm_writev): copies n bytes at `local` to `remote` in process `pid`.
int write_member_memory(int pid, const void* local, void* remote, std::size_t n);

}  // namespace rmp::rt
