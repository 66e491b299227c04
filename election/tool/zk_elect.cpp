// zk-elect: stands for a list of accounts and prints one line per election event (for scripts,
// benchmarks and operators). Lines on stdout, flushed once the events of the moment are printed:
//   SESSION <unix_ns> <negotiated_timeout_ms> | READY | LEADER <account> <token> <unix_ns>
//   LOST <account> <reason> <unix_ns>
// stdin accepts "resign <account>", and "check <account>" / "strict <account>" which print
//   GATE <account> allowed <token> | GATE <account> refused <reason>
// SIGTERM/SIGINT: LOST lines, close the session, exit 0.
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

#include "zkagent/election.hpp"
#include "zkagent/event_lines.hpp"
#include "zkagent/logging.hpp"
#include "zkagent/naming.hpp"

namespace asio = boost::asio;
using namespace zkagent::election;
namespace naming = zkagent::naming;

namespace {

constexpr const char* kUsage =
    "usage: zk-elect --zk HOST:PORT[,...] --instance-id ID (--accounts a,b,c | --accounts-file F)\n"
    "                [--root /wx-accounts] [--session-timeout-ms N] [--endpoint URL]\n"
    "                [--digest-file F]\n"
    "Stands for every account and prints SESSION/READY/LEADER/LOST lines on stdout.\n"
    "stdin: 'resign <account>' hands an account over; 'check <account>' and 'strict <account>'\n"
    "ask the leadership gate (fast / confirmed with ZooKeeper). SIGTERM/SIGINT: stop cleanly.\n"
    "--digest-file: a file whose first line is user:password (ZooKeeper digest), as the agent's\n"
    "zookeeper.auth.digest_file: authenticate and create the tree with ACLs for that identity.\n";

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "zk-elect: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

using zkagent::logging::unixNanos;
using EventLines = zkagent::logging::BatchedEventLines<asio::io_context::executor_type>;

void printGate(EventLines& lines, const std::string& account, const GateDecision& d) {
  lines.emit("GATE " + account +
             (d.allowed() ? " allowed " + std::to_string(d.token)
                          : " refused " + std::string(toString(d.verdict))));
}

struct Args {
  ElectionOptions election;
  std::vector<std::string> accounts;
};

void addAccount(Args& args, std::set<std::string>& seen, std::string id) {
  if (auto error = naming::accountIdError(id)) usageError("account id '" + id + "': " + *error);
  if (seen.insert(id).second) args.accounts.push_back(std::move(id));
}

// user:password from `path`; never printed.
std::string readDigest(const std::string& path) {
  try {
    return readDigestFile(path);
  } catch (const std::invalid_argument& error) {
    usageError(error.what());
  }
}

Args parseArgs(int argc, char** argv) {
  Args args;
  std::set<std::string> seen;
  bool haveAccounts = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--version") {
      std::printf("zk-elect %s\n", ZKAGENT_VERSION);
      std::exit(0);
    }
    if (i + 1 >= argc) usageError("missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--zk") {
      args.election.session.hosts = value;
    } else if (flag == "--root") {
      args.election.root = value;
    } else if (flag == "--instance-id") {
      args.election.instanceId = value;
    } else if (flag == "--endpoint") {
      args.election.endpoint = value;
    } else if (flag == "--session-timeout-ms") {
      int ms = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (ec != std::errc() || end != value.data() + value.size() || ms <= 0) {
        usageError("--session-timeout-ms must be a positive integer, got '" + value + "'");
      }
      args.election.session.timeout = Millis(ms);
    } else if (flag == "--accounts") {
      haveAccounts = true;
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        addAccount(args, seen, value.substr(start, comma - start));
        start = comma + 1;
      }
    } else if (flag == "--digest-file") {
      args.election.session.digest = readDigest(value);
    } else if (flag == "--accounts-file") {
      haveAccounts = true;
      std::ifstream in(value);
      if (!in) usageError("cannot read accounts file '" + value + "'");
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.front() == '#') continue;
        addAccount(args, seen, line);
      }
    } else {
      usageError("unknown argument '" + flag + "'");
    }
  }
  if (args.election.session.hosts.empty()) usageError("--zk is required");
  if (args.election.instanceId.empty()) usageError("--instance-id is required");
  if (!haveAccounts || args.accounts.empty())
    usageError("--accounts or --accounts-file is required");
  if (auto error = naming::rootPathError(args.election.root)) usageError("--root: " + *error);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  // With stdin closed, the next descriptor opened (the io_context's own) would land on fd 0 and be
  // read as commands: keep 0-2 taken by /dev/null before anything else opens a descriptor.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) ::open("/dev/null", O_RDWR);
  }
  Args args = parseArgs(argc, argv);
  zkagent::logging::setUp({"zk-elect"});

  asio::io_context io;
  EventLines lines(io.get_executor());
  ElectionGroup group(io, args.election);
  bool ready = false;
  asio::steady_timer readyPoll(io);

  // READY once every candidate holds a member node on this session.
  std::function<void()> pollReady = [&] {
    if (ready) return;
    auto all = group.status();
    bool registered = group.sessionState() == SessionState::Connected;
    for (auto& s : all) registered = registered && s.seq >= 0;
    if (registered) {
      ready = true;
      lines.emit("READY");
      return;
    }
    readyPoll.expires_after(Millis(50));  // status() copies every account: poll gently
    readyPoll.async_wait([&](boost::system::error_code ec) {
      if (!ec) pollReady();
    });
  };

  group.onSession([&](const SessionEvent& ev) {
    if (ev.state == SessionState::Connected && ev.newSession) {
      lines.emit("SESSION " + std::to_string(unixNanos()) + " " +
                 std::to_string(ev.negotiatedTimeout.count()));
      pollReady();
    }
  });
  group.onLeadership([&lines](const LeadershipEvent& ev) {
    if (ev.kind == LeadershipEvent::Kind::Acquired) {
      lines.emit("LEADER " + ev.account + " " + std::to_string(ev.token) + " " +
                 std::to_string(unixNanos()));
    } else {
      lines.emit("LOST " + ev.account + " " + std::string(toString(ev.reason)) + " " +
                 std::to_string(unixNanos()));
    }
  });
  for (auto& a : args.accounts) group.join(a);
  group.start();

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (ec) return;
    group.stop([&] { io.stop(); });
  });

  // Operator commands on stdin; end of input just stops reading.
  // Commands are optional: a closed stdin, or one that cannot be polled (/dev/null, a file), is
  // simply not read. The copy goes above fd 2 so a closed stdin stays closed.
  asio::posix::stream_descriptor input(io);
  if (int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3); fd >= 0) {
    boost::system::error_code ec;
    input.assign(fd, ec);
    if (ec) ::close(fd);
  }
  asio::streambuf buffer;
  std::function<void()> readCommand = [&] {
    asio::async_read_until(input, buffer, '\n', [&](boost::system::error_code ec, size_t) {
      if (ec) return;
      std::istream line(&buffer);
      std::string verb, account;
      line >> verb >> account;
      line.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      const bool known = verb == "resign" || verb == "check" || verb == "strict";
      if (const auto error = naming::accountIdError(account); known && error) {
        std::fprintf(stderr, "zk-elect: account id '%s': %s\n", account.c_str(), error->c_str());
      } else if (verb == "resign") {
        group.resign(account);
      } else if (verb == "check") {
        printGate(lines, account, group.check(account));
      } else if (verb == "strict") {
        group.checkStrict(account,
                          [&lines, account](GateDecision d) { printGate(lines, account, d); });
      } else if (!verb.empty()) {
        std::fprintf(stderr,
                     "zk-elect: unknown command '%s' (expected: resign|check|strict <account>)\n",
                     verb.c_str());
      }
      readCommand();
    });
  };
  if (input.is_open()) readCommand();

  io.run();
  lines.flush();
  return 0;
}
