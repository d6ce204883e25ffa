// The shared-memory transport: per-pair segments created on first use, each holding for both
// directions a line ring (control and inline data), a byte ring (eager copies) and a chunk
// ring (the pipelined rendezvous copy). A node segment holds one doorbell per local rank so
// that a peer learns about a new pair without polling all N possible peers.
#include "runtime/transport/shm/shm_transport.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/copy.hpp"
#include "runtime/fast_clock.hpp"
#include "runtime/huge_pages.hpp"
#include "runtime/log.hpp"
#include "runtime/shared_memory.hpp"
#include "runtime/transport/shm/copy_chooser.hpp"
#include "runtime/transport/shm/eager_stores.hpp"
#include "runtime/transport/shm/get_tuner.hpp"
#include "runtime/transport/shm/shm_ring.hpp"

namespace rmp::rt {
namespace {

using namespace shm;

constexpr AmId kAmGetReq = 24;  // requester → owner: serve [addr, addr+len) through chunks
constexpr AmId kAmPutData = 25;  // a piece of a put without cross-memory attach
constexpr AmId kAmSplitGet = 26;  // requester → owner: a split get is published, help copy it
constexpr AmId kAmEagerCost = 27;  // receiver → sender: what a timed eager payload cost
constexpr std::size_t kPage = 4096;
constexpr int kPollBudget = 32;
constexpr std::size_t kPieces = 4;            // a chunked get is cut into at least this many steps
constexpr std::size_t kMinPiece = 16 * 1024;  // of at least this many bytes
constexpr auto kSegmentTimeout = std::chrono::seconds(60);

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

struct NodeHeader {
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> mapped;
  std::uint32_t magic;
  std::uint32_t local_size;
  std::uint64_t total;
  std::uint64_t bell_stride;
};

// One per local rank: a summary word and a bitmap of local ranks that created a pair with it.
struct alignas(kLine) Doorbell {
  std::atomic<std::uint64_t> summary;
};

struct PairHeader {
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> mapped;
  std::uint32_t magic;
  std::uint32_t nlines;
  std::uint64_t total;
  std::uint64_t data_bytes;
  std::uint64_t chunk_bytes;
  std::uint64_t nchunks;
  std::uint64_t dir_off[2];
  std::int32_t world[2];
  std::int32_t pid[2];
};

// The segments' magic: "RMPS" mixed with the sizes of what the ranks share in them and the
// message format's constants, so that a rank whose library lays them out otherwise (another
// rmp build in the same job) is refused with an error when it maps them, instead of reading
// the other's lines as its own.
constexpr std::uint32_t layout_magic() {
  std::uint32_t h = 0x524d5053;
  for (const std::size_t v :
       {sizeof(NodeHeader), sizeof(Doorbell), sizeof(PairHeader), sizeof(Line), sizeof(RingShared),
        sizeof(ChunkShared), sizeof(SplitShared), kSplitBatch, kLineHeader, kMaxMessageLines,
        std::size_t{kAmGetReq}, std::size_t{kAmEagerCost}})
    h = (h ^ static_cast<std::uint32_t>(v)) * 16777619u;  // FNV-1a's step, a value a step
  return h;
}
constexpr std::uint32_t kMagic = layout_magic();

std::size_t ready_size_of_pair(const void* h) {
  auto* p = static_cast<const PairHeader*>(h);
  return p->ready.load(std::memory_order_acquire) == 1 ? p->total : 0;
}
std::size_t ready_size_of_node(const void* h) {
  auto* p = static_cast<const NodeHeader*>(h);
  return p->ready.load(std::memory_order_acquire) == 1 ? p->total : 0;
}

// What a rendezvous key of this transport holds (ShmTransport::register_memory).
struct ShmKey {
  std::int32_t pid;
  std::uint32_t huge_epoch;  // how often the sender's buffers have gone onto huge pages
};
static_assert(sizeof(ShmKey) <= sizeof(RemoteKey::bytes));

// What a rank publishes for its peers on the node: who it is, and the pair geometry it wants
// (from its own settings, which may differ from the peer's: thresholds are per rank).
struct ShmAddress {
  std::int32_t node, local_rank, pid, world;
  std::uint64_t ring_lines, data_bytes, chunk_bytes, nchunks;
};

// Offsets inside one direction's area.
struct DirLayout {
  std::size_t ring_shared = 0, chunk_shared = kLine, split = 3 * kLine,
              reading = split + sizeof(SplitShared), lines = reading + kLine, data = 0, chunks = 0,
              size = 0;
  DirLayout(std::size_t nlines, std::size_t data_bytes, std::size_t nchunks, std::size_t chunk) {
    data = round_up(lines + nlines * kLine, kPage);
    chunks = round_up(data + data_bytes, kPage);
    size = round_up(chunks + nchunks * chunk, kPage);
  }
};

class ShmTransport;

// Gets are timed twice each (copy_chooser.hpp): the cheap clock.
using Clock = FastClock;

// A chunked get moves `fragment` bytes per chunk with at most `depth` chunks in flight: the
// pair's geometry unless RMP_TUNE=adaptive chose less (GetRequest carries the choice).
struct GetJob {
  std::byte* dst;
  std::size_t len, off;
  Completion* done;
  Clock::time_point posted;
  std::size_t fragment = 0;   // chunked gets: bytes per step
  GetTuner::Pick tune{};
  std::uint64_t remote = 0;  // split gets: the owner's address
  CopyChooser::Mode mode = CopyChooser::Mode::chunks;  // chunked gets: chunks or streaming
  // What the pair was doing when it started (ShmEndpoint::get): the kind of traffic the copy
  // chooser hears of its time as.
  CopyChooser::Traffic traffic = CopyChooser::Traffic::stream;
  bool settled = false;  // GetHints::settled: nothing of this get is on trial
};
struct ServeJob {
  const std::byte* src;
  std::size_t len, off;
  std::size_t fragment, depth;
  bool streaming;
};
struct GetRequest {
  std::uint64_t addr, len;
  std::uint32_t fragment, depth;
  std::uint32_t streaming;  // the owner stores into the chunks with non-temporal stores
  std::uint32_t unused = 0;
};
// What a timed eager payload cost, as the receiver saw it (shm_ring.hpp, TimedDelivery).
struct EagerCost {
  std::uint32_t bytes;
  std::uint32_t ns;
  std::uint32_t streamed;
};
struct CmaJob {
  int pid;
  std::byte* local;
  std::uint64_t remote;
  std::size_t len;
  Completion* done;
  bool write;
  class ShmEndpoint* ep;
  Clock::time_point posted{};
  CopyChooser::Traffic traffic = CopyChooser::Traffic::stream;  // as GetJob's
  bool settled = false;                                         // as GetJob's
};

// A transport-internal message waiting for ring space; payload points to memory that stays
// valid until the matching completion runs.
struct PendingCtl {
  AmId am;
  std::uint8_t hlen;
  std::array<std::byte, sizeof(GetRequest)> hdr;
  std::span<const std::byte> payload;
  Completion* done;  // run once sent (puts), or nullptr
};

class ShmEndpoint final : public Endpoint {
public:
  ShmEndpoint(ShmTransport& t, int peer, int peer_pid, Mapping seg, int my_dir,
              EagerStores::Force stores);

  TStatus send_am(AmId id, std::span<const std::byte> header,
                  std::span<const std::byte> payload, bool inline_hint) override {
    return out_.push(id, header, payload, inline_hint, [this](std::size_t bytes) {
      const StorePick how = stores_.pick(bytes);
      if (how.streaming || how.timed) count_eager_pick(how);
      return how;
    });
  }
  TStatus get(std::span<std::byte> local, std::uint64_t remote_addr, const RemoteKey& key,
              Completion* done, GetHints hints) override;
  TStatus put(std::span<const std::byte> local, std::uint64_t remote_addr, const RemoteKey& key,
              Completion* done) override;
  Transport& transport() override;

