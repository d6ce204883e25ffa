// MPI matching (p2p/match.hpp, the unit the engine matches with) on queues of 1 … 10 000:
//   match/posted/<kind>/<len>      a message arrives; `len` receives are posted and only the
//                                  last (oldest-first search: the whole queue is walked) takes
//                                  it; find_posted + unlink + post it again
//   match/unexpected/<kind>/<len>  a receive is posted; `len` messages wait and only the last
//                                  matches; find_unexpected + unlink + queue it again
// <kind>: exact (source and tag named), any_source, any_tag — the wildcard is on the receive
// (the posted record for match/posted, the search for match/unexpected); the messages that
// do not match differ in tag (exact, any_source) or source (any_tag), so the wildcard never
// makes an earlier entry match. `entries_per_second` counts the queue entries compared.
// Posted records are the engine's own RequestState; unexpected records carry the wire header
// the engine matches on, padded to about the size of the engine's record.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "p2p/engine.hpp"
#include "p2p/match.hpp"
#include "p2p/wire.hpp"

namespace {

using rmp::detail::RequestState;
using rmp::p2p::EagerHeader;

// An unexpected message as matching sees it: links, the header, and the rest of the engine's
// record (kind, peer, sid, payload pointer and size, the rendezvous header) as padding.
struct Arrived {
  Arrived* prev = nullptr;
  Arrived* next = nullptr;
  EagerHeader h{};
  std::array<std::byte, 120> rest{};
};

using Queues = rmp::p2p::MatchQueues<RequestState, Arrived>;

enum Kind : int { exact = 0, any_source = 1, any_tag = 2 };

constexpr int kSrc = 1, kTag = 42;

// Source and tag of filler entry i: never matched by the target's (src, tag) under `kind`.
int filler_src(Kind kind) { return kind == any_tag ? kSrc + 1 : kSrc; }
int filler_tag(Kind kind, std::size_t i) {
  return kind == any_tag ? kTag : kTag + 1 + static_cast<int>(i % 1000);
}

void set_counters(benchmark::State& state, std::size_t len) {
  const auto n = static_cast<double>(state.iterations());
  state.counters["entries_per_second"] =
      benchmark::Counter(n * static_cast<double>(len), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations());
}

void BM_posted(benchmark::State& state, std::size_t len, Kind kind) {
  // Separately allocated records, as the engine's request pool holds them.
  std::vector<std::unique_ptr<RequestState>> records;
  Queues q;
  for (std::size_t i = 0; i + 1 < len; ++i) {
    records.push_back(std::make_unique<RequestState>());
    records.back()->src = filler_src(kind);
    records.back()->tag = filler_tag(kind, i);
    q.posted.push_back(records.back().get());
  }
  records.push_back(std::make_unique<RequestState>());
  RequestState* target = records.back().get();
  target->src = kind == any_source ? rmp::any_source : kSrc;
  target->tag = kind == any_tag ? rmp::any_tag : kTag;
  q.posted.push_back(target);
  for (auto _ : state) {
    RequestState* r = q.find_posted(kSrc, kTag);
    benchmark::DoNotOptimize(r);
    q.posted.unlink(r);
    q.posted.push_back(r);  // back at the tail: the next search walks the queue again
  }
  if (q.find_posted(kSrc, kTag) != target) state.SkipWithError("matched the wrong receive");
  set_counters(state, len);
}

void BM_unexpected(benchmark::State& state, std::size_t len, Kind kind) {
  std::vector<std::unique_ptr<Arrived>> records;
  Queues q;
  for (std::size_t i = 0; i + 1 < len; ++i) {
    records.push_back(std::make_unique<Arrived>());
    records.back()->h = EagerHeader{0, 0, filler_tag(kind, i), filler_src(kind)};
    q.unexpected.push_back(records.back().get());
  }
  records.push_back(std::make_unique<Arrived>());
  Arrived* target = records.back().get();
  target->h = EagerHeader{0, 0, kTag, kSrc};
  q.unexpected.push_back(target);
  const int want_src = kind == any_source ? rmp::any_source : kSrc;
  const int want_tag = kind == any_tag ? rmp::any_tag : kTag;
  for (auto _ : state) {
    Arrived* u = q.find_unexpected(want_src, want_tag);
    benchmark::DoNotOptimize(u);
    q.unexpected.unlink(u);
    q.unexpected.push_back(u);
  }
  if (q.find_unexpected(want_src, want_tag) != target) {
    state.SkipWithError("matched the wrong message");
  }
  set_counters(state, len);
}

constexpr const char* kKindNames[] = {"exact", "any_source", "any_tag"};

}  // namespace

int main(int argc, char** argv) {
  for (const Kind kind : {exact, any_source, any_tag}) {
    for (const std::size_t len : {1, 10, 100, 1000, 10000}) {
      const std::string suffix = std::string(kKindNames[kind]) + "/" + std::to_string(len);
      benchmark::RegisterBenchmark(("match/posted/" + suffix).c_str(), BM_posted, len, kind);
      benchmark::RegisterBenchmark(("match/unexpected/" + suffix).c_str(), BM_unexpected, len,
                                   kind);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
