// A rank that dies surfaces as Errc::peer_failed on the calls waiting for it (DESIGN: errors),
// not as a hang. Rank 1 leaves abruptly (exit status 3, no finalize) after a barrier. Rank 0
// waits in a receive from it, rank 2 in a barrier (which needs it), rank 3 (with 4 ranks) in a
// receive from rank 0, which waits itself, rank 4 (with 5 ranks) in a loop testing a receive
// from rank 1: each must end with rmp::Error(peer_failed) naming
// rank 1, and says so on stdout; tests/integration/CMakeLists.txt checks the lines, and that
// rlaunch reports rank 1's status (3).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <rmp/rmp.hpp>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);
  const rmp::Comm& w = rmp::world();
  w.barrier();
  if (w.rank() == 1) {
    std::fflush(stdout);
    std::_Exit(3);
  }
  try {
    int x = 0;
    if (w.rank() == 0) {
      w.recv(&x, 1, 1, 0);
    } else if (w.rank() == 3) {
      w.recv(&x, 1, 0, 0);
    } else if (w.rank() == 4) {
      rmp::Request r = w.irecv(&x, 1, 1, 0);
      while (!r.test()) {
      }
    } else {
      w.barrier();
    }
    std::printf("rank %d: the call returned\n", w.rank());
  } catch (const rmp::Error& e) {
    const std::string what = e.what();
    const bool names_rank = what.find("rank 1 failed") != std::string::npos &&
                            what.find("exited with status 3") != std::string::npos;
    std::printf("rank %d: %s%s: %s\n", w.rank(),
                e.code() == rmp::Errc::peer_failed ? "peer_failed" : "other error",
                names_rank ? " naming rank 1" : "", e.what());
  }
  std::fflush(stdout);
  std::_Exit(0);  // rlaunch ends the job anyway; no finalize with a dead peer
}
