// Process management and I/O of one job (job.hpp).
//
// Everything happens on one thread around one epoll loop: the store's sockets, the ranks'
// stdout/stderr pipes, rlaunch's own stdout/stderr when their readers lag, a signalfd for
// SIGCHLD and the signals of SignalSetup, and stdin when it is a terminal. Deadlines (--timeout,
// the grace periods) are checked after every wake-up.
#include "launcher/job.hpp"
#include "launcher/hosts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>

#include "launcher/event_loop.hpp"
#include "launcher/fd.hpp"
#include "launcher/kvs_server.hpp"
#include "launcher/output.hpp"
#include "runtime/bootstrap/wire.hpp"

extern char** environ;  // POSIX; no standard C++ header declares it

namespace rmp::launcher {
namespace {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError("getrandom", errno);
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char b : raw) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return std::to_string(sig) + " (" +
         (abbrev != nullptr ? "SIG" + std::string(abbrev) : "unknown") + ")";
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
}

// Whether `socket` is a Unix socket nobody listens on: a connection to it is refused. (A live
// store accepts it and drops it unheard: without the token it answers nothing.)
bool nobody_listens(const std::string& socket) {
  sockaddr_un addr{};
  if (socket.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const bool refused = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 &&
                       errno == ECONNREFUSED;
  ::close(fd);
  return refused;
}

// Removes this user's rlaunch-XXXXXX directories under `base` whose store nobody listens on
// any more: those of launchers killed by SIGKILL (a batch system's time limit), which could not
// clean up. Only a directory holding a socket bound more than a minute ago (a live launcher
// listens microseconds after binding) to which a connection is refused.
void remove_stale_socket_dirs(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  const auto now = std::chrono::system_clock::now();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != sizeof("rlaunch-XXXXXX") - 1 || name.compare(0, 8, "rlaunch-") != 0)
      continue;
    const std::string dir = base + "/" + name, socket = dir + "/kvs";
    struct stat ds = {};
    struct stat ss = {};
    if (::lstat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode) || ds.st_uid != ::geteuid() ||
        ::lstat(socket.c_str(), &ss) != 0 || !S_ISSOCK(ss.st_mode) || ss.st_uid != ::geteuid())
      continue;
    const auto bound = std::chrono::system_clock::from_time_t(ss.st_mtim.tv_sec);
    if (now - bound < std::chrono::minutes(1) || !nobody_listens(socket)) continue;
    ::unlink(socket.c_str());
    ::rmdir(dir.c_str());  // fails, harmlessly, if anything else is in it
  }
  ::closedir(d);
}

// A private directory for the store's socket: mode 0700 (mkdtemp), so only this user can even
// reach the socket; the token then tells this job's ranks from this user's other processes.
// Directories that killed launchers left are removed first.
class SocketDir {
public:
  SocketDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    // sun_path holds 107 characters; a socket under a deep $TMPDIR would not fit.
    if (base.size() + sizeof("/rlaunch-XXXXXX/kvs") > sizeof(sockaddr_un{}.sun_path)) base = "/tmp";
    remove_stale_socket_dirs(base);
    std::string templ = base + "/rlaunch-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw SystemError("cannot create a private directory " + templ + " for the store's socket",
                        errno);
    }
    dir_ = templ;
    socket_ = dir_ + "/kvs";
  }
  ~SocketDir() {
    ::unlink(socket_.c_str());
    ::rmdir(dir_.c_str());
  }
  SocketDir(const SocketDir&) = delete;
  SocketDir& operator=(const SocketDir&) = delete;
  const std::string& socket_path() const { return socket_; }

private:
  std::string dir_;
  std::string socket_;
};

