// The benchmark suite's view of a message-passing library: just enough to write OSU-style
// tests once and run them over rmp (backend_rmp.cpp) and over MPI (backend_mpi.cpp).
// Each benchmark program links exactly one backend, so calls resolve at link time: no
// virtual dispatch on the measured path, and both libraries pay the same harness cost.
#pragma once

#include <cstddef>
#include <memory>

namespace bench {

class Backend {
public:
  // Initialises the library (MPI_Init / rmp::Environment); may consume library arguments.
  Backend(int& argc, char**& argv);
  ~Backend();  // finalises the library
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  static const char* name();  // "rmp" or "mpi"

  int rank() const;
  int size() const;

  // Blocking transfers of raw bytes.
  void send(const void* buf, std::size_t bytes, int peer, int tag);
  void recv(void* buf, std::size_t bytes, int peer, int tag);

  // Non-blocking transfers join the backend's pending set; waitall() completes every pending
  // operation and empties the set. reserve() sizes the set up front so that posting inside a
  // timed loop never allocates.
  void reserve(std::size_t max_pending);
  void isend(const void* buf, std::size_t bytes, int peer, int tag);
  void irecv(void* buf, std::size_t bytes, int peer, int tag);
  void waitall();

  void barrier();
  double wtime();  // seconds

  [[noreturn]] void abort(int code);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
