// Calibration of the shared-memory transport (DESIGN §5): local ranks 0 and 1 of node 0 meet in
// a small segment of their own and measure, within a fixed budget, the round trip of a shared
// cache line (link_rtt_us), the bandwidth of a pipelined copy through shared chunks (link_bw),
// memcpy bandwidth (copy_bw), the cost of starting a single-copy get (rndv_setup_us) and the
// speed of a get (get_bw: the faster of the chunk copy and the single copy of data the other
// rank has just written). Local rank 0 of node 0 publishes the figures; every rank of the job
// uses them.
#pragma once

#include <chrono>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/calibration.hpp"

namespace rmp::rt {

struct ShmCalibrationOptions {
  bool enabled = true;  // RMP_CALIBRATE
  bool cma = true;      // RMP_SHM_CMA: measure the single-copy get (start-up cost, speed)
  // The transport may store with streaming stores (RMP_SHM_COPY=auto or streaming): the
  // pipelined copy is timed both ways and the faster counts.
  bool streaming = true;
  // How long the measuring ranks wait for each other to arrive, and the measurement's own
  // budget once both are there (a measurement cut short is tried again, three tries in all).
  // Past the wait or the last try, the job runs on declared figures.
  std::chrono::microseconds arrival_wait{20000};
  // With the cores far apart the pair's measurement takes ~0.8-1.4 ms (passes of each copy
  // three times, the split copy); at 500 us the split and streaming passes never ran there.
  std::chrono::microseconds budget{2000};
  // Ranks outnumber this node's cores: before the tries the owner waits (5 ms at most) until
  // no more tasks are runnable than it has CPUs (the other ranks still starting up would take
  // the cores the pair needs at once), and moves off the partner's CPU for each try.
  bool wait_for_cores = false;
};

// Runs on every rank of a job at start-up (collective over bootstrap: every rank calls it).
// A singleton returns at once without bootstrap traffic.
Calibration calibrate_shm(Bootstrap& boot, const ShmCalibrationOptions& opt);

}  // namespace rmp::rt
