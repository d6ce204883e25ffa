// rlaunch's command-line parsing, host lists and output line forwarding, tested in-process.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/errors.hpp"
#include "launcher/fd.hpp"
#include "launcher/hosts.hpp"
#include "launcher/options.hpp"
#include "launcher/output.hpp"

namespace rmp::launcher {
namespace {

LaunchOptions parse(std::vector<std::string> args) { return parse_command_line(args); }

TEST(Options, ShortAndLongForms_ParseToTheSameValues) {
  const auto a = parse(
      {"-n", "4", "--tag-output", "--timeout", "2.5", "--bind-to", "numa", "prog", "-n", "x"});
  EXPECT_EQ(a.np, 4);
  EXPECT_TRUE(a.tag_output);
  ASSERT_TRUE(a.timeout.has_value());
  EXPECT_EQ(a.timeout->count(), 2500);
  EXPECT_EQ(a.timeout_text, "2.5");
  EXPECT_EQ(a.bind_to, BindTo::numa);
  // Everything from PROGRAM on belongs to the program, flags included.
  EXPECT_EQ(a.command, (std::vector<std::string>{"prog", "-n", "x"}));
  const auto b = parse({"--np=4", "--bind-to=none", "--", "-prog"});
  EXPECT_EQ(b.np, 4);
  EXPECT_EQ(b.bind_to, BindTo::none);
  EXPECT_EQ(b.command, (std::vector<std::string>{"-prog"}));
  EXPECT_EQ(parse({"-n4", "p"}).np, 4);
}

TEST(Options, BindToDefault_IsLeftToTheHost) {
  EXPECT_FALSE(parse({"-n", "2", "p"}).bind_to.has_value());
}

TEST(Options, Param_LaterValueWins_OrderKept) {
  const auto o =
      parse({"-n", "1", "--param", "lanes=2", "--param", "spin_us=1", "--param", "lanes=3", "p"});
  ASSERT_EQ(o.params.size(), 2u);
  EXPECT_EQ(o.params[0], (std::pair<std::string, std::string>{"lanes", "3"}));
  EXPECT_EQ(o.params[1], (std::pair<std::string, std::string>{"spin_us", "1"}));
}

TEST(Options, Export_TakesRlaunchsValueWhenNoneGiven) {
  ::setenv("RL_UNIT_EXPORT", "from-env", 1);
  const auto o = parse({"-n", "1", "-x", "RL_UNIT_EXPORT", "-xOTHER=1=2", "p"});
  ASSERT_EQ(o.exports.size(), 2u);
  EXPECT_EQ(o.exports[0].second, "from-env");
  EXPECT_EQ(o.exports[1], (std::pair<std::string, std::string>{"OTHER", "1=2"}));
}

TEST(Options, MalformedValues_AreUsageErrorsNamingTheFlag) {
  const std::vector<std::vector<std::string>> bad = {
      {"-n", "0", "p"},
      {"-n", "-1", "p"},
      {"-n", "2x", "p"},
      {"p"},
      {"-n", "1"},
      {"--nope", "-n", "1", "p"},
      {"-n", "1", "--bind-to", "socket", "p"},
      {"-n", "1", "--timeout", "0", "p"},
      {"-n", "1", "--timeout", "inf", "p"},
      {"-n", "1", "--param", "=1", "p"},
      {"-n", "1", "--param", "lanes=", "p"},
      {"-n", "1", "--param", "lanes=1;x=2", "p"},
      {"-n", "1", "--profile", "turbo", "p"},
      {"-n", "1", "-x", "A-B=1", "p"},
      {"-n", "1", "-x", "RMP_JOB_TOKEN=0", "p"},
      {"-n", "1", "--print-params=1", "p"},
      {"-n", "1", "--hosts", "a:1", "--hostfile", "/dev/null", "p"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_THROW(parse(args), UsageError) << joined;
  }
  try {
    parse({"-n", "1", "--timeout", "400000000", "p"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--timeout: '400000000' seconds is more than a year (at most 31536000)");
  }
  try {
    parse({"-n", "1", "--param", "no_such_knob=1", "p"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_knob"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("lanes"), std::string::npos);  // lists the known names
  }
}

TEST(Options, Help_WinsOverMissingProgram) { EXPECT_TRUE(parse({"--help"}).help); }

TEST(Hosts, HostsOption_SlotsOptional) {
  const auto h = parse_hosts_option("a:4,b,c.example:1");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].name, "a");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].name, "b");
  EXPECT_FALSE(h[1].slots.has_value());
  EXPECT_EQ(h[2].name, "c.example");
  for (const char* bad : {"", "a:", "a:0", ":3", "a,,b", "a:x"}) {
    EXPECT_THROW(parse_hosts_option(bad), UsageError) << bad;
  }
}

TEST(Hosts, Hostfile_CommentsBlankLinesSlots) {
  char path[] = "/tmp/rl-hostfile-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    std::ofstream(path)
        << "# cluster\n\nnode1 slots=4\n  node2   # no slots\nnode3 slots=2 # two\n";
  }
  const auto h = read_hostfile(path);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].name, "node2");
  EXPECT_FALSE(h[1].slots.has_value());
  EXPECT_EQ(h[2].origin, std::string(path) + ":5");
  { std::ofstream(path) << "node1 cpus=4\n"; }
  EXPECT_THROW(read_hostfile(path), UsageError);
  { std::ofstream(path) << "# nothing\n"; }
  EXPECT_THROW(read_hostfile(path), UsageError);
  ::unlink(path);
  EXPECT_THROW(read_hostfile(path), UsageError);
}

