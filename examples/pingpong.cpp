// pingpong: ranks 0 and 1 bounce a message and report the one-way latency; other ranks idle.
//   rlaunch -n 2 ./pingpong [BYTES] [ITERATIONS]
#include <rmp/rmp.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);
  const rmp::Comm& world = rmp::world();
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (world.size() < 2 || iters < 1) rmp::abort(2, "pingpong: needs 2 ranks and iters >= 1");
  const int me = world.rank();
  std::vector<char> buf(bytes, static_cast<char>(me));

  world.barrier();
  const double t0 = rmp::wtime();
  for (int i = 0; i < iters && me < 2; ++i) {
    if (me == 0) {
      world.send(buf.data(), bytes, 1, 0);
      world.recv(buf.data(), bytes, 1, 0);
    } else {
      world.recv(buf.data(), bytes, 0, 0);
      world.send(buf.data(), bytes, 0, 0);
    }
  }
  const double us = (rmp::wtime() - t0) * 1e6 / (2.0 * iters);
  if (me == 0) {
    const bool ok = bytes == 0 || (buf.front() == 0 && buf.back() == 0);  // our bytes came back
    std::printf("pingpong: %zu bytes, %d round trips, %.2f us one way%s\n", bytes, iters, us,
                ok ? "" : " (DATA WRONG)");
    return ok ? 0 : 1;
  }
  return 0;
}
