// Factory of the shared-memory transport (ranks of one node). Its internals stay in this
// folder; the runtime sees only the Transport interface.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/stats.hpp"
#include "runtime/transport/transport.hpp"

namespace rmp::rt {

class HugePages;

struct ShmConfig {
  enum class Copy { automatic, single, chunks, split, streaming };
  std::size_t ring_lines = 256;      // sq_depth rounded up to a power of two
  std::size_t data_bytes = 1 << 16;  // byte ring for eager-copy payloads, power of two
  std::size_t chunk_bytes = 1 << 17;  // fragment_size: chunk of the pipelined copy
  std::size_t nchunks = 2;            // pipeline_depth: chunks in flight
  // The chunks' byte ring spans at least this many bytes, beyond the nchunks in flight (0: just
  // those): twice a core's private cache (context.cpp, shm_transport.cpp says why).
  std::size_t ring_bytes = 0;
  bool cma = true;                    // RMP_SHM_CMA
  HugePages* huge_pages = nullptr;    // RMP_SHM_HUGEPAGES (runtime/huge_pages.hpp); null: off
  Copy copy = Copy::automatic;        // RMP_SHM_COPY (automatic: measured per size class)
  bool tune = false;                  // RMP_TUNE=adaptive: chunk size and depth per size bucket
};

// Whether the transport may store with streaming (non-temporal) stores under this RMP_SHM_COPY:
// auto measures which kind serves, streaming forces them, the other forced mechanisms keep
// cached stores. Calibration times its streaming pass only when this holds.
constexpr bool shm_may_stream(ShmConfig::Copy c) {
  return c == ShmConfig::Copy::automatic || c == ShmConfig::Copy::streaming;
}

// Capabilities that do not depend on a running transport (ring geometry).
TransportCaps shm_static_caps();

// Maps the node segment (local rank 0 creates it) and returns the transport. Throws
// rmp::Error naming the segment and the failing call when shared memory is unusable.
std::unique_ptr<Transport> make_shm_transport(const JobIdentity& id, const ShmConfig& cfg,
                                              AmSink& sink, Counters& counters);

}  // namespace rmp::rt