// Blocks the signals rlaunch handles through its signalfd and ignores SIGPIPE (a closed stdout
// must not kill the launcher while ranks run); restores both for each child before exec.
// Handled, as mpirun does: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the job; SIGUSR1 and
// SIGUSR2 (a batch system's "time is nearly up") go on to the ranks' processes; SIGTSTP (Ctrl-Z)
// stops the ranks and then rlaunch, and SIGCONT (fg, bg) continues them. (The ranks live in process
// groups of their own, so the terminal's signals reach rlaunch alone; unhandled, SIGUSR1 ended
// rlaunch and the ranks with it without a word, and Ctrl-Z stopped rlaunch while the ranks ran on.)
// A signal ignored when rlaunch starts (nohup; a background job of a non-interactive shell)
// stays ignored, by rlaunch and its ranks, as for any other program: blocked, an ignored
// signal was still read from the signalfd, so a SIGHUP at logout ended a nohup'd job, and a
// SIGINT was forwarded to ranks ignoring it and escalated to SIGKILL.
class SignalSetup {
public:
  SignalSetup() {
    sigemptyset(&handled_);
    sigaddset(&handled_, SIGCHLD);
    sigaddset(&handled_, SIGCONT);  // blocked, it still continues rlaunch; then read here
    for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP}) {
      struct sigaction now {};
      if (::sigaction(s, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
      sigaddset(&handled_, s);
    }
    if (::sigprocmask(SIG_BLOCK, &handled_, &old_mask_) != 0)
      throw SystemError("sigprocmask", errno);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
    // SIGCHLD ignored by whoever started rlaunch would have the kernel reap the ranks itself,
    // and their exit statuses would be lost to waitpid.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGCHLD, &dfl, &old_chld_);
    fd_.reset(::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_) throw SystemError("signalfd", errno);
  }
  // The mask is not restored on the way out: a SIGINT still pending in the signalfd would
  // then kill rlaunch just before it reports the job's status.
  ~SignalSetup() = default;
  SignalSetup(const SignalSetup&) = delete;
  SignalSetup& operator=(const SignalSetup&) = delete;
  int fd() const { return fd_.get(); }
  // In the child: what the program would have had had rlaunch not been in between.
  void restore_in_child() const noexcept {
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

private:
  sigset_t handled_{};
  sigset_t old_mask_{};
  struct sigaction old_pipe_ {};
  struct sigaction old_chld_ {};
  UniqueFd fd_;
};

// Removes /dev/shm/rmp-<job id>-*: segments a crashed rank created but nobody unlinked.
void remove_job_segments(const std::string& job_id) {
  const std::string prefix = std::string(wire::kShmPrefix) + job_id + "-";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const int dfd = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (std::string_view(e->d_name).starts_with(prefix)) ::unlinkat(dfd, e->d_name, 0);
  }
  ::closedir(dir);
}

struct Rank {
  pid_t pid = -1;
  bool running = false;  // forked and not yet reaped
  bool said_hello = false;
  bool finalized = false;
};

// One rank's stdout or stderr pipe, forwarded line by line.
struct OutputPipe {
  UniqueFd fd;
  LineForwarder forwarder;
};

class Job {
public:
  explicit Job(const JobSpec& spec)
      : spec_(spec),
        token_(random_hex(16)),  // 128-bit secret, never on a command line
        job_id_(random_hex(6)),  // public: names /dev/shm segments
        binding_(spec.bind_to, spec.np),
        ranks_(static_cast<std::size_t>(spec.np)) {}

  ~Job() {
    // Only reached with ranks still running when rlaunch itself failed (an exception out of
    // run()): never leave them behind.
    for (const Rank& rank : ranks_) {
      if (rank.running) ::kill(-rank.pid, SIGKILL);
    }
    remove_job_segments(job_id_);
  }

  int run() {
    started_ = Clock::now();
    // Processes the ranks leave behind are re-parented to rlaunch, not to init: reap() collects
    // them as they end, and stop_leftovers() sees which are still running (an init that never
    // reaps would keep them as zombies, indistinguishable from the running).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (spec_.timeout) timeout_at_ = started_ + *spec_.timeout;
    loop_.add(signals_.fd(), EPOLLIN, [this](std::uint32_t) { on_signals(); });
    kvs_ = std::make_unique<KvsServer>(
        loop_, dir_.socket_path(), token_, spec_.np,
        KvsServer::Listener{
            .hello = [this](int r) { on_hello(r); },
            .finalized = [this](int r) { ranks_[static_cast<std::size_t>(r)].finalized = true; },
            .aborted = [this](int r, int code, std::string why) { on_abort(r, code, why); },
        });
    setup_stdin();
    spawn_all();

    while (!finished()) {
      loop_.wait(next_deadline());
      check_sink(stdout_);
      check_sink(stderr_);
      const auto now = Clock::now();
      kvs_->expire(now);
      check_deadlines(now);
    }
    // A stopped job leaves nothing behind: stragglers in the ranks' groups (a background
    // child holding a pipe) get SIGKILL too.
    if (stop_started_) signal_job(SIGKILL);
    else stop_leftovers();
    shut_down_io();
    // Output lost to a failed write (a full disk) fails a job that otherwise succeeded.
    return status_.value_or(output_failed_ ? 1 : 0);
  }

private:
  // ---- start -----------------------------------------------------------------------------