TEST(Hosts, ThisNode_LocalNamesOnly) {
  EXPECT_TRUE(is_this_node("localhost"));
  EXPECT_TRUE(is_this_node("127.0.0.1"));
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(is_this_node(name));
  EXPECT_FALSE(is_this_node("surely-another-host.invalid"));
  // Without case, as DNS compares names.
  EXPECT_TRUE(is_this_node("LOCALHOST"));
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_TRUE(is_this_node(upper));
}

TEST(Hosts, SlotsBoundRanks_AndGiveTheDefault) {
  EXPECT_EQ(parse({"--hosts", "localhost:3", "p"}).np, 3);
  EXPECT_THROW(parse({"--hosts", "localhost:3", "-n", "4", "p"}), UsageError);
  EXPECT_THROW(parse({"--hosts", "localhost", "p"}), UsageError);  // no slots, no -n
  EXPECT_EQ(parse({"--hosts", "localhost", "-n", "9", "p"}).np, 9);
  EXPECT_TRUE(
      first_remote_host(parse({"--hosts", "localhost:1,elsewhere.invalid:1", "p"})).has_value());
  EXPECT_FALSE(first_remote_host(parse({"--hosts", "localhost:1", "p"})).has_value());
}

// Captures what a LineForwarder passes on.
class Captured {
public:
  Captured() : pipe_(make_pipe()), sink_(pipe_.write.get()) {
    set_nonblocking(pipe_.read.get());
    ::fcntl(pipe_.write.get(), F_SETPIPE_SZ,
            1 << 20);  // room for an overlong line without a reader
  }
  OutputSink& sink() { return sink_; }
  std::string take() {
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(pipe_.read.get(), buf, sizeof(buf))) > 0)
      all.append(buf, static_cast<std::size_t>(n));
    return all;
  }

private:
  Pipe pipe_;
  OutputSink sink_;
};

TEST(LineForwarder, HoldsPartialLines_UntilNewlineOrEof) {
  Captured out;
  LineForwarder f(out.sink(), "[3] ");
  f.feed("hel");
  EXPECT_EQ(out.take(), "");
  f.feed("lo\nwor");
  EXPECT_EQ(out.take(), "[3] hello\n");
  f.feed("ld\n\nlast");
  EXPECT_EQ(out.take(), "[3] world\n[3] \n");
  f.finish();
  EXPECT_EQ(out.take(), "[3] last\n");  // tagged: the partial line is ended for the next tag
}

TEST(LineForwarder, Untagged_PassesBytesExactly) {
  Captured out;
  LineForwarder f(out.sink(), "");
  f.feed("a\nb");
  f.finish();
  EXPECT_EQ(out.take(), "a\nb");
}

TEST(LineForwarder, OverlongLine_PiecesEndTheLine_ContinuationTagged) {
  Captured out;
  LineForwarder f(out.sink(), "[0] ");
  const std::string big(LineForwarder::kMaxPendingLine, 'x');
  f.feed(big);  // exactly the limit: still held, the newline may come next
  EXPECT_EQ(out.take(), "");
  f.feed("yy");
  EXPECT_EQ(out.take(), "[0] " + big + "\n");
  f.feed("tail\nnext\n");
  EXPECT_EQ(out.take(), "[0] yytail\n[0] next\n");
  // Several pieces from one chunk; what stays held is below the limit.
  f.feed(big + big + big + "z");
  EXPECT_EQ(out.take(), "[0] " + big + "\n[0] " + big + "\n[0] " + big + "\n");
  f.finish();
  EXPECT_EQ(out.take(), "[0] z\n");
}

TEST(LineForwarder, OverlongLine_Untagged_PieceEndsTheLine) {
  Captured out;
  LineForwarder f(out.sink(), "");
  const std::string big(LineForwarder::kMaxPendingLine, 'x');
  f.feed(big + "yy");
  EXPECT_EQ(out.take(), big + "\n");
  f.feed("tail\nb");
  f.finish();
  EXPECT_EQ(out.take(), "yytail\nb");
}

