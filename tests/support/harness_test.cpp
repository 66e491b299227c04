// Self-tests of the harness: each tool does what its header promises, against real processes,
// a real ZooKeeper and a real echo server.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "src/loopback.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_ensemble.hpp"
#include "zktest/zookeeper_server.hpp"

namespace zktest {
namespace {

using namespace std::chrono_literals;
using detail::UniqueFd;

// Gone, or a zombie nobody has reaped yet (PID 1 of a container may not reap).
bool processGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto commEnd = text.rfind(')');
  return commEnd != std::string::npos && text.compare(commEnd + 2, 1, "Z") == 0;
}

std::string failureMessage(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a std::runtime_error";
  return {};
}

// ---------------------------------------------------------------------------------------------
// eventually

TEST(Eventually, SucceedsOnceTheConditionHolds) {
  int polls = 0;
  EXPECT_TRUE(eventually([&] { return ++polls == 3; }, 5s, 1ms));
  EXPECT_EQ(polls, 3);
}

TEST(Eventually, FailsAfterTheTimeoutSayingHowLongItWaited) {
  int polls = 0;
  const auto result = eventually([&] { return ++polls < 0; }, 50ms, 5ms);
  EXPECT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("50 ms"), std::string::npos) << result.message();
  EXPECT_GE(polls, 2) << "the condition is evaluated again at the deadline";
}

// ---------------------------------------------------------------------------------------------
// ChildProcess

TEST(ChildProcess, ReadsStdoutLinesInOrderAndReportsTheExitCode) {
  ChildProcess child("/bin/sh", {"-c", "echo one; echo two; printf 'no newline'; exit 3"});
  EXPECT_EQ(child.readLine(5s), "one");
  EXPECT_EQ(child.readLine(5s), "two");
  EXPECT_EQ(child.readLine(5s), "no newline");
  EXPECT_TRUE(child.wait(5s).exitedWith(3));
  EXPECT_EQ(child.tryReadLine(0ms), std::nullopt) << "no lines after EOF";
}

TEST(ChildProcess, ReadLineFailsAtTheDeadlineWithEverythingReadSoFar) {
  ChildProcess child("/bin/sh", {"-c", "echo started; echo oops >&2; exec sleep 30"});
  EXPECT_EQ(child.readLine(5s), "started");
  const std::string message = failureMessage([&] { child.readLine(100ms); });
  EXPECT_NE(message.find("within 100 ms"), std::string::npos) << message;
  EXPECT_NE(message.find("| started"), std::string::npos) << message;
  EXPECT_NE(message.find("still running"), std::string::npos) << message;
  EXPECT_TRUE(eventually([&] { return child.stderrText() == "oops\n"; }, 5s)) << child.transcript();
  EXPECT_TRUE(child.running());
}

TEST(ChildProcess, WaitForLineSkipsToTheMatchingLine) {
  ChildProcess child("/bin/sh",
                     {"-c", "echo SESSION 1; echo READY; echo LEADER a 7; exec sleep 30"});
  EXPECT_EQ(child.waitForLine("LEADER", 5s), "LEADER a 7");
  EXPECT_EQ(child.stdoutLines(), (std::vector<std::string>{"SESSION 1", "READY", "LEADER a 7"}));
  const std::string message = failureMessage([&] {
    child.waitForLine([](std::string_view line) { return line.find("LOST") != std::string::npos; },
                      100ms, "mentioning LOST");
  });
  EXPECT_NE(message.find("no line mentioning LOST"), std::string::npos) << message;
  EXPECT_NE(message.find("| READY"), std::string::npos) << message;
}

TEST(ChildProcess, WriteLineReachesStdinAndClosingStdinEndsInput) {
  ChildProcess child("/bin/cat", {});
  child.writeLine("ping");
  EXPECT_EQ(child.readLine(5s), "ping");
  child.closeStdin();
  EXPECT_TRUE(child.wait(5s).exitedWith(0));
}

TEST(ChildProcess, CapturesStderrOfAFailingProgram) {
  ChildProcess child("/bin/sh", {"-c", "echo 'bad account id' >&2; exit 2"});
  const ExitStatus status = child.wait(5s);
  EXPECT_TRUE(status.exitedWith(2)) << status.describe();
  EXPECT_EQ(child.stderrText(), "bad account id\n");
}