  void setup_stdin() {
    null_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null_fd_) throw SystemError("open /dev/null", errno);
    if (::isatty(0) != 0) {
      if (::tcgetpgrp(0) != ::getpgrp()) {
        // Started in the background: reading the terminal would stop rlaunch (SIGTTIN) the
        // moment the user types something, so rank 0 gets /dev/null, as `cmd &` would.
        rank0_stdin_.reset(::dup(null_fd_.get()));
        return;
      }
      // Rank 0 is in its own process group, so reading the terminal itself would stop it
      // (SIGTTIN): rlaunch reads the terminal and feeds rank 0 a pipe instead.
      Pipe p = make_pipe();
      set_nonblocking(p.write.get());
      rank0_stdin_ = std::move(p.read);
      stdin_pipe_ = std::move(p.write);
      loop_.add(0, EPOLLIN, [this](std::uint32_t) { forward_stdin(); });
      loop_.add(stdin_pipe_.get(), 0, [this](std::uint32_t ev) {
        if (ev & (EPOLLERR | EPOLLHUP)) return close_stdin_forwarding();
        flush_stdin();
      });
    }
    // Otherwise (file, pipe, /dev/null) rank 0 reads rlaunch's stdin directly: nothing to copy,
    // and EOF reaches it exactly when it reaches rlaunch.
  }

  std::vector<std::string> base_environment() const {
    std::vector<std::string> env;
    std::vector<std::string_view> replaced(std::begin(wire::kLauncherSetVariables),
                                           std::end(wire::kLauncherSetVariables));
    for (const auto& [name, value] : spec_.env) replaced.push_back(name);
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      const auto name = entry.substr(0, entry.find('='));
      if (std::find(replaced.begin(), replaced.end(), name) == replaced.end())
        env.emplace_back(entry);
    }
    // A variable given twice (-x A=1 -x A=2, or -x RMP_PROFILE=… with --profile) appears once,
    // with its last value: with duplicates, which one a program sees depends on its libc.
    for (std::size_t i = 0; i < spec_.env.size(); ++i) {
      const auto& name = spec_.env[i].first;
      const bool later =
          std::any_of(spec_.env.begin() + static_cast<std::ptrdiff_t>(i) + 1, spec_.env.end(),
                      [&](const auto& e) { return e.first == name; });
      if (!later) env.push_back(name + "=" + spec_.env[i].second);
    }
    const auto n = std::to_string(spec_.np);
    env.push_back(std::string(wire::kEnvSize) + "=" + n);
    env.push_back(std::string(wire::kEnvLocalSize) + "=" + n);  // one node: every rank is local
    env.push_back(std::string(wire::kEnvNodeId) + "=0");
    if (binding_.cores() > 0)  // 0: hwloc saw none; the ranks then count the online CPUs
      env.push_back(std::string(wire::kEnvLocalCores) + "=" + std::to_string(binding_.cores()));
    env.push_back(std::string(wire::kEnvKvs) + "=" + std::string(wire::kKvsUnixPrefix) +
                  dir_.socket_path());
    env.push_back(std::string(wire::kEnvJobToken) + "=" + token_);
    env.push_back(std::string(wire::kEnvJobId) + "=" + job_id_);
    return env;
  }

  void spawn_all() {
    auto env = base_environment();
    const std::size_t rank_slot = env.size();
    env.emplace_back();  // RMP_RANK, filled per rank
    env.emplace_back();  // RMP_LOCAL_RANK
    std::vector<char*> argv;
    for (const auto& a : spec_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    for (int r = 0; r < spec_.np && !status_; ++r) {
      env[rank_slot] = std::string(wire::kEnvRank) + "=" + std::to_string(r);
      env[rank_slot + 1] = std::string(wire::kEnvLocalRank) + "=" + std::to_string(r);
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      try {
        spawn(r, argv, envp);
      } catch (const SystemError& e) {
        // Out of descriptors or processes: the ranks already started are stopped like any
        // failed job, not abandoned.
        fail(1, "cannot start rank " + std::to_string(r) + " of " + std::to_string(spec_.np) +
                    ": " + e.what());
      }
    }
    // rlaunch's copy of rank 0's stdin pipe: without closing it, rank 0 leaving would never
    // show up as EPIPE on the forwarding side.
    rank0_stdin_.reset();
  }

  void spawn(int r, const std::vector<char*>& argv, const std::vector<char*>& envp) {
    Pipe out = make_pipe();
    Pipe err = make_pipe();
    Pipe exec_status = make_pipe();  // CLOEXEC: EOF means exec succeeded, 4 bytes are its errno
    const int in_fd = r != 0 ? null_fd_.get() : rank0_stdin_ ? rank0_stdin_.get() : 0;

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw SystemError("fork", errno);
    if (pid == 0) {
      // Child. rlaunch is single-threaded, so anything the parent's state allows is safe here;
      // still, only system calls between fork and exec.
      ::setpgid(0, 0);  // own process group: rlaunch's signals reach the rank's whole tree
      // Ranks live in their own groups, out of reach of a kill aimed at rlaunch's: if rlaunch
      // itself is SIGKILLed (a CI timeout), the kernel ends the ranks rather than orphan them.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // rlaunch died before the line above
      ::dup2(in_fd, 0);
      ::dup2(out.write.get(), 1);
      ::dup2(err.write.get(), 2);
      signals_.restore_in_child();
      binding_.apply_in_child(r);
      // The rank's own environment also decides the PATH search (-x PATH=… applies).
      environ = const_cast<char**>(envp.data());
      ::execvp(argv[0], argv.data());
      const int e = errno;
      (void)!::write(exec_status.write.get(), &e, sizeof(e));
      ::_exit(127);
    }

    ::setpgid(pid, pid);  // also here, so the group exists before any kill(-pid) from us
    Rank& rank = ranks_[static_cast<std::size_t>(r)];
    rank.pid = pid;
    rank.running = true;
    ++running_;
    rank_of_pid_[pid] = r;
    out.write.reset();
    err.write.reset();
    exec_status.write.reset();
    add_output(r, std::move(out.read), stdout_);
    add_output(r, std::move(err.read), stderr_);

    int e = 0;
    ssize_t n;
    while ((n = ::read(exec_status.read.get(), &e, sizeof(e))) < 0 && errno == EINTR) {
    }
    if (n == static_cast<ssize_t>(sizeof(e))) {
      std::string why = std::strerror(e);
      // ENOENT for a file that is there: what it needs to run is missing (bash: "required
      // file not found").
      const std::string& program = spec_.command[0];
      if (e == ENOENT && program.find('/') != std::string::npos &&
          ::access(program.c_str(), F_OK) == 0)
        why +=
            " (the file is there: the interpreter its #! line names, or the loader it needs, "
            "is not)";
      fail(127, "cannot execute '" + program + "': " + why);
    }
  }

  void add_output(int r, UniqueFd fd, OutputSink& sink) {
    set_nonblocking(fd.get());
    const int raw = fd.get();
    std::string prefix = spec_.tag_output ? "[" + std::to_string(r) + "] " : "";
    auto pipe = std::make_unique<OutputPipe>(
        OutputPipe{std::move(fd), LineForwarder(sink, std::move(prefix))});
    OutputPipe* p = pipe.get();
    outputs_.emplace(raw, std::move(pipe));
    watch_output(*p);
  }

  void watch_output(OutputPipe& p) {
    loop_.add(p.fd.get(), EPOLLIN, [this, &p](std::uint32_t) { read_output(p, false); });
  }

  // ---- I/O -------------------------------------------------------------------------------

  // Reads what the pipe holds; at EOF passes on the unterminated rest and closes it. With
  // final (the job is over), reads what is there now and closes it even without EOF.
  void read_output(OutputPipe& p, bool final) {
    char buf[65536];
    // Bounded: one busy rank must not starve the others (epoll is level-triggered, so the rest
    // is read on the next round), and a straggler still writing must not hold up the end.
    const int rounds = final ? 256 : 16;
    OutputSink& sink = p.forwarder.sink();
    for (int round = 0; round < rounds; ++round) {
      if (sink.queued() >= OutputSink::kHighWater) {
        if (!final) return hold_outputs(sink);
        drain(sink);  // the job is over: waiting for the reader holds up nothing else
      }
      const ssize_t n = ::read(p.fd.get(), buf, sizeof(buf));
      if (n > 0) {
        p.forwarder.feed(std::string_view(buf, static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && !final) return;
      return close_output(p);  // EOF, a read error, or nothing more now at the end
    }
    if (final) close_output(p);
  }

  // ---- rlaunch's stdout and stderr ---------------------------------------------------------

  // What the job does about one of them.
  struct Flow {
    bool held = false;     // its reader lags: the ranks' pipes of this stream are not read
    bool handled = false;  // its failure has been dealt with (check_sink)
  };
  Flow& flow(const OutputSink& sink) { return &sink == &stdout_ ? stdout_flow_ : stderr_flow_; }
  const char* name_of(const OutputSink& sink) const {
    return &sink == &stdout_ ? "standard output" : "standard error";
  }
  // The ranks' pipes forwarded to it (their descriptors: a caller may close them).
  std::vector<int> pipes_of(const OutputSink& sink) const {
    std::vector<int> fds;
    for (const auto& [fd, pipe] : outputs_)
      if (&pipe->forwarder.sink() == &sink) fds.push_back(fd);
    return fds;
  }

  // Its reader lags (kHighWater queued): stop reading the ranks' pipes of this stream, so they
  // wait in write() as in any pipeline, until the queue has drained to a quarter. The pipes
  // leave the loop meanwhile: with no events asked for, epoll still reports a pipe whose
  // writer has gone (EPOLLHUP), and its handler ran again at every wait.
  void hold_outputs(OutputSink& sink) {
    Flow& f = flow(sink);
    if (f.held || sink.poll_fd() < 0) return;
    f.held = true;
    for (const int fd : pipes_of(sink)) loop_.remove(fd);
    loop_.add(sink.poll_fd(), EPOLLOUT, [this, &sink](std::uint32_t) {
      sink.flush();
      if (sink.queued() <= OutputSink::kHighWater / 4) release_outputs(sink);
    });
  }

  void release_outputs(OutputSink& sink) {
    Flow& f = flow(sink);
    if (!f.held) return;
    f.held = false;
    loop_.remove(sink.poll_fd());
    for (const int fd : pipes_of(sink)) watch_output(*outputs_.at(fd));
  }

  // Writes what is queued, waiting for the reader. SIGINT, SIGTERM, SIGHUP or SIGQUIT once the
  // ranks are gone (a second one, if one stopped the job) drop the rest, and all output after.
  void drain(OutputSink& sink) {
    if (!interrupted_after_) {
      sink.drain(signals_.fd(), [this] {
        on_signals();
        return interrupted_after_;
      });
    }
    if (interrupted_after_) {
      sink.flush();  // what the reader takes now still goes
      sink.discard();
    }
  }

  // A write to the sink failed. EPIPE (`rlaunch … | head`): the ranks' pipes of that stream
  // are closed, so their next writes fail as in a pipeline (SIGPIPE, unless they ignore it)
  // rather than run on with their output dropped. Any other error (ENOSPC) is reported and
  // fails the job; the ranks' output to it is read and dropped. Called between events only:
  // it closes pipes whose handlers may be running.
  void check_sink(OutputSink& sink) {
    Flow& f = flow(sink);
    if (f.handled || (!sink.closed() && !sink.failed())) return;
    f.handled = true;
    release_outputs(sink);
    if (sink.failed()) {
      output_failed_ = true;
      say(std::string("cannot write to ") + name_of(sink) + ": " + std::strerror(sink.error()) +
          "; the ranks' output to it is lost");
      return;
    }
    for (const int fd : pipes_of(sink)) {
      loop_.remove(fd);
      outputs_.erase(fd);
    }
  }

  void close_output(OutputPipe& p) {
    p.forwarder.finish();
    const int fd = p.fd.get();
    loop_.remove(fd);
    outputs_.erase(fd);  // destroys p
  }

  void forward_stdin() {
    if (stdin_buf_.size() >= kStdinBuffer) return;
    char buf[4096];
    const ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      // EOF (or EIO for a background job): rank 0 sees EOF once what was read is delivered.
      stdin_eof_ = true;
      loop_.remove(0);
    } else {
      stdin_buf_.append(buf, static_cast<std::size_t>(n));
    }
    flush_stdin();
  }

  void flush_stdin() {
    while (!stdin_buf_.empty()) {
      const ssize_t n = ::write(stdin_pipe_.get(), stdin_buf_.data(), stdin_buf_.size());
      if (n > 0) {
        stdin_buf_.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      return close_stdin_forwarding();  // EPIPE: rank 0 closed its stdin or exited
    }
    if (stdin_buf_.empty() && stdin_eof_) return close_stdin_forwarding();
    // Hold the terminal while rank 0 is not reading; resume when the pipe has room.
    if (!stdin_eof_)
      loop_.modify(0, stdin_buf_.size() >= kStdinBuffer ? 0u : static_cast<std::uint32_t>(EPOLLIN));
    loop_.modify(stdin_pipe_.get(), stdin_buf_.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  }

  void close_stdin_forwarding() {
    loop_.remove(0);
    loop_.remove(stdin_pipe_.get());
    stdin_pipe_.reset();
    stdin_buf_.clear();
    stdin_eof_ = true;
  }

  void shut_down_io() {
    // Whatever the pipes still hold is passed on; a pipe kept open by a straggler is cut here.
    while (!outputs_.empty()) read_output(*outputs_.begin()->second, true);
    for (OutputSink* sink : {&stdout_, &stderr_}) {
      release_outputs(*sink);
      check_sink(*sink);
    }
    drain(stdout_);
    check_sink(stdout_);  // (says so on stderr)
    drain(stderr_);
    if (stdin_pipe_) close_stdin_forwarding();
    kvs_.reset();
  }

  // ---- events ----------------------------------------------------------------------------

  void on_hello(int r) {
    Rank& rank = ranks_[static_cast<std::size_t>(r)];
    rank.said_hello = true;
    rank.finalized = false;  // a rank that initialises again must finalise again
    any_hello_ = true;
    if (!left_uninitialised_.empty()) fail(1, left_uninitialised_, first_uninitialised_);
  }

  void on_abort(int r, int code, const std::string& why) {
    fail(wire::abort_exit_status(code),
         "rank " + std::to_string(r) + " called abort(" + std::to_string(code) + "): " + why);
  }

  void on_signals() {
    signalfd_siginfo info{};
    while (::read(signals_.fd(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      switch (sig) {
        case SIGCHLD:
          reap();
          break;
        case SIGUSR1:
        case SIGUSR2:
          signal_ranks(sig);
          break;
        case SIGCONT:
          signal_running(sig);
          break;
        case SIGTSTP:
          suspend();
          break;
        default:
          on_launcher_signal(sig);
      }
    }
  }

  // Ctrl-Z: the ranks stop (SIGSTOP: a rank that ignores SIGTSTP must not run on alone), then
  // rlaunch, by SIGTSTP's own default action: unblocked for a moment, it stops rlaunch as it
  // would any program, and nothing at all where no shell does job control (an orphaned process
  // group: SIGSTOP there would stop the job for good). Once rlaunch runs again (fg, bg) the
  // ranks continue. Deadlines count on meanwhile: a --timeout that passed ends the job at once.
  void suspend() {
    signal_running(SIGSTOP);
    sigset_t tstp;
    sigemptyset(&tstp);
    sigaddset(&tstp, SIGTSTP);
    ::kill(::getpid(), SIGTSTP);  // pending while blocked; delivered as it is unblocked
    ::sigprocmask(SIG_UNBLOCK, &tstp, nullptr);
    ::sigprocmask(SIG_BLOCK, &tstp, nullptr);
    signal_running(SIGCONT);
  }

  // The ranks still running, as mpirun passes SIGUSR1 and SIGUSR2 on: the rank's process
  // only. (To its group, the signal also ended a shell rank's `sleep`, which had no handler.)
  void signal_ranks(int sig) {
    for (const Rank& rank : ranks_)
      if (rank.running) ::kill(rank.pid, sig);
  }

  // The process groups of the ranks still running: a rank's whole tree stops and continues.
  void signal_running(int sig) {
    for (const Rank& rank : ranks_) {
      if (!rank.running) continue;
      if (::kill(-rank.pid, sig) != 0 && errno == ESRCH) ::kill(rank.pid, sig);
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      const auto it = rank_of_pid_.find(pid);
      if (it == rank_of_pid_.end()) continue;  // a helper a rank left (rlaunch is a subreaper)
      const int r = it->second;
      rank_of_pid_.erase(it);  // the pid may be reused, by a helper that ends later
      on_exit(r, status);
    }
  }

  void on_exit(int r, int status) {
    Rank& rank = ranks_[static_cast<std::size_t>(r)];
    rank.running = false;
    --running_;
    last_exit_ = Clock::now();
    // A finalize or abort sent just before exiting may still sit in the socket.
    kvs_->drain(r);
    kvs_->rank_exited(r);
    const std::string who = "rank " + std::to_string(r) + " (pid " + std::to_string(rank.pid) +
                            " on " + host_ + ")";
    if (WIFSIGNALED(status)) {
      fail(128 + WTERMSIG(status), who + " killed by signal " + signal_text(WTERMSIG(status)), r);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      fail(WEXITSTATUS(status), who + " exited with status " + std::to_string(WEXITSTATUS(status)),
           r);
    } else if (rank.said_hello && !rank.finalized) {
      fail(1, who + " exited without finalizing", r);
    } else if (!rank.said_hello) {
      // Status 0 without ever initialising rmp: a job of programs that do not use rmp (or not
      // yet). Once another rank uses it, the job cannot work: the others would wait for this
      // rank's address until their bootstrap timeout (120 s). Judged at the first
      // initialisation when this rank ended before any.
      const std::string why = who + " exited with status 0 without initialising rmp, which " +
                              "other ranks of the job use";
      if (any_hello_) {
        fail(1, why, r);
      } else if (left_uninitialised_.empty()) {
        left_uninitialised_ = why;
        first_uninitialised_ = r;
      }
    }
  }

  void on_launcher_signal(int sig) {
    if (running_ == 0) {
      drain_until_ = Clock::now();  // the job is over; stop waiting for stray output
      interrupted_after_ = true;    // and for leftover helpers (stop_leftovers)
      return;
    }
    if (stop_started_) {
      // Asked again while stopping: no more grace.
      if (!killed_)
        kill_remaining("rlaunch: caught " + signal_name(sig) + " again; sending SIGKILL");
      return;
    }
    // Deterministic: rlaunch's own signal is the job's first failure unless a rank failed
    // before it, so the status is 128+sig however the ranks then react.
    if (!status_) status_ = 128 + sig;
    say("caught " + signal_name(sig) + ", stopping " + std::to_string(running_) + " rank(s)");
    begin_stop(sig);
  }

  // The first failure decides the status and starts the shutdown; later ones are its echoes.
  // A failed rank is first reported to the others (kNoticeGrace before the stop signal).
  void fail(int status, const std::string& message, int failed_rank = -1) {
    if (status_) return;
    status_ = status;
    say(message);
    if (failed_rank >= 0 && kvs_ && running_ > 0) {
      kvs_->notify_peer_failed(failed_rank, message);
      notice_until_ = Clock::now() + kNoticeGrace;
      return;
    }
    begin_stop(SIGTERM);
  }

  void say(const std::string& message) {
    const std::string line = "rlaunch: " + message + "\n";
    stderr_.write(line);
  }

  void begin_stop(int sig) {
    if (stop_started_) return;
    stop_started_ = Clock::now();
    signal_job(sig);
  }

  // Every rank's process group, so helpers a rank started go too — also the groups of ranks
  // that have already exited, whose background children may still hold the output pipes.
  void signal_job(int sig) {
    for (const Rank& rank : ranks_) {
      if (rank.pid <= 0) continue;
      // A running rank that moved itself to another group is signalled on its own.
      if (::kill(-rank.pid, sig) != 0 && errno == ESRCH && rank.running) ::kill(rank.pid, sig);
    }
  }

  // A job whose ranks all exited, but whose background helpers (processes left in a rank's
  // group once the output had drained) run on: the job is over, so they get SIGTERM, and
  // SIGKILL after kTermGrace, as a batch system's step ends every process of the step. One
  // line on stderr says so; the job's status is the ranks'. (A helper that left the rank's
  // group, setsid or nohup into another session, is its owner's to manage.) SIGINT or SIGTERM
  // to rlaunch meanwhile sends SIGKILL at once.
  void stop_leftovers() {
    // Helpers that are just ending (their pipes closed a moment before they exit) are not
    // leftovers: reap for a short while first.
    std::vector<int> left = leftover_groups();
    for (auto until = Clock::now() + kLeftoverGrace; !left.empty() && Clock::now() < until;
         left = leftover_groups())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (left.empty()) return;
    std::string who;
    for (int r : left) who += (who.empty() ? "" : ", ") + std::to_string(r);
    say("processes started by rank(s) " + who +
        " still running after the job ended; sending SIGTERM");
    const auto signal_left = [&](int sig) {
      for (int r : left) ::kill(-ranks_[static_cast<std::size_t>(r)].pid, sig);
    };
    signal_left(SIGTERM);
    for (auto until = Clock::now() + kTermGrace;
         !left.empty() && Clock::now() < until && !interrupted_after_; left = leftover_groups()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      on_signals();
    }
    if (left.empty()) return;
    signal_left(SIGKILL);
    // Reap what SIGKILL ended (briefly: a process stuck in the kernel is left to init).
    for (int i = 0; i < 20 && !leftover_groups().empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  // The ranks whose process groups still hold a running process of the job's, after reaping
  // what has ended. A group counts only while rlaunch has a child in it (the helpers are its
  // children, as a subreaper): a group id the system reused for someone else's processes
  // once the job's left it is never signalled.
  std::vector<int> leftover_groups() {
    reap();
    std::vector<int> left;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      const pid_t group = ranks_[r].pid;
      if (group <= 0 || ::kill(-group, 0) != 0) continue;
      siginfo_t info{};
      if (::waitid(P_PGID, static_cast<id_t>(group), &info, WEXITED | WNOHANG | WNOWAIT) == 0)
        left.push_back(static_cast<int>(r));
    }
    return left;
  }

  void kill_remaining(const std::string& why) {
    killed_ = true;
    if (running_ > 0) stderr_.write(why + "\n");
    signal_job(SIGKILL);
  }

  // ---- time ------------------------------------------------------------------------------

  std::optional<Clock::time_point> next_deadline() const {
    std::optional<Clock::time_point> d = kvs_->next_deadline();
    const auto consider = [&d](Clock::time_point t) {
      if (!d || t < *d) d = t;
    };
    if (timeout_at_ && !stop_started_) consider(*timeout_at_);
    if (notice_until_ && !stop_started_) consider(*notice_until_);
    if (stop_started_) {
      if (!killed_) consider(*stop_started_ + kTermGrace);
      consider(*stop_started_ + kStopLimit);
    }
    if (running_ == 0) consider(drain_deadline());
    return d;
  }

  Clock::time_point drain_deadline() const {
    auto d = drain_until_.value_or(last_exit_ + kOutputDrain);
    if (stop_started_ && *stop_started_ + kStopLimit < d) d = *stop_started_ + kStopLimit;
    return d;
  }

  void check_deadlines(Clock::time_point now) {
    if (timeout_at_ && !stop_started_ && now >= *timeout_at_) {
      fail(124, "job timed out after " + spec_.timeout_text + " s");
    }
    if (notice_until_ && !stop_started_ && now >= *notice_until_) begin_stop(SIGTERM);
    if (stop_started_ && !killed_ && now >= *stop_started_ + kTermGrace) {
      kill_remaining("rlaunch: " + std::to_string(running_) + " rank(s) still running " +
                     std::to_string(kTermGrace.count() / 1000) +
                     " s after the stop signal; sending SIGKILL");
    }
    if (stop_started_ && !gave_up_ && now >= *stop_started_ + kStopLimit) {
      gave_up_ = true;  // the contract bounds the stop; a process stuck in the kernel is left
      for (std::size_t r = 0; r < ranks_.size(); ++r) {
        if (!ranks_[r].running) continue;
        say("rank " + std::to_string(r) + " (pid " + std::to_string(ranks_[r].pid) +
            ") has not exited after SIGKILL; leaving it");
      }
    }
  }

  bool finished() const {
    if (gave_up_) return true;
    if (running_ > 0) return false;
    return outputs_.empty() || Clock::now() >= drain_deadline();
  }

  static constexpr std::size_t kStdinBuffer = 65536;

  const JobSpec& spec_;
  const std::string token_;
  const std::string job_id_;
  const std::string host_ = this_host_name();  // failure messages name it
  SignalSetup signals_;  // first: signals are blocked before any child exists
  SocketDir dir_;
  EventLoop loop_;
  CpuBinding binding_;
  OutputSink stdout_{1};
  OutputSink stderr_{2};
  Flow stdout_flow_;
  Flow stderr_flow_;
  bool output_failed_ = false;  // a write to stdout or stderr failed other than with EPIPE
  std::unique_ptr<KvsServer> kvs_;
  std::vector<Rank> ranks_;
  std::unordered_map<pid_t, int> rank_of_pid_;
  std::unordered_map<int, std::unique_ptr<OutputPipe>> outputs_;  // by fd
  int running_ = 0;
  bool any_hello_ = false;  // some rank initialised rmp
  bool interrupted_after_ = false;  // rlaunch caught a stop signal after every rank exited
  // The first rank that ended (status 0) without initialising rmp, before any rank did: what
  // to say when one does.
  std::string left_uninitialised_;
  int first_uninitialised_ = -1;

  UniqueFd null_fd_;
  UniqueFd rank0_stdin_;  // read end of the stdin pipe (terminal case), or empty
  UniqueFd stdin_pipe_;   // write end we feed
  std::string stdin_buf_;
  bool stdin_eof_ = false;

  std::optional<int> status_;  // first failure
  Clock::time_point started_;
  Clock::time_point last_exit_;
  std::optional<Clock::time_point> timeout_at_;
  std::optional<Clock::time_point> stop_started_;
  std::optional<Clock::time_point> drain_until_;
  bool killed_ = false;
  std::optional<Clock::time_point> notice_until_;  // a failure was reported; stop at this time
  bool gave_up_ = false;
};

}  // namespace

int run_job(const JobSpec& spec) {
  Job job(spec);
  return job.run();
}

}  // namespace rmp::launcher
