// ring: rank 0 starts a token; every rank adds its rank and passes it on. When the token is
// back at rank 0 it must hold 0 + 1 + … + (size - 1).
//   rlaunch -n 4 ./ring
#include <rmp/rmp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);
  const rmp::Comm& world = rmp::world();
  const int rank = world.rank(), size = world.size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const int tag = 7;

  long token = 0;
  if (rank == 0) {
    rmp::Request start = world.isend(&token, 1, next, tag);  // isend: next may be rank 0 itself
    long back = -1;
    world.recv(&back, 1, prev, tag);
    start.wait();
    const long expected = static_cast<long>(size) * (size - 1) / 2;
    std::printf("ring: token visited %d ranks, value %ld, expected %ld: %s\n", size, back, expected,
                back == expected ? "ok" : "WRONG");
    return back == expected ? 0 : 1;
  }
  world.recv(&token, 1, prev, tag);
  token += rank;
  world.send(&token, 1, next, tag);
  return 0;
}