TEST(ChildProcess, AProgramThatCannotBeExecutedFailsAtConstruction) {
  const std::string message =
      failureMessage([] { ChildProcess child("/nonexistent/zk-elect", {}); });
  EXPECT_NE(message.find("cannot execute /nonexistent/zk-elect"), std::string::npos) << message;
}

TEST(ChildProcess, BinaryPathNamesTheTargetToBuildWhenMissing) {
  const std::string message = failureMessage([] { binaryPath("no-such-tool"); });
  EXPECT_NE(message.find("build the target 'no-such-tool'"), std::string::npos) << message;
}

TEST(ChildProcess, RunsThisProjectsExecutablesFromTheirBinaryPath) {
  ChildProcess self(binaryPath("zktest_support_test"),
                    {"--gtest_list_tests", "--gtest_filter=Eventually.*"});
  EXPECT_EQ(self.waitForLine("Eventually.", 10s), "Eventually.");
  EXPECT_TRUE(self.wait(10s).exitedWith(0));
}

TEST(ChildProcess, StoppedProcessPrintsNothingUntilContinued) {
  ChildProcess child("/bin/sh", {"-c", "while :; do echo tick; sleep 0.02; done"});
  child.readLine(5s);
  child.signal(SIGSTOP);
  while (child.tryReadLine(100ms)) {  // lines written before the stop
  }
  EXPECT_EQ(child.tryReadLine(200ms), std::nullopt);
  child.signal(SIGCONT);
  EXPECT_EQ(child.readLine(5s), "tick");
}

TEST(ChildProcess, SigtermEndsTheProcessWithThatSignal) {
  ChildProcess child("/bin/sleep", {"30"});
  child.signal(SIGTERM);
  EXPECT_EQ(child.wait(5s).signal, SIGTERM);
  EXPECT_FALSE(child.running());
}

TEST(ChildProcess, DestructorKillsTheWholeProcessGroup) {
  pid_t shell = 0, grandchild = 0;
  {
    ChildProcess child("/bin/sh", {"-c", "sleep 30 & echo $!; wait"});
    grandchild = std::stoi(child.readLine(5s));
    shell = child.pid();
  }
  EXPECT_TRUE(processGone(shell));
  EXPECT_TRUE(eventually([&] { return processGone(grandchild); }, 5s)) << "pid " << grandchild;
}

// ---------------------------------------------------------------------------------------------
// ZooKeeperServer

// Runs ZooKeeper's own command-line client once against `connectString`.
ExitStatus runZooKeeperCli(const std::string& connectString, std::vector<std::string> command) {
  std::vector<std::string> args{"-cp",
                                "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar",
                                "-XX:TieredStopAtLevel=1",
                                "org.apache.zookeeper.ZooKeeperMain",
                                "-server",
                                connectString};
  args.insert(args.end(), command.begin(), command.end());
  ChildProcess cli("java", args);
  return cli.wait(60s);
}

long znodeCount(const ZooKeeperServer& server) {
  const std::string mntr = server.fourLetter("mntr");
  const std::string key = "zk_znode_count\t";
  const auto at = mntr.find(key);
  return at == std::string::npos ? -1 : std::stol(mntr.substr(at + key.size()));
}

