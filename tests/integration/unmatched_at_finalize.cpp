// A send never matched by a receive (an erroneous program) when the ranks finalize: the rank
// holding it says, after a few seconds, what it is still trying to deliver (destination, tag,
// size), rather than leaving the others to time out first and be blamed for it.
// tests/integration/CMakeLists.txt runs it under rlaunch --timeout and checks the notice.
#include <vector>

#include <rmp/rmp.hpp>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);
  const rmp::Comm& w = rmp::world();
  std::vector<char> big(8 << 20, 1);  // a rendezvous: it waits for a receive
  if (w.rank() == 1) {
    rmp::Request never = w.isend(big.data(), big.size(), 0, 5);
  }  // the request is let go of: detached, for the Environment's destructor to deliver
  w.barrier();
  return 0;
}