  // A message is waiting (one load): the progress loop asks this before calling poll().
  bool ready() const { return in_.ready(); }
  int poll(AmSink& sink, Counters& c);  // after ready()
  int advance();
  bool busy() const {
    return !gets_.empty() || !serve_.empty() || !ctl_.empty() || !splits_.empty() || helping_ ||
           !waiting_.empty();
  }
  void start_chunk_get(std::byte* dst, std::size_t len, std::uint64_t remote, Completion* done,
                       bool streaming = false,
                       CopyChooser::Traffic traffic = CopyChooser::Traffic::stream,
                       bool settled = false);
  // A get of len bytes posted at `posted` completed now by mechanism m: tell the chooser the
  // throughput the stream of gets saw (from when this one could start — posted, or the
  // previous get's end — to now, so waiting for the peer counts for every mechanism alike).
  // Returns the seconds it measured.
  double record_get(CopyChooser::Mode m, std::size_t len, Clock::time_point posted,
                    bool for_chooser = true,
                    CopyChooser::Traffic traffic = CopyChooser::Traffic::stream);
  // The same for the first k of `jobs`, which ran together and ended now: each is told its
  // share, by bytes, of the time from when the first could start.
  void record_batch(CopyChooser::Mode m, const std::deque<GetJob>& jobs, std::size_t k);
  // A get ended (record_get calls it; a failed get, unmeasured, calls it alone).
  void get_ended() { set_gets_running(gets_running_ - 1); }

private:
  void send_ctl(AmId am, std::span<const std::byte> hdr, std::span<const std::byte> payload,
                Completion* done);
  void start_get(const GetJob& j);
  // gets_running_, also published for the peer (reading_).
  void set_gets_running(std::uint32_t n) {
    gets_running_ = n;
    my_reading_->store(n, std::memory_order_relaxed);
  }
  int start_waiting();
  int serve_chunks();
  int drain_chunks();
  int drive_split();
  int help_split();
  void count_eager_pick(StorePick how);

  ShmTransport& t_;
  int peer_pid_;
  Mapping seg_;
  RingProducer out_;
  RingConsumer in_;
  EagerStores stores_;  // how out_'s eager payloads are stored
  ChunkLayout out_chunks_, in_chunks_;
  std::uint64_t produced_ = 0, consumed_cache_ = 0;  // as owner (out_chunks_), in bytes
  std::uint64_t consumed_ = 0, produced_cache_ = 0;  // as requester (in_chunks_), in bytes
  std::deque<GetJob> gets_;
  Clock::time_point last_get_done_{};  // end of the previous get, any mechanism
  bool last_get_idle_ = true;          // the previous get found no other get running or waiting
  std::uint32_t peer_huge_epoch_ = 0;  // the peer's send_huge_epoch_, from the gets' keys
  // Gets of one copy mechanism at a time: a get whose mechanism differs from that of the gets
  // running waits (in order, with the gets posted after it) until they have ended. Run side by
  // side, the mechanisms shared the cores and each get's time counted the others' work: the
  // chooser measured a burst of chunk gets among a window of split ones at a quarter of its
  // speed, settled on the slower mechanism for the rest of the run and 1 MiB bandwidth came out
  // at 15 or 30 GB/s from one run to the next (cores near, same binary). Chunk gets with cached
  // and with streaming stores go through the same ring in order already: they do not wait for
  // each other.
  static bool same_queue(CopyChooser::Mode a, CopyChooser::Mode b) {
    auto ring = [](CopyChooser::Mode m) {
      return m == CopyChooser::Mode::chunks || m == CopyChooser::Mode::streaming;
    };
    return a == b || (ring(a) && ring(b));
  }
  std::deque<GetJob> waiting_;
  std::uint32_t gets_running_ = 0;
  // The gets this rank has running from the peer, as it publishes them (in its direction's
  // area), and the peer's from this rank: when the peer is reading from us as we start a
  // get, traffic runs both ways (ShmEndpoint::get).
  std::atomic<std::uint32_t>* my_reading_ = nullptr;
  const std::atomic<std::uint32_t>* peer_reading_ = nullptr;
  CopyChooser::Mode running_mode_ = CopyChooser::Mode::chunks;
  std::deque<ServeJob> serve_;
  std::deque<PendingCtl> ctl_;
  // Split gets (as requester): the front split_count_ ones are published in
  // out_chunks_.split, cut at split_cut_.
  std::deque<GetJob> splits_;
  bool split_live_ = false;
  std::uint32_t split_gen_ = 0, split_count_ = 0, split_mine_ = 0;
  std::array<std::size_t, kSplitBatch> split_cut_{};
  int split_err_ = 0;
  // The owner could not write into this process (it left pieces to redo): it cannot help,
  // so the gets are no longer cut and the owner no longer woken.
  bool owner_cannot_help_ = false;
  // As owner: the peer published a split get; help until no piece is left.
  bool helping_ = false;
  bool help_broken_ = false;  // writev failed once: leave every piece to the requester
};

class ShmTransport final : public Transport {
public:
  ShmTransport(const JobIdentity& id, const ShmConfig& cfg, AmSink& sink, Counters& c);

  const char* name() const override { return "shm"; }
  TransportCaps caps() const override {
    TransportCaps k = shm_static_caps();
    k.max_am_payload = cfg_.data_bytes;
    k.zero_copy_get = cma_ok_;
    k.zero_copy_put = cma_ok_;
    return k;
  }
  std::vector<std::byte> address() const override {
    ShmAddress a{id_.node_id,     id_.local_rank,   pid_,        id_.rank, cfg_.ring_lines,
                 cfg_.data_bytes, seg_chunk_bytes_, seg_nchunks_};
    std::vector<std::byte> v(sizeof a);
    std::memcpy(v.data(), &a, sizeof a);
    return v;
  }
  Endpoint* connect(int peer, std::span<const std::byte> peer_address) override;
  // The key: this process, and how often pages under the buffers it sends from have gone onto
  // huge pages so far, by which the reading side knows that the pages it reads from did
  // (ShmEndpoint::get).
  RemoteKey register_memory(std::span<const std::byte> region) override {
    if (cma_buffer(region)) ++send_huge_epoch_;
    const ShmKey key{pid_, send_huge_epoch_};
    RemoteKey k;
    k.len = sizeof key;
    std::memcpy(k.bytes.data(), &key, sizeof key);
    return k;
  }
  void deregister_memory(std::span<const std::byte>, const RemoteKey&) override {}
  int progress() override;