TEST(ZooKeeperServer, StartedServerAnswersFourLetterWordsOnLoopback) {
  ZooKeeperServer server;
  EXPECT_EQ(server.connectString(), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_GT(server.pid(), 0);
  EXPECT_EQ(server.fourLetter("ruok"), "imok");
  EXPECT_NE(server.fourLetter("srvr").find("Mode: standalone"), std::string::npos);
  EXPECT_NE(server.fourLetter("mntr").find("zk_server_state\tstandalone"), std::string::npos);
  EXPECT_NE(server.fourLetter("conf").find("tickTime=200"), std::string::npos);
  EXPECT_NE(server.fourLetter("wchs").find("watch"), std::string::npos);
}

TEST(ZooKeeperServer, TwoServersGetDifferentPortsAndDirectories) {
  ZooKeeperServer first, second;
  EXPECT_NE(first.port(), second.port());
  EXPECT_NE(first.directory(), second.directory());
  EXPECT_EQ(fourLetterWord(first.port(), "ruok", 5s), "imok");
  EXPECT_EQ(fourLetterWord(second.port(), "ruok", 5s), "imok");
}

TEST(ZooKeeperServer, RestartAfterKill9KeepsTheDataAndThePort) {
  ZooKeeperServer server;
  const long before = znodeCount(server);
  ASSERT_TRUE(runZooKeeperCli(server.connectString(), {"create", "/kept", "data"}).exitedWith(0))
      << server.logTail();
  ASSERT_EQ(znodeCount(server), before + 1);
  const std::uint16_t port = server.port();

  server.kill9();
  server.restart();

  EXPECT_EQ(server.port(), port);
  EXPECT_EQ(znodeCount(server), before + 1);
}

TEST(ZooKeeperServer, Kill9RemovesTheProcessAndItsPort) {
  ZooKeeperServer server;
  const pid_t pid = server.pid();
  server.kill9();
  EXPECT_TRUE(processGone(pid));
  EXPECT_FALSE(server.running());
  EXPECT_EQ(server.pid(), -1);
  EXPECT_EQ(fourLetterWord(server.port(), "ruok", 1s), std::nullopt);
}

TEST(ZooKeeperServer, StopEndsTheServerGracefully) {
  ZooKeeperServer server;
  const pid_t pid = server.pid();
  server.stop();
  EXPECT_TRUE(processGone(pid));
  EXPECT_EQ(fourLetterWord(server.port(), "ruok", 1s), std::nullopt);
}

TEST(ZooKeeperServer, PausedServerAnswersNothingUntilResumed) {
  ZooKeeperServer server;
  server.pause();
  EXPECT_EQ(fourLetterWord(server.port(), "ruok", 300ms), std::nullopt);
  server.resume();
  EXPECT_EQ(server.fourLetter("ruok"), "imok");
}

TEST(ZooKeeperServer, DestructorKillsTheServerAndRemovesItsDirectory) {
  pid_t pid = 0;
  std::filesystem::path directory;
  {
    ZooKeeperServer server;
    pid = server.pid();
    directory = server.directory();
    EXPECT_TRUE(std::filesystem::exists(directory / "server.log"));
  }
  EXPECT_TRUE(processGone(pid));
  EXPECT_FALSE(std::filesystem::exists(directory));
}

TEST(ZooKeeperServer, UniqueTestRootsDifferAndNameTheTest) {
  const std::string first = uniqueTestRoot(), second = uniqueTestRoot();
  EXPECT_NE(first, second);
  EXPECT_EQ(first.rfind("/zktest/ZooKeeperServer.UniqueTestRootsDifferAndNameTheTest-", 0), 0u)
      << first;
}

// ---------------------------------------------------------------------------------------------
// ZooKeeperEnsemble

TEST(ZooKeeperEnsemble, KeepsAQuorumWhenTheLeaderDiesAndTakesItBackOnRestart) {
  ZooKeeperEnsemble ensemble;
  ASSERT_EQ(ensemble.size(), 3u);
  const std::string connectString = ensemble.connectString();
  EXPECT_EQ(std::count(connectString.begin(), connectString.end(), ','), 2) << connectString;
  const auto leader = ensemble.leaderIndex();
  ASSERT_TRUE(leader.has_value());

  ensemble.kill9(*leader);
  ensemble.awaitQuorum();
  const auto newLeader = ensemble.leaderIndex();
  ASSERT_TRUE(newLeader.has_value());
  EXPECT_NE(*newLeader, *leader);

  ensemble.restart(*leader);
  EXPECT_NE(ensemble.server(*leader).fourLetter("srvr").find("Mode: follower"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// TcpProxy

// Echoes what each connection sends; can also push bytes to every connection unasked.
class EchoServer {
 public:
  EchoServer() : listener_(detail::listenOnLoopback(0, false)), thread_([this] { acceptLoop(); }) {}
  ~EchoServer() {
    ::shutdown(listener_.get(), SHUT_RDWR);  // wakes accept()
    std::lock_guard lock(mutex_);
    for (auto& connection : connections_) ::shutdown(connection.get(), SHUT_RDWR);
  }

  std::uint16_t port() const { return detail::localPort(listener_.get()); }
  std::size_t accepted() const { return accepted_; }
  std::size_t bytesReceived() const { return bytesReceived_; }
  void push(const std::string& text) {
    std::lock_guard lock(mutex_);
    for (auto& connection : connections_)
      ::send(connection.get(), text.data(), text.size(), MSG_NOSIGNAL);
  }

 private:
  void acceptLoop() {
    std::vector<std::jthread> echoes;
    while (true) {
      UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!connection) break;
      ++accepted_;
      const int fd = connection.get();
      {
        std::lock_guard lock(mutex_);
        connections_.push_back(std::move(connection));
      }
      echoes.emplace_back([this, fd] {
        char buffer[4096];
        ssize_t got;
        while ((got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
          bytesReceived_ += static_cast<std::size_t>(got);
          ::send(fd, buffer, static_cast<std::size_t>(got), MSG_NOSIGNAL);
        }
        ::shutdown(fd, SHUT_WR);  // the client said goodbye: so does the server
      });
    }
  }

  UniqueFd listener_;
  std::mutex mutex_;
  std::vector<UniqueFd> connections_;
  std::atomic<std::size_t> accepted_{0}, bytesReceived_{0};
  std::jthread thread_;
};

struct Reception {
  std::string bytes;
  bool closed = false;  // EOF or reset
};

// Reads until `size` bytes came, the connection ended, or `timeout` passed.
Reception receive(int fd, std::size_t size, milliseconds timeout) {
  Reception reception;
  const Deadline deadline(timeout);
  char buffer[4096];
  while (reception.bytes.size() < size) {
    pollfd readable{fd, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(deadline.remaining().count())) != 1) break;
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) {
      reception.closed = true;
      break;
    }
    reception.bytes.append(buffer, static_cast<std::size_t>(got));
  }
  return reception;
}

UniqueFd connectTo(const TcpProxy& proxy) {
  return detail::connectToLoopback(proxy.port(), Deadline(5s));
}

void send(const UniqueFd& fd, const std::string& text) {
  ASSERT_EQ(::send(fd.get(), text.data(), text.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(text.size()));
}

class TcpProxyToEcho : public ::testing::Test {
 protected:
  // Sends `text` and expects it back.
  void expectEcho(const UniqueFd& client, const std::string& text) {
    send(client, text);
    EXPECT_EQ(receive(client.get(), text.size(), 5s).bytes, text);
  }
  // A new connection through the proxy, checked to carry bytes (empty if it could not connect).
  UniqueFd echoingClient() {
    UniqueFd client = connectTo(proxy);
    EXPECT_TRUE(client) << "cannot connect through the proxy";
    if (client) expectEcho(client, "ok");
    return client;
  }

  EchoServer echo;
  TcpProxy proxy{echo.port()};
};

TEST_F(TcpProxyToEcho, PassForwardsBytesBothWays) {
  EXPECT_EQ(proxy.connectString(), "127.0.0.1:" + std::to_string(proxy.port()));
  UniqueFd client = echoingClient();
  echo.push("pushed");
  EXPECT_EQ(receive(client.get(), 6, 5s).bytes, "pushed");
  EXPECT_EQ(proxy.openConnections(), 1u);
}

TEST_F(TcpProxyToEcho, BlackholeKeepsConnectionsOpenAndDropsEveryByte) {
  UniqueFd client = echoingClient();
  const std::size_t forwarded = echo.bytesReceived();

  proxy.setMode(TcpProxy::Mode::blackhole);
  EXPECT_EQ(proxy.mode(), TcpProxy::Mode::blackhole);
  send(client, "lost");
  echo.push("lost too");
  const Reception silence = receive(client.get(), 1, 300ms);
  EXPECT_EQ(silence.bytes, "");
  EXPECT_FALSE(silence.closed) << "a blackhole closes nothing";
  EXPECT_EQ(echo.bytesReceived(), forwarded) << "client bytes were forwarded";

  UniqueFd late = connectTo(proxy);
  ASSERT_TRUE(late) << "new connections are accepted";
  send(late, "void");
  EXPECT_EQ(receive(late.get(), 1, 200ms).bytes, "");
  EXPECT_EQ(echo.accepted(), 1u) << "a connection made during the blackhole reached the server";
  EXPECT_EQ(proxy.openConnections(), 2u);

  proxy.setMode(TcpProxy::Mode::pass);
  echoingClient();
  send(client, "still lost");
  EXPECT_EQ(receive(client.get(), 1, 200ms).bytes, "") << "blackholed connections stay silent";
}

TEST_F(TcpProxyToEcho, DropRepliesForwardsRequestsButReturnsNothing) {
  UniqueFd client = echoingClient();
  const std::size_t forwarded = echo.bytesReceived();
  proxy.setMode(TcpProxy::Mode::dropReplies);
  send(client, "request");
  ASSERT_TRUE(eventually([&] { return echo.bytesReceived() == forwarded + 7; }, 5s))
      << "the request did not reach the server";
  const Reception silence = receive(client.get(), 1, 300ms);
  EXPECT_EQ(silence.bytes, "") << "the echo (the reply) came back";
  EXPECT_FALSE(silence.closed);
  proxy.setMode(TcpProxy::Mode::pass);
  send(client, "again");
  EXPECT_EQ(receive(client.get(), 1, 200ms).bytes, "") << "a connection that lost replies stays so";
  echoingClient();
}

TEST_F(TcpProxyToEcho, CloseResetsConnectionsAndRefusesNewOnes) {
  UniqueFd client = echoingClient();

  proxy.setMode(TcpProxy::Mode::close);
  EXPECT_TRUE(receive(client.get(), 1, 5s).closed);
  EXPECT_EQ(proxy.openConnections(), 0u);
  EXPECT_FALSE(connectTo(proxy)) << "connected through a closed proxy";

  proxy.setMode(TcpProxy::Mode::pass);
  echoingClient();
}

// While a proxy is closed its port is free; an outgoing connection (of any process) could take
// it as its local port, and the proxy could not listen again. Ports below the kernel's
// ephemeral range are never handed out that way; the same goes for the ports servers restart on.
TEST(TcpProxy, ListensBelowTheEphemeralRangeSoNoConnectionCanTakeItsPortWhileClosed) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned ephemeralStart = 0;
  ASSERT_TRUE(range >> ephemeralStart);
  TcpProxy proxy(detail::reserveLoopbackPorts(1).front());
  EXPECT_LT(proxy.port(), ephemeralStart);
  for (const auto port : detail::reserveLoopbackPorts(6)) EXPECT_LT(port, ephemeralStart);
  EXPECT_LT(freeLoopbackPort(), ephemeralStart);  // the ports processes are told to listen on
  const auto several = freeLoopbackPorts(6);
  EXPECT_EQ(std::set<std::uint16_t>(several.begin(), several.end()).size(), several.size());
  for (const auto port : several) EXPECT_LT(port, ephemeralStart);
}

TEST(TcpProxy, ResetsClientsWhenTheServerIsDown) {
  const std::uint16_t deadPort = detail::reserveLoopbackPorts(1).front();
  TcpProxy proxy(deadPort);
  // The proxy accepts, finds nothing behind it and resets the client. The reset can land before
  // our connect is seen to complete (the connect then reports ECONNRESET) or after (a read sees
  // the close); a refused connect would mean the proxy never accepted.
  UniqueFd client = detail::startConnectToLoopback(proxy.port());
  ASSERT_TRUE(client);
  pollfd waiting{client.get(), POLLOUT, 0};
  ASSERT_EQ(::poll(&waiting, 1, 5000), 1);
  int error = 0;
  socklen_t length = sizeof error;
  ASSERT_EQ(::getsockopt(client.get(), SOL_SOCKET, SO_ERROR, &error, &length), 0);
  ASSERT_TRUE(error == 0 || error == ECONNRESET) << std::strerror(error);
  if (error == 0) {
    EXPECT_TRUE(receive(client.get(), 1, 5s).closed);
  }
  EXPECT_TRUE(eventually([&] { return proxy.openConnections() == 0; }, 5s));
}

TEST_F(TcpProxyToEcho, ClientHangupClosesTheUpstreamConnection) {
  echoingClient();  // closed at once
  EXPECT_TRUE(eventually([&] { return proxy.openConnections() == 0; }, 5s));
}

TEST(TcpProxy, CarriesARealZooKeeperConversation) {
  ZooKeeperServer& server = sharedZooKeeper();
  TcpProxy proxy(server.port());
  EXPECT_EQ(fourLetterWord(proxy.port(), "ruok", 5s), "imok");
  proxy.setMode(TcpProxy::Mode::blackhole);
  EXPECT_EQ(fourLetterWord(proxy.port(), "ruok", 300ms), std::nullopt);
}

}  // namespace
}  // namespace zktest
