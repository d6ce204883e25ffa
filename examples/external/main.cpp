// A user program built outside the rmp tree (see CMakeLists.txt beside it): every rank
// contributes its rank to an allreduce and checks the sum.
#include <rmp/rmp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);
  const rmp::Comm& world = rmp::world();
  const long mine = world.rank();
  long sum = -1;
  world.allreduce(&mine, &sum, 1, rmp::Op::sum);
  const long expected = static_cast<long>(world.size()) * (world.size() - 1) / 2;
  if (world.rank() == 0) {
    std::printf("external_app: %d ranks, sum of ranks %ld (expected %ld): %s\n", world.size(), sum,
                expected, sum == expected ? "ok" : "WRONG");
  }
  return sum == expected ? 0 : 1;
}