// A line ending in a later chunk than its held part is cut too: no line goes out longer than
// a piece (held 64 KiB + a chunk of 64 KiB had gone out as one line of up to 128 KiB).
TEST(LineForwarder, LineEndingAfterItsHeldPart_NoPieceLongerThanTheLimit) {
  constexpr std::size_t kMax = LineForwarder::kMaxPendingLine;
  auto longest = [](const std::string& s) {
    std::size_t best = 0, at = 0;
    for (std::size_t nl = s.find('\n'); nl != std::string::npos; nl = s.find('\n', at)) {
      best = std::max(best, nl - at);
      at = nl + 1;
    }
    return std::max(best, s.size() - at);
  };
  for (const std::string prefix : {"", "[0] "}) {
    for (const auto& [first, second] : {std::pair<std::size_t, std::size_t>{kMax, 100},
                                        {60000, 10000},
                                        {kMax - 1, kMax},
                                        {3, 2 * kMax + 5},
                                        {kMax, kMax}}) {
      Captured out;
      LineForwarder f(out.sink(), prefix);
      f.feed(std::string(first, 'a'));
      f.feed(std::string(second, 'b') + "\nnext\n");
      f.finish();
      const std::string got = out.take();
      EXPECT_LE(longest(got), prefix.size() + kMax)
          << first << " + " << second << " '" << prefix << "'";
      std::string bytes;  // every byte arrives, in order, and the next line stays whole
      for (char ch : got)
        if (ch == 'a' || ch == 'b') bytes += ch;
      EXPECT_EQ(bytes, std::string(first, 'a') + std::string(second, 'b'));
      EXPECT_NE(got.find("\n" + prefix + "next\n"), std::string::npos);
    }
  }
}

// Two ranks into one sink, as rlaunch forwards them: a piece of rank 0's overlong line never
// has rank 1's line appended to it.
TEST(LineForwarder, OverlongLine_OtherRanksLineStaysWhole) {
  for (const std::string prefix0 : {"", "[0] "}) {
    Captured out;
    const std::string prefix1 = prefix0.empty() ? "" : "[1] ";
    LineForwarder f0(out.sink(), prefix0);
    LineForwarder f1(out.sink(), prefix1);
    const std::string half(35000, 'a');
    f0.feed(half + half);
    f1.feed("short line from rank 1\n");
    f0.feed("END\n");
    const std::string rest(70000 - LineForwarder::kMaxPendingLine, 'a');
    EXPECT_EQ(out.take(), prefix0 + std::string(LineForwarder::kMaxPendingLine, 'a') + "\n" +
                              prefix1 + "short line from rank 1\n" + prefix0 + rest + "END\n")
        << "prefix '" << prefix0 << "'";
  }
}

// A reader that lags: the sink takes what the pipe holds, queues the rest without blocking,
// and passes it on, in order, once there is room.
TEST(OutputSink, FullPipe_QueuesWithoutBlocking_FlushesInOrder) {
  Pipe p = make_pipe();
  set_nonblocking(p.read.get());
  OutputSink sink(p.write.get());  // a blocking pipe, as rlaunch's stdout usually is
  std::string sent;
  for (int i = 0; sent.size() < 4 * 65536; ++i) {  // four times the pipe's default capacity
    const std::string line = "line " + std::to_string(i) + std::string(100, 'x') + "\n";
    sink.write(line);
    sent += line;
  }
  EXPECT_GT(sink.queued(), 0u);
  EXPECT_GE(sink.poll_fd(), 0);
  std::string got;
  char buf[65536];
  for (int round = 0; round < 1000 && got.size() < sent.size(); ++round) {
    ssize_t n;
    while ((n = ::read(p.read.get(), buf, sizeof buf)) > 0)
      got.append(buf, static_cast<std::size_t>(n));
    sink.flush();
  }
  EXPECT_EQ(sink.queued(), 0u);
  EXPECT_TRUE(got == sent) << got.size() << " of " << sent.size() << " bytes";
  EXPECT_FALSE(sink.closed() || sink.failed());
}

TEST(OutputSink, ReaderGone_IsClosed_OtherErrorsFail) {
  ::signal(SIGPIPE, SIG_IGN);  // as rlaunch does (SignalSetup)
  Pipe p = make_pipe();
  OutputSink sink(p.write.get());
  p.read.reset();
  sink.write("x\n");
  EXPECT_TRUE(sink.closed());
  EXPECT_FALSE(sink.failed());
  EXPECT_EQ(sink.queued(), 0u);

  UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(full) << "no /dev/full";
  OutputSink disk(full.get());
  disk.write("x\n");
  EXPECT_TRUE(disk.failed());
  EXPECT_EQ(disk.error(), ENOSPC);
}

// A rank's last line without its newline, then another rank's output: the sink ends the line
// first; the same rank continuing it does not.
TEST(LineForwarder, UnfinishedLastLine_EndedBeforeAnotherRanksOutput) {
  Captured out;
  LineForwarder f0(out.sink(), "");
  LineForwarder f1(out.sink(), "");
  f0.feed("partial");
  f0.finish();
  f1.feed("whole\n");
  EXPECT_EQ(out.take(), "partial\nwhole\n");
  out.sink().write("more", &f1);
  out.sink().write(" of it\n", &f1);
  EXPECT_EQ(out.take(), "more of it\n");
}

}  // namespace
}  // namespace rmp::launcher