  // Used by endpoints.
  // A rendezvous buffer (sent from, or received into) that cross-memory attach may read or
  // write: its 2 MiB blocks go onto huge pages once used often (huge_pages.hpp).
  // Returns whether any of them did just now.
  bool cma_buffer(std::span<const std::byte> region) {
    if (!cma_ok_ || !huge_) return false;
    return count_huge(c_, huge_->use(region.data(), region.size())) > 0;
  }
  // A buffer of gets of `bytes` changed pages, here or at the peer's (cma_buffer).
  void pages_changed(std::size_t bytes) {
    if (automatic_copy()) chooser_.pages_changed(bytes);
  }
  bool automatic_copy() const { return cfg_.copy == ShmConfig::Copy::automatic; }
  bool cma_ok() const { return cma_ok_; }
  // `trial` (when given): whether the mechanism is one the measured choice is still trying.
  // `settled` (GetHints): the mechanism it holds, or its guess, and nothing put on trial.
  CopyChooser::Mode copy_mode(std::size_t len,
                              CopyChooser::Traffic traffic = CopyChooser::Traffic::stream,
                              bool* trial = nullptr, bool settled = false) {
    if (trial) *trial = false;
    switch (cfg_.copy) {
      case ShmConfig::Copy::single:
      case ShmConfig::Copy::split:
        if (!cma_ok_) return CopyChooser::Mode::chunks;
        return cfg_.copy == ShmConfig::Copy::single ? CopyChooser::Mode::single
                                                    : CopyChooser::Mode::split;
      case ShmConfig::Copy::chunks: return CopyChooser::Mode::chunks;
      case ShmConfig::Copy::streaming:
        return CopyChooser::Mode::streaming;
      case ShmConfig::Copy::automatic: {
        CopyChooser& c = cma_ok_ ? chooser_ : chunk_chooser_;
        const CopyChooser::Mode m =
            settled ? c.choose_settled(len, traffic) : c.choose(len, traffic);
        if (trial) *trial = c.last_was_trial(traffic);
        return m;
      }
    }
    return CopyChooser::Mode::chunks;
  }
  bool use_single_copy(std::size_t len) {
    if (!cma_ok_) return false;
    const CopyChooser::Mode m = copy_mode(len);
    return m == CopyChooser::Mode::single || m == CopyChooser::Mode::split;
  }
  // A split get is cut in two halves: with a fixed cut each process keeps writing the same
  // half of a reused buffer (no cache lines move between the cores), and two system calls
  // are the fewest. Measured here (1 and 4 MiB): halves 15-17 GB/s, 128 KiB pieces 11-13,
  // 32 KiB pieces 3-13. Below kSplitMinPiece per half the owner is not worth waking.
  static std::size_t split_piece(std::size_t len) {
    return len < 2 * kSplitMinPiece ? len : round_up((len + 1) / 2, kPage);
  }
  // `uses` gets of `bytes` each, measured together, took `took` each.
  void record_copy(CopyChooser::Mode m, std::size_t bytes, Clock::duration took,
                   CopyChooser::Traffic traffic, std::uint32_t uses = 1) {
    (cma_ok_ ? chooser_ : chunk_chooser_)
        .record(m, bytes, std::chrono::duration<double>(took).count(), traffic, uses);
  }
  // True when `err` says cross-memory attach is forbidden here (ptrace rules); the transport
  // then copies through shared chunks from now on.
  bool cma_refused(int err) {
    if (err != EPERM && err != ENOSYS) return false;
    if (cma_ok_)
      log_warn("shm: cross-memory attach is not permitted (" + std::string(std::strerror(err)) +
               "); copying through shared chunks instead");
    cma_ok_ = false;
    return true;
  }
  GetTuner& get_tuner() { return get_tuner_; }
  void complete_later(Completion* c, TStatus s) { done_.push_back({c, s}); }
  void add_cma(const CmaJob& j) { cma_.push_back(j); }
  void mark_busy(ShmEndpoint* ep) {
    if (std::find(busy_.begin(), busy_.end(), ep) == busy_.end()) busy_.push_back(ep);
  }
  Counters& counters() { return c_; }
  AmSink& sink() { return sink_; }

private:
  std::string pair_name(int a, int b) const {
    return "/rmp-" + id_.job_id + "-n" + std::to_string(id_.node_id) + "-" +
           std::to_string(std::min(a, b)) + "-" + std::to_string(std::max(a, b));
  }
  Doorbell* bell(int local_rank) const {
    return reinterpret_cast<Doorbell*>(static_cast<std::byte*>(node_.data()) + kLine +
                                       static_cast<std::size_t>(local_rank) * bell_stride_);
  }
  std::atomic<std::uint64_t>* bell_bits(int local_rank) const {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(
        reinterpret_cast<std::byte*>(bell(local_rank)) + kLine);
  }
  ShmEndpoint* attach(int local_peer, Mapping seg);
  int accept_new();
  int run_cma();
  int progress_work();  // progress() beyond the empty poll: copies and completions

