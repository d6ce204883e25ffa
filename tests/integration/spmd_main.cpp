// main() of the suite's GoogleTest executables: every rank runs every test (SPMD).
#include "harness.hpp"

int main(int argc, char** argv) { return itest::run_spmd_main(argc, argv); }
