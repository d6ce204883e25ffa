// hello: every rank reports its rank and the job size.
//   rlaunch -n 4 ./hello
#include <rmp/rmp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  rmp::Environment env(argc, argv);  // init here, finalize when env goes out of scope
  const rmp::Comm& world = rmp::world();
  std::printf("hello from rank %d of %d\n", world.rank(), world.size());
  return 0;
}