  JobIdentity id_;
  ShmConfig cfg_;
  // Read once: getpid() is a system call (glibc caches no pid), ~1 us on a VM whose kernel
  // entries are dear, and register_memory runs once a rendezvous send.
  const std::int32_t pid_ = static_cast<std::int32_t>(::getpid());
  // Eager payload stores under RMP_SHM_COPY (shm_may_stream): measured under auto, streaming
  // when forced so, cached under the other forced mechanisms.
  EagerStores::Force eager_stores_;
  AmSink& sink_;
  Counters& c_;
  Mapping node_;
  std::size_t bell_stride_ = 0;
  bool cma_ok_;
  std::vector<std::unique_ptr<ShmEndpoint>> eps_;
  std::unordered_map<int, ShmEndpoint*> by_local_;
  std::vector<ShmEndpoint*> busy_;
  std::vector<std::pair<Completion*, TStatus>> done_;
  std::deque<CmaJob> cma_;
  CopyChooser chooser_;
  CopyChooser chunk_chooser_{CopyChooser::kChunkModes};  // once cross-memory attach is refused
  HugePages* huge_;                                      // the process's (Context), or null: off
  // register_memory calls that moved pages onto huge pages. Like the choosers, guarded by the
  // engine's lock, under which every transport call runs (a progress thread's too).
  std::uint32_t send_huge_epoch_ = 0;
  GetTuner get_tuner_;
  std::size_t seg_chunk_bytes_, seg_nchunks_;  // pair geometry: room for every tuned setting
};

// ---------------------------------------------------------------------------------------------

ShmEndpoint::ShmEndpoint(ShmTransport& t, int peer, int peer_pid, Mapping seg, int my_dir,
                         EagerStores::Force stores)
    : Endpoint(peer), t_(t), peer_pid_(peer_pid), seg_(std::move(seg)), stores_(stores) {
  auto* h = static_cast<PairHeader*>(seg_.data());
  auto* base = static_cast<std::byte*>(seg_.data());
  DirLayout d(h->nlines, h->data_bytes, h->nchunks, h->chunk_bytes);
  auto layout = [&](int dir) {
    std::byte* p = base + h->dir_off[dir];
    RingLayout r;
    r.shared = reinterpret_cast<RingShared*>(p + d.ring_shared);
    r.lines = reinterpret_cast<Line*>(p + d.lines);
    r.nlines = h->nlines;
    r.data = p + d.data;
    r.data_bytes = h->data_bytes;
    ChunkLayout c;
    c.shared = reinterpret_cast<ChunkShared*>(p + d.chunk_shared);
    c.split = reinterpret_cast<SplitShared*>(p + d.split);
    c.chunks = p + d.chunks;
    c.nchunks = h->nchunks;
    c.chunk_bytes = h->chunk_bytes;
    return std::pair{r, c};
  };
  auto [out_ring, out_chunks] = layout(my_dir);
  auto [in_ring, in_chunks] = layout(1 - my_dir);
  out_ = RingProducer(out_ring);
  in_ = RingConsumer(in_ring);
  pair_rings(out_, in_);
  out_chunks_ = out_chunks;
  // The rings this side writes, written once now: the first payloads and gets then find their
  // lines in this core's caches as later ones do, not in memory. The copy chooser judges the
  // pipelined copy on its first gets, and with a ring of 2 MiB each of them came to a part
  // never written before: 512 KiB ping-pongs, cores near, 25-35 us a get there against 18 once
  // the chunks were held, and the split copy (21-22) took over in most runs; written first,
  // the chunks were held in 3 runs of 4. (Once per pair, when it is mapped.)
  std::memset(out_ring.data, 0, out_ring.data_bytes);
  std::memset(out_chunks_.chunks, 0, out_chunks_.nchunks * out_chunks_.chunk_bytes);
  in_chunks_ = in_chunks;
  my_reading_ =
      reinterpret_cast<std::atomic<std::uint32_t>*>(base + h->dir_off[my_dir] + d.reading);
  peer_reading_ =
      reinterpret_cast<std::atomic<std::uint32_t>*>(base + h->dir_off[1 - my_dir] + d.reading);
}

Transport& ShmEndpoint::transport() { return t_; }

void ShmEndpoint::count_eager_pick(StorePick how) {
  Counters& c = t_.counters();
  c.shm_eager_streamed += how.streaming;
  c.shm_eager_timed += how.timed;
}

void ShmEndpoint::send_ctl(AmId am, std::span<const std::byte> hdr,
                           std::span<const std::byte> payload, Completion* done) {
  if (ctl_.empty() && out_.push(am, hdr, payload, false) == TStatus::ok) {
    if (done) t_.complete_later(done, TStatus::ok);
    return;
  }
  PendingCtl p{am, static_cast<std::uint8_t>(hdr.size()), {}, payload, done};
  assert(hdr.size() <= p.hdr.size() && "transport-internal headers fit PendingCtl");
  if (!hdr.empty()) std::memcpy(p.hdr.data(), hdr.data(), p.hlen);
  ctl_.push_back(p);
  t_.mark_busy(this);
}

void ShmEndpoint::start_chunk_get(std::byte* dst, std::size_t len, std::uint64_t remote,
                                  Completion* done, bool streaming, CopyChooser::Traffic traffic,
                                  bool settled) {
  // The pair holds chunks at least as large as this rank asked for (ShmTransport::connect); the
  // clamp only guards against a pair laid out otherwise.
  GetTuner::Pick tune = t_.get_tuner().pick(len, settled);
  std::size_t fragment = std::min(tune.fragment, in_chunks_.chunk_bytes);
  // At most as many fragments of this size in flight as the byte ring holds.
  const std::size_t ring = in_chunks_.nchunks * in_chunks_.chunk_bytes;
  std::size_t depth = std::clamp<std::size_t>(tune.depth, 1, ring / fragment);
  // A get shorter than one step (fragment_size, or the tuner's choice) is cut into kPieces
  // steps (of at least kMinPiece), as many in flight as the same window of bytes holds, so
  // that the owner's copy into the ring and this side's copy out overlap within it too. In
  // one 512 KiB step a 256 KiB get was copied in, then out: rendezvous paid both copies one
  // after the other, as eager does (256 KiB, cores near, 4 interleaved pairs: bandwidth 14
  // -> 29 GB/s, latency 18.5 -> 15.8 us). So is a get of fewer than kPieces steps that is
  // alone on the pair (no chunk get before it, none waiting: a ping-pong), whose steps
  // nothing else overlaps: a 128 KiB get of one 128 KiB step took 8.2-9.2 us where four
  // steps took 6.4-6.8 (cores near); with the calibrated 512 KiB steps, ping-pong of 512 KiB
  // 30.2 -> 24.9 us and of 1 MiB 50.3 -> 45.2 (interleaved, 10-11 pairs near). Gets in a
  // stream keep whole steps: their copies overlap those of the gets around them, and cutting
  // a 512 KiB get into four cost 12-23 % of a window's bandwidth in syncs.
  const bool alone = gets_.empty() && waiting_.empty();
  if (len < fragment || (alone && len < kPieces * fragment)) {
    const std::size_t window = fragment * depth;
    fragment = std::clamp(round_up((len + kPieces - 1) / kPieces, kPage),
                          std::min(kMinPiece, fragment), fragment);
    depth = std::clamp<std::size_t>(window / fragment, 1, ring / fragment);
  }
  if (tune.tuned) {
    Counters& c = t_.counters();
    c.tune_explorations += tune.explore;
    c.tune_gets_retuned += tune.retuned;
  }
  GetRequest req{remote, len, static_cast<std::uint32_t>(fragment),
                 static_cast<std::uint32_t>(depth), streaming ? 1u : 0u};
  gets_.push_back({dst, len, 0, done, Clock::now(), fragment, tune, 0,
                   streaming ? CopyChooser::Mode::streaming : CopyChooser::Mode::chunks, traffic,
                   settled});
  send_ctl(kAmGetReq, std::as_bytes(std::span(&req, 1)), {}, nullptr);
  t_.mark_busy(this);
  ++t_.counters().shm_gets_chunks;
  t_.counters().shm_gets_streaming += streaming;
}

TStatus ShmEndpoint::get(std::span<std::byte> local, std::uint64_t remote_addr,
                         const RemoteKey& key, Completion* done, GetHints hints) {
  // Pages under this buffer or under the peer's (its key says how often its pages changed)
  // went onto huge pages: the cross-memory copies' earlier figures at this size are stale.
  // (Forward only: the keys of a window's sends may arrive out of order. A get too small to
  // lie on huge pages is none of those whose pages changed.)
  const bool here = t_.cma_buffer(local);
  ShmKey peer{0, peer_huge_epoch_};
  if (key.len == sizeof peer) std::memcpy(&peer, key.bytes.data(), sizeof peer);
  const bool there = static_cast<std::int32_t>(peer.huge_epoch - peer_huge_epoch_) > 0;
  if (there) peer_huge_epoch_ = peer.huge_epoch;
  if (here || (there && local.size() >= HugePages::kBlock / 2)) t_.pages_changed(local.size());
  if (local.empty()) {
    t_.complete_later(done, TStatus::ok);
    return TStatus::ok;
  }
  // Traffic both ways (the caller has a rendezvous send to the peer in flight, or the peer
  // is reading from us already: a bidirectional bandwidth test, an exchange): each core has
  // its own direction to copy as well, and a mechanism that borrows the peer's core (chunks,
  // split) moves work onto a busy core. Whether that still pays depends on the machine: on
  // one host each reading its own direction with cross-memory attach won (bidirectional
  // windows of 64, 1 MiB: 11.6 GB/s, split 13.1 but chosen by the one-way chooser 11.0), on
  // another the chunks and the split copy ran 1.2-1.5x faster than that with the cores near.
  // Such gets have a chooser of their own (CopyChooser::Traffic::both_ways), which holds
  // the single copy from its warm-up on until another mechanism measures faster. So where
  // ranks share cores too: two ranks on one core, bidirectional windows of 1 MiB ran 1.29x
  // faster chosen than read with cross-memory attach each way (256 KiB 1.10x).
  const bool both = hints.both_ways || peer_reading_->load(std::memory_order_relaxed) > 0;
  // Alone: nothing of the pair's running or waiting, and the get before found it so too. A
  // bandwidth window's first get finds the pair idle, but follows the last window's gets,
  // which had company: chosen as one alone (streaming chunks where the window's gets went
  // split), it ran by itself while the rest of its window waited for it (1 MiB windows 3-5 %
  // slower).
  const bool idle = gets_running_ == 0 && waiting_.empty();
  const bool alone = idle && last_get_idle_;
  last_get_idle_ = idle;
  const CopyChooser::Traffic traffic = both    ? CopyChooser::Traffic::both_ways
                                       : alone ? CopyChooser::Traffic::alone
                                               : CopyChooser::Traffic::stream;
  t_.counters().shm_gets_both_ways += both && t_.automatic_copy();
  t_.counters().shm_gets_settled += hints.settled;
  GetJob j{.dst = local.data(),
           .len = local.size(),
           .off = 0,
           .done = done,
           .posted = Clock::now(),
           .remote = remote_addr,
           .mode = t_.copy_mode(local.size(), traffic, &done->trial, hints.settled),
           .traffic = traffic,
           .settled = hints.settled};
  if (!waiting_.empty() || (gets_running_ > 0 && !same_queue(j.mode, running_mode_))) {
    waiting_.push_back(j);
    t_.mark_busy(this);
    ++t_.counters().shm_gets_waited;
    return TStatus::ok;
  }
  start_get(j);
  return TStatus::ok;
}

void ShmEndpoint::start_get(const GetJob& j) {
  running_mode_ = j.mode;
  set_gets_running(gets_running_ + 1);
  switch (j.mode) {
    case CopyChooser::Mode::single:
      t_.add_cma(
          {peer_pid_, j.dst, j.remote, j.len, j.done, false, this, j.posted, j.traffic, j.settled});
      break;
    case CopyChooser::Mode::chunks:
    case CopyChooser::Mode::streaming:
      start_chunk_get(j.dst, j.len, j.remote, j.done, j.mode == CopyChooser::Mode::streaming,
                      j.traffic, j.settled);
      break;
    case CopyChooser::Mode::split:
      splits_.push_back(j);
      t_.mark_busy(this);
      break;
  }
}

// Once the gets running have ended: the waiting ones of the front one's mechanism, in order.
int ShmEndpoint::start_waiting() {
  int n = 0;
  while (!waiting_.empty() &&
         (gets_running_ == 0 || same_queue(waiting_.front().mode, running_mode_))) {
    const GetJob j = waiting_.front();
    waiting_.pop_front();  // first: a get that waited alone is alone (start_chunk_get)
    start_get(j);
    ++n;
  }
  return n;
}

TStatus ShmEndpoint::put(std::span<const std::byte> local, std::uint64_t remote_addr,
                         const RemoteKey&, Completion* done) {
  if (local.empty()) {
    t_.complete_later(done, TStatus::ok);
    return TStatus::ok;
  }
  if (t_.use_single_copy(local.size())) {
    t_.add_cma({peer_pid_, const_cast<std::byte*>(local.data()), remote_addr, local.size(), done,
                true, this});
    return TStatus::ok;
  }
  // Without cross-memory attach the target copies the pieces in as they arrive. A piece must
  // fit the byte ring (a larger one would be refused for ever and stay queued).
  const std::size_t piece = std::min<std::size_t>(
      std::max<std::size_t>(out_chunks_.chunk_bytes / 2, 4096), out_.max_payload());
  for (std::size_t off = 0; off < local.size(); off += piece) {
    const std::size_t n = std::min(piece, local.size() - off);
    std::uint64_t hdr[2] = {remote_addr + off, n};
    send_ctl(kAmPutData, std::as_bytes(std::span(hdr)), local.subspan(off, n),
             off + n == local.size() ? done : nullptr);
  }
  return TStatus::ok;
}

// Called once ready() found a message (ShmTransport::progress): the ring's poll reads the
// sequence word again anyway, so no test of its own here.
[[gnu::noinline]] int ShmEndpoint::poll(AmSink& sink, Counters&) {
  return in_.poll(
      [&](AmId am, std::span<const std::byte> hdr, std::span<const std::byte> payload) {
        if (am < kAmUserLimit) {
          sink.on_am(peer(), am, hdr, payload);
        } else if (am == kAmGetReq) {
          GetRequest req;
          std::memcpy(&req, hdr.data(), sizeof req);
          // Steps of at most a chunk, as many in flight as the ring holds.
          const std::size_t step =
              std::clamp<std::size_t>(req.fragment, 1, out_chunks_.chunk_bytes);
          const std::size_t ring = out_chunks_.nchunks * out_chunks_.chunk_bytes;
          serve_.push_back({reinterpret_cast<const std::byte*>(req.addr),
                            static_cast<std::size_t>(req.len), 0, step,
                            std::clamp<std::size_t>(req.depth, 1, ring / step),
                            req.streaming != 0});
          t_.mark_busy(this);
        } else if (am == kAmSplitGet) {
          if (!help_broken_) {
            helping_ = true;
            t_.mark_busy(this);
          }
        } else if (am == kAmPutData) {
          std::uint64_t h[2];
          std::memcpy(h, hdr.data(), sizeof h);
          rt::copy_from_peer(reinterpret_cast<void*>(h[0]), payload.data(), payload.size());
        } else if (am == kAmEagerCost && hdr.size() >= sizeof(EagerCost)) {
          EagerCost c;
          std::memcpy(&c, hdr.data(), sizeof c);
          stores_.record(c.streamed != 0, c.bytes, static_cast<double>(c.ns) * 1e-9);
        }
      },
      kPollBudget,
      [&](const TimedDelivery& d) {
        const EagerCost c{static_cast<std::uint32_t>(d.bytes),
                          static_cast<std::uint32_t>(std::min<std::uint64_t>(d.ns, UINT32_MAX)),
                          d.streamed ? 1u : 0u};
        send_ctl(kAmEagerCost, std::as_bytes(std::span(&c, 1)), {}, nullptr);
      });
}

double ShmEndpoint::record_get(CopyChooser::Mode m, std::size_t len, Clock::time_point posted,
                               bool for_chooser, CopyChooser::Traffic traffic) {
  const Clock::time_point now = Clock::now();
  const Clock::duration took = now - std::max(posted, last_get_done_);
  // (The chooser itself leaves out the first get after a change of mechanism, which found
  // the pipeline empty.)
  if (for_chooser) t_.record_copy(m, len, took, traffic);
  last_get_done_ = now;
  get_ended();
  return std::chrono::duration<double>(took).count();
}

void ShmEndpoint::record_batch(CopyChooser::Mode m, const std::deque<GetJob>& jobs, std::size_t k) {
  const Clock::time_point now = Clock::now();
  Clock::time_point first = now;
  std::size_t total = 0;
  for (std::size_t i = 0; i < k; ++i) first = std::min(first, jobs[i].posted), total += jobs[i].len;
  const Clock::duration took = now - std::max(first, last_get_done_);
  // Consecutive gets of one size and traffic are one measurement of as many uses
  // (MeasuredChoice::record): the batch's time is all that was measured.
  for (std::size_t i = 0; i < k;) {
    std::size_t e = i + 1;
    while (e < k && jobs[e].len == jobs[i].len && jobs[e].traffic == jobs[i].traffic &&
           jobs[e].settled == jobs[i].settled)
      ++e;
    const double share = total ? static_cast<double>(jobs[i].len) / static_cast<double>(total)
                               : 1.0 / static_cast<double>(k);
    if (!jobs[i].settled)
      t_.record_copy(m, jobs[i].len, std::chrono::duration_cast<Clock::duration>(took * share),
                     jobs[i].traffic, static_cast<std::uint32_t>(e - i));
    for (; i < e; ++i) get_ended();
  }
  last_get_done_ = now;
}

// The chunk area is a byte ring: the owner appends the bytes of consecutive gets in steps of
// at most one chunk (fragment_size), the requester drains whatever is there. Small gets thus
// share the ring (many in flight at once) and large ones still overlap both copies.
int ShmEndpoint::serve_chunks() {
  int n = 0;
  ChunkShared* sh = out_chunks_.shared;
  const std::size_t ring = out_chunks_.nchunks * out_chunks_.chunk_bytes;
  while (!serve_.empty()) {
    ServeJob& j = serve_.front();
    // At most `depth` steps of `fragment` bytes in flight (the pair's geometry unless
    // RMP_TUNE=adaptive asked for less).
    const std::size_t window = std::min(ring, j.fragment * j.depth);
    std::size_t room = window - std::min(window, static_cast<std::size_t>(produced_ - consumed_cache_));
    if (room == 0) {
      consumed_cache_ = sh->consumed.load(std::memory_order_acquire);
      room = window - std::min(window, static_cast<std::size_t>(produced_ - consumed_cache_));
      if (room == 0) break;
    }
    const std::size_t at = static_cast<std::size_t>(produced_ % ring);
    const std::size_t len = std::min({j.fragment, j.len - j.off, room, ring - at});
    if (j.streaming) {
      rt::copy_streaming(out_chunks_.chunks + at, j.src + j.off, len);  // fenced before produced
    } else {
      copy_bytes(out_chunks_.chunks + at, j.src + j.off, len);
    }
    j.off += len;
    produced_ += len;
    sh->produced.store(produced_, std::memory_order_release);
    std::uint64_t& peak = t_.counters().chunks_in_flight_peak;  // in steps of `fragment`
    peak = std::max<std::uint64_t>(peak, (produced_ - consumed_cache_ + j.fragment - 1) / j.fragment);
    ++n;
    if (j.off == j.len) serve_.pop_front();
  }
  return n;
}

int ShmEndpoint::drain_chunks() {
  int n = 0;
  ChunkShared* sh = in_chunks_.shared;
  const std::size_t ring = in_chunks_.nchunks * in_chunks_.chunk_bytes;
  while (!gets_.empty()) {
    GetJob& j = gets_.front();
    if (consumed_ == produced_cache_) {
      produced_cache_ = sh->produced.load(std::memory_order_acquire);
      if (consumed_ == produced_cache_) break;
    }
    // One fragment at a time, as the owner wrote them: the space returns to the owner sooner.
    const std::size_t at = static_cast<std::size_t>(consumed_ % ring);
    const std::size_t len = std::min({static_cast<std::size_t>(produced_cache_ - consumed_),
                                      j.fragment, j.len - j.off, ring - at});
    rt::copy_from_peer(j.dst + j.off, in_chunks_.chunks + at, len);  // the owner wrote it
    j.off += len;
    consumed_ += len;
    sh->consumed.store(consumed_, std::memory_order_release);
    ++t_.counters().rndv_fragments;
    ++n;
    if (j.off == j.len) {
      // A get the tuner explored with another geometry says nothing of how fast the chunk
      // copy is with the tuner's current one: the copy chooser does not hear of it (a burst of
      // such gets otherwise made the chunks look slow and the chooser leave them).
      // Nor of a settled get (GetHints): the caller's trial, not the chooser's.
      const double seconds =
          record_get(j.mode, j.len, j.posted, !j.tune.explore && !j.settled, j.traffic);
      if (j.tune.tuned && t_.get_tuner().observe(j.len, j.tune.setting, seconds))
        ++t_.counters().tune_moves;
      t_.complete_later(j.done, TStatus::ok);
      gets_.pop_front();
    }
  }
  return n;
}

// Requester side of split gets: publish a batch of the front ones (up to kSplitBatch), copy
// its own pieces with one process_vm_readv while the owner copies the second parts with one
// process_vm_writev, then whatever the owner did not come for, and complete the batch once
// every piece is in. One claim per call, so progress keeps polling the rings meanwhile.
// Batched, the ~1 us a system call costs before it copies is paid once for all the gets a
// bandwidth window has posted (standalone, 64 KiB, windows of 64: 26 GB/s a get at a time,
// 33-37 in batches of 4-16).
int ShmEndpoint::drive_split() {
  SplitShared* sh = out_chunks_.split;
  if (!split_live_) {
    // Up to kSplitBatch gets, and no more bytes than kSplitBatchBytes beyond the first.
    std::size_t k = 1, bytes = splits_.front().len;
    while (k < std::min(splits_.size(), kSplitBatch) && bytes + splits_[k].len <= kSplitBatchBytes)
      bytes += splits_[k++].len;
    bool owner_part = false;
    for (std::size_t i = 0; i < k; ++i) {
      const GetJob& j = splits_[i];
      const std::size_t cut = owner_cannot_help_ ? j.len : t_.split_piece(j.len);
      split_cut_[i] = cut;
      sh->gets[i].src.store(j.remote, std::memory_order_relaxed);
      sh->gets[i].dst.store(reinterpret_cast<std::uint64_t>(j.dst), std::memory_order_relaxed);
      sh->gets[i].len.store(j.len, std::memory_order_relaxed);
      sh->gets[i].cut.store(cut, std::memory_order_relaxed);
      owner_part = owner_part || cut < j.len;
    }
    split_count_ = static_cast<std::uint32_t>(k);
    split_mine_ = 0;
    split_err_ = 0;
    sh->count.store(split_count_, std::memory_order_relaxed);
    sh->owner_done.store(0, std::memory_order_relaxed);
    sh->redo_first.store(0, std::memory_order_relaxed);
    sh->redo_end.store(0, std::memory_order_relaxed);
    sh->word.store(std::uint64_t{++split_gen_} << 32 | 2 * split_count_, std::memory_order_release);
    split_live_ = true;
    // Only worth waking the owner when some get has a second part.
    if (owner_part) send_ctl(kAmSplitGet, {}, {}, nullptr);
  }
  const std::uint32_t k = split_count_, pieces = 2 * k;
  // Pieces [first, end) of the batch as this side reads them.
  auto copy = [&](std::uint32_t first, std::uint32_t end) {
    CmaSpan spans[2 * kSplitBatch];
    for (std::uint32_t p = first; p < end; ++p) {
      const GetJob& j = splits_[p % k];
      const auto [from, to] = split_piece_bytes(p, k, split_cut_[p % k], j.len);
      spans[p - first] = {j.dst + from, j.remote + from, to - from};
    }
    if (!split_err_)
      split_err_ = cross_memory_copy(peer_pid_, std::span(spans, end - first), false);
  };
  // Its own pieces first, all at once; then all the owner has not claimed.
  std::uint64_t w = sh->word.load(std::memory_order_acquire);
  while ((w >> 16 & 0xffff) < (w & 0xffff)) {
    const auto f = static_cast<std::uint32_t>(w >> 16 & 0xffff);
    const auto b = static_cast<std::uint32_t>(w & 0xffff);
    const std::uint32_t to = f < k ? std::min(k, b) : b;
    if (sh->word.compare_exchange_weak(w, w + (std::uint64_t{to - f} << 16),
                                       std::memory_order_acq_rel)) {
      copy(f, to);
      split_mine_ += to - f;
      return 1;
    }
  }
  // Every piece is claimed: wait for the owner's.
  if (split_mine_ + sh->owner_done.load(std::memory_order_acquire) < pieces) return 0;
  const std::uint32_t redo_first = sh->redo_first.load(std::memory_order_relaxed),
                      redo_end = sh->redo_end.load(std::memory_order_relaxed);
  owner_cannot_help_ = owner_cannot_help_ || redo_end > redo_first;
  copy(redo_first, redo_end);
  if (t_.cma_refused(split_err_)) {
    // Cross-memory attach is forbidden here: copy these gets through chunks instead.
    for (std::uint32_t i = 0; i < k; ++i) {
      const GetJob& j = splits_.front();
      start_chunk_get(j.dst, j.len, j.remote, j.done, false, CopyChooser::Traffic::stream,
                      j.settled);
      splits_.pop_front();
    }
    split_live_ = false;
    return 1;
  }
  if (split_err_) {
    log_warn("shm: split get of " + std::to_string(k) + " message(s) from pid " +
             std::to_string(peer_pid_) + " failed: " + std::strerror(split_err_));
  } else {
    record_batch(CopyChooser::Mode::split, splits_, k);
    t_.counters().shm_gets_split += k;
  }
  for (std::uint32_t i = 0; i < k; ++i) {
    const GetJob& j = splits_.front();
    if (split_err_) get_ended();
    t_.counters().rndv_fragments += split_cut_[i] < j.len ? 2 : 1;
    t_.complete_later(j.done, split_err_ ? TStatus::error : TStatus::ok);
    splits_.pop_front();
  }
  split_live_ = false;
  return 1;
}

// Owner side of split gets: claim the pieces left at the back of the batch (the second parts
// first) and write them into the requester's buffers with one call. Stops helping when no
// piece is left (the next batch sends a new message).
int ShmEndpoint::help_split() {
  SplitShared* sh = in_chunks_.split;
  std::uint64_t w = sh->word.load(std::memory_order_acquire);
  for (;;) {
    const auto f = static_cast<std::uint32_t>(w >> 16 & 0xffff);
    const auto b = static_cast<std::uint32_t>(w & 0xffff);
    if (f >= b) {
      helping_ = false;
      return 0;
    }
    // Read the descriptions before claiming: a successful claim proves they were current.
    const std::uint32_t k =
        std::clamp<std::uint32_t>(sh->count.load(std::memory_order_relaxed), 1, kSplitBatch);
    if (b > 2 * k) {  // not a batch as this side reads them: leave it to the requester
      helping_ = false;
      return 0;
    }
    const std::uint32_t lo = b > k ? std::max(f, k) : f;
    CmaSpan spans[2 * kSplitBatch];
    std::uint32_t copied = 0;
    for (std::uint32_t p = lo; p < b; ++p) {
      const SplitShared::Get& g = sh->gets[p % k];
      const std::uint64_t src = g.src.load(std::memory_order_relaxed);
      const std::uint64_t dst = g.dst.load(std::memory_order_relaxed);
      const std::uint64_t len = g.len.load(std::memory_order_relaxed);
      const std::uint64_t cut = std::min(g.cut.load(std::memory_order_relaxed), len);
      const auto [from, to] = split_piece_bytes(p, k, cut, len);
      spans[p - lo] = {reinterpret_cast<std::byte*>(src + from), dst + from, to - from};
      copied += to > from;
    }
    if (!sh->word.compare_exchange_weak(w, w - (b - lo), std::memory_order_acq_rel)) continue;
    const int err = cross_memory_copy(peer_pid_, std::span(spans, b - lo), true);
    if (err) {
      // The requester copies these pieces itself, and every later one.
      sh->redo_first.store(lo, std::memory_order_relaxed);
      sh->redo_end.store(b, std::memory_order_relaxed);
      help_broken_ = true;
      helping_ = false;
    }
    sh->owner_done.fetch_add(b - lo, std::memory_order_release);
    t_.counters().shm_split_helped += copied;
    return 1;
  }
}

int ShmEndpoint::advance() {
  int n = 0;
  while (!ctl_.empty()) {
    PendingCtl& p = ctl_.front();
    if (out_.push(p.am, std::span(p.hdr.data(), p.hlen), p.payload, false) != TStatus::ok) break;
    if (p.done) t_.complete_later(p.done, TStatus::ok);
    ctl_.pop_front();
    ++n;
  }
  if (!serve_.empty()) n += serve_chunks();
  if (!gets_.empty()) n += drain_chunks();
  if (!splits_.empty()) n += drive_split();
  if (helping_) n += help_split();
  if (!waiting_.empty()) n += start_waiting();
  return n;
}

// ---------------------------------------------------------------------------------------------

// Bytes of the chunks' byte ring: the chunks in flight (fragment_size x pipeline_depth) and at
// least cfg.ring_bytes, in whole chunks. Consecutive gets walk through the whole ring, so the
// owner writes each chunk again one ring later. A ring no larger than the requester's private
// cache (L2) still has that chunk's lines in the requester's cache then (it has just read
// them), and every store into them waits for the requester's core to give its line up: with
// 512 KiB chunks, two in flight, a ring of 1 MiB (this host's L2) ran the pipelined copy at
// 15-19 GB/s where 2 MiB ran it at 36-40 (cores near, 1 MiB gets forced through the chunks;
// far apart the double copy is not taken either way). Past the private cache the lines come
// from the shared one. Chosen by the copy chooser as it measures, cores near, 8 pairs
// interleaved: bandwidth of 128 KiB-2 MiB 1.07-1.39x and bidirectional bandwidth of 32 KiB-2
// MiB 1.02-1.8x that of the 1 MiB ring; far apart 0.97-1.04x.
std::size_t ring_chunks(const ShmConfig& cfg, std::size_t chunk) {
  const std::size_t bytes = std::max(cfg.chunk_bytes * cfg.nchunks, cfg.ring_bytes);
  return std::max<std::size_t>(2, (bytes + chunk - 1) / chunk);
}

// Chunks in the byte ring of a tuned pair (RMP_TUNE=adaptive): chunks of the largest candidate
// fragment, as many as the static ring's bytes hold; larger windows the tuner tries clamp to
// the ring. Sized for the largest fragment x the largest depth (8 MiB by default), the ring
// was colder still: 64 KiB gets fell from 29 to 13 GB/s (benchmarks/tune-proof, interleaved).
// (That measurement, on an earlier VM of this kind and before the owner wrote its chunks at
// attach, also had 64 KiB gets at 12.7 GB/s with a 2 MiB ring against 22 with 1 MiB; here,
// since, a 2 MiB ring ran them alike in one direction and 1.57x faster both ways.) At most 16
// chunks: with fragment_size 32 KiB or less a tuned pair's ring stays below 2 x L2.
std::size_t tuned_nchunks(const ShmConfig& cfg, std::size_t chunk) {
  return std::min<std::size_t>(ring_chunks(cfg, chunk), 16);
}

ShmTransport::ShmTransport(const JobIdentity& id, const ShmConfig& cfg, AmSink& sink, Counters& c)
    : id_(id),
      cfg_(cfg),
      eager_stores_(cfg.copy == ShmConfig::Copy::automatic ? EagerStores::Force::none
                    : shm_may_stream(cfg.copy)             ? EagerStores::Force::streaming
                                                           : EagerStores::Force::cached),
      sink_(sink),
      c_(c),
      cma_ok_(cfg.cma),
      chooser_(cfg.cma ? 0b1111u : CopyChooser::kChunkModes),
      huge_(cfg.huge_pages),
      get_tuner_(cfg.chunk_bytes, cfg.nchunks, cfg.chunk_bytes * ring_chunks(cfg, cfg.chunk_bytes),
                 cfg.tune),
      seg_chunk_bytes_(cfg.tune ? std::max(cfg.chunk_bytes, get_tuner_.max_fragment())
                                : cfg.chunk_bytes),
      seg_nchunks_(cfg.tune ? tuned_nchunks(cfg, seg_chunk_bytes_)
                            : ring_chunks(cfg, seg_chunk_bytes_)) {
  if (id_.local_size <= 1) return;
  const std::string name = "/rmp-" + id_.job_id + "-n" + std::to_string(id_.node_id);
  const std::size_t words = (static_cast<std::size_t>(id_.local_size) + 63) / 64;
  bell_stride_ = kLine + round_up(words * 8, kLine);
  const std::size_t total = kLine + bell_stride_ * static_cast<std::size_t>(id_.local_size);
  NodeHeader* h = nullptr;
  if (id_.local_rank == 0) {
    node_ = create_segment(name, total);
    if (!node_)
      throw Error(Errc::transport, "shm: node segment " + name +
                                       " exists already (a stale segment of another job?)");
    h = static_cast<NodeHeader*>(node_.data());
    h->magic = kMagic;
    h->local_size = static_cast<std::uint32_t>(id_.local_size);
    h->total = total;
    h->bell_stride = bell_stride_;
    h->mapped.store(0, std::memory_order_relaxed);
    h->ready.store(1, std::memory_order_release);
  } else {
    node_ = open_segment(name, sizeof(NodeHeader), ready_size_of_node,
                         std::chrono::duration_cast<std::chrono::milliseconds>(kSegmentTimeout));
    h = static_cast<NodeHeader*>(node_.data());
    if (h->magic != kMagic)
      throw Error(Errc::transport,
                  "shm: node segment " + name + " was laid out by another rmp build (magic " +
                      std::to_string(h->magic) + ", this build's " + std::to_string(kMagic) + ")");
    if (h->local_size != static_cast<std::uint32_t>(id_.local_size))
      throw Error(Errc::transport, "shm: node segment " + name + " does not match this job");
  }
  // The last local rank to map the segment removes its name: nothing is left in /dev/shm.
  if (h->mapped.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<std::uint32_t>(id_.local_size))
    unlink_segment(name);
}

ShmEndpoint* ShmTransport::attach(int local_peer, Mapping seg) {
  auto* h = static_cast<PairHeader*>(seg.data());
  if (h->magic != kMagic)
    throw Error(Errc::transport,
                "shm: the pair segment with local rank " + std::to_string(local_peer) +
                    " was laid out by another rmp build (magic " + std::to_string(h->magic) +
                    ", this build's " + std::to_string(kMagic) + ")");
  const int my_dir = id_.local_rank < local_peer ? 0 : 1;
  const int peer_world = h->world[1 - my_dir];
  const int peer_pid = h->pid[1 - my_dir];
  touch_for_writes(seg);  // (shared_memory.hpp: what a first write to each page costs)
  auto ep = std::make_unique<ShmEndpoint>(*this, peer_world, peer_pid, std::move(seg), my_dir,
                                          eager_stores_);
  ShmEndpoint* raw = ep.get();
  eps_.push_back(std::move(ep));
  by_local_[local_peer] = raw;
  ++c_.shm_segments;
  return raw;
}

Endpoint* ShmTransport::connect(int peer, std::span<const std::byte> peer_address) {
  if (peer_address.size() != sizeof(ShmAddress)) return nullptr;
  ShmAddress a;
  std::memcpy(&a, peer_address.data(), sizeof a);
  if (a.node != id_.node_id || id_.local_size <= 1 || a.local_rank == id_.local_rank)
    return nullptr;
  if (auto it = by_local_.find(a.local_rank); it != by_local_.end()) return it->second;

  const std::string name = pair_name(id_.local_rank, a.local_rank);
  // The pair is as large as either rank wants it: both send into it, and ranks need not agree
  // on thresholds (a rank whose eager_threshold is larger sends larger eager messages, which
  // a ring sized for the peer alone rejected: the message was lost). Chunks: the larger size,
  // as many as hold the larger of the two chunk areas (both maxima would make 1 MiB x 16 of
  // 1 MiB x 2 against 64 KiB x 16).
  const std::size_t ring_lines = std::max<std::size_t>(cfg_.ring_lines, a.ring_lines);
  const std::size_t data_bytes = std::max<std::size_t>(cfg_.data_bytes, a.data_bytes);
  const std::size_t chunk_bytes = std::max<std::size_t>(seg_chunk_bytes_, a.chunk_bytes);
  const std::size_t chunk_area =
      std::max<std::size_t>(seg_chunk_bytes_ * seg_nchunks_, a.chunk_bytes * a.nchunks);
  const std::size_t nchunks =
      std::max<std::size_t>(2, round_up(chunk_area, chunk_bytes) / chunk_bytes);
  const DirLayout d(ring_lines, data_bytes, nchunks, chunk_bytes);
  const std::size_t hdr_size = round_up(sizeof(PairHeader), kPage);
  const std::size_t total = hdr_size + 2 * d.size;
  // Populated at once: the rings and chunks are all used soon, and faulting them in on the
  // data path made the first gets of each copy mechanism look 4-5x slower than they are
  // (the copy chooser then avoided the pipelined copy for hundreds of gets).
  Mapping seg = create_segment(name, total, Populate::yes);
  const int my_dir = id_.local_rank < a.local_rank ? 0 : 1;
  if (seg) {
    auto* h = static_cast<PairHeader*>(seg.data());
    h->magic = kMagic;
    h->nlines = static_cast<std::uint32_t>(ring_lines);
    h->total = total;
    h->data_bytes = data_bytes;
    h->chunk_bytes = chunk_bytes;
    h->nchunks = nchunks;
    h->dir_off[0] = hdr_size;
    h->dir_off[1] = hdr_size + d.size;
    h->world[my_dir] = id_.rank;
    h->world[1 - my_dir] = peer;
    h->pid[my_dir] = pid_;
    h->pid[1 - my_dir] = a.pid;
    h->mapped.store(1, std::memory_order_relaxed);
    h->ready.store(1, std::memory_order_release);
    // Tell the peer: it maps the pair at its next progress and removes the name. Before
    // attaching, which touches the pages: the peer touches its side meanwhile (2 ranks, lazy
    // connect: first message 12 ms when this rank touched its pages before ringing).
    bell_bits(a.local_rank)[id_.local_rank / 64].fetch_or(1ull << (id_.local_rank % 64),
                                                          std::memory_order_release);
    bell(a.local_rank)->summary.fetch_or(1, std::memory_order_release);
    return attach(a.local_rank, std::move(seg));
  }
  // The peer created the pair at the same moment; map its segment.
  seg = open_segment(name, sizeof(PairHeader), ready_size_of_pair,
                     std::chrono::duration_cast<std::chrono::milliseconds>(kSegmentTimeout),
                     Populate::yes);
  if (static_cast<PairHeader*>(seg.data())->mapped.fetch_add(1) + 1 == 2) unlink_segment(name);
  return attach(a.local_rank, std::move(seg));
}

[[gnu::noinline]] int ShmTransport::accept_new() {
  Doorbell* b = bell(id_.local_rank);
  if (b->summary.exchange(0, std::memory_order_acq_rel) == 0) return 0;
  int n = 0;
  const std::size_t words = (static_cast<std::size_t>(id_.local_size) + 63) / 64;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t bits = bell_bits(id_.local_rank)[w].exchange(0, std::memory_order_acq_rel);
    while (bits) {
      const int peer_local = static_cast<int>(w * 64) + std::countr_zero(bits);
      bits &= bits - 1;
      if (by_local_.count(peer_local)) continue;
      const std::string name = pair_name(id_.local_rank, peer_local);
      Mapping seg = open_segment(
          name, sizeof(PairHeader), ready_size_of_pair,
          std::chrono::duration_cast<std::chrono::milliseconds>(kSegmentTimeout), Populate::yes);
      if (static_cast<PairHeader*>(seg.data())->mapped.fetch_add(1) + 1 == 2)
        unlink_segment(name);
      attach(peer_local, std::move(seg));
      ++n;
    }
  }
  return n;
}

int ShmTransport::run_cma() {
  // One copy a call, so that progress polls the rings between them: a peer's requests and
  // completions are seen a copy later instead of a whole queue of them later, and in traffic
  // both ways neither core ends its window waiting while the other still works through a
  // queue (2 ranks, bidirectional windows of 64 single-copy gets, interleaved: 1 MiB 18.7
  // GB/s against 15.6, 4 MiB 12.3 against 9.9).
  const CmaJob j = cma_.front();
  cma_.pop_front();
  const int err = cross_memory_copy(j.pid, j.local, j.remote, j.len, j.write);
  if (cma_refused(err)) {
    if (!j.write) {
      j.done->trial = true;  // its time holds the refused attempt and the change of mechanism
      j.ep->start_chunk_get(j.local, j.len, j.remote, j.done, false, CopyChooser::Traffic::stream,
                            j.settled);
    } else {
      (void)j.ep->put({j.local, j.len}, j.remote, RemoteKey{}, j.done);
    }
    return 1;
  }
  if (err) {
    log_warn(std::string("shm: process_vm_") + (j.write ? "writev" : "readv") + " of " +
             std::to_string(j.len) + " bytes from pid " + std::to_string(j.pid) +
             " failed: " + std::strerror(err));
    if (!j.write) j.ep->get_ended();
  } else if (!j.write) {
    j.ep->record_get(CopyChooser::Mode::single, j.len, j.posted, !j.settled, j.traffic);
    ++c_.shm_gets_single;
    ++c_.rndv_fragments;
  }
  complete_later(j.done, err ? TStatus::error : TStatus::ok);
  return 1;
}

// The empty poll is the body of every waiting loop: a load per peer and three tests, with
// everything else out of line (a message waiting, a new peer, copies or completions in
// progress). Inlining all of it had made an empty poll ~70 instructions, mostly register
// saves and restores.
int ShmTransport::progress() {
  int n = 0;
  // By index: a handler may connect a new peer and grow eps_.
  for (std::size_t i = 0; i < eps_.size(); ++i)
    if (eps_[i]->ready()) n += eps_[i]->poll(sink_, c_);
  if (node_ && bell(id_.local_rank)->summary.load(std::memory_order_relaxed)) [[unlikely]]
    n += accept_new();
  if (!busy_.empty() || !cma_.empty() || !done_.empty()) [[unlikely]]
    n += progress_work();
  return n;
}

[[gnu::noinline]] int ShmTransport::progress_work() {
  int n = 0;
  if (!busy_.empty()) {
    for (std::size_t i = 0; i < busy_.size();) {
      n += busy_[i]->advance();
      if (busy_[i]->busy()) {
        ++i;
      } else {
        busy_[i] = busy_.back();
        busy_.pop_back();
      }
    }
  }
  if (!cma_.empty()) n += run_cma();
  if (!done_.empty()) {
    std::vector<std::pair<Completion*, TStatus>> done;
    done.swap(done_);
    for (auto [c, s] : done) c->fn(c, s);
    n += static_cast<int>(done.size());
  }
  return n;
}

}  // namespace

TransportCaps shm_static_caps() {
  TransportCaps k;
  k.max_inline = max_inline_bytes();
  k.single_unit_inline = kLine - kLineHeader;
  k.min_pipeline_depth = 2;
  k.get_fill_bytes = kMinPiece;
  return k;
}

std::unique_ptr<Transport> make_shm_transport(const JobIdentity& id, const ShmConfig& cfg,
                                              AmSink& sink, Counters& counters) {
  return std::make_unique<ShmTransport>(id, cfg, sink, counters);
}

}  // namespace rmp::rt
