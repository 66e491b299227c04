// election-bench's command line (bench_settings.hpp).
#include "bench_settings.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace zkagent::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: election-bench [--out FILE] [--peers kazoo,curator|none]\n"
    "                      [--scenarios handover,crash,cold,gate] [--max-accounts N] [--sizes N,N] "
    "[--rounds N]\n"
    "                      [--quick] [--zk-elect PATH] [--zk-settings defaults|fast] "
    "[--servers 1|3|5] [--floor on|off]\n"
    "                      [--floor-multi-bytes N] [--warmups N]\n";

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "election-bench: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

std::set<std::string> parseList(const std::string& value, const std::set<std::string>& allowed,
                                const std::string& flag) {
  std::set<std::string> out;
  if (value == "none") return out;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    if (!allowed.contains(item)) usageError(flag + ": unknown item '" + item + "'");
    out.insert(item);
  }
  return out;
}

// A whole number in [least, most] (the value as given in the error otherwise).
size_t parseCount(const std::string& flag, const std::string& value, size_t least,
                  size_t most = std::numeric_limits<size_t>::max()) {
  size_t used = 0, n = 0;
  try {
    n = std::stoul(value, &used);
  } catch (const std::exception&) {
  }
  if (value.empty() || value[0] == '-' || used != value.size() || n < least || n > most) {
    usageError(
        flag + " must be an integer from " + std::to_string(least) +
        (most == std::numeric_limits<size_t>::max() ? " up" : " to " + std::to_string(most)) +
        ", got '" + value + "'");
  }
  return n;
}

}  // namespace

Settings parseArgs(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--quick") {
      s.quick = true;
      continue;
    }
    if (i + 1 >= argc) usageError("missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--out") {
      s.out = value;
    } else if (flag == "--zk-elect") {
      s.zkElect = value;
      if (!fs::exists(s.zkElect)) usageError("--zk-elect: no such file '" + value + "'");
    } else if (flag == "--zk-settings") {
      if (value != "defaults" && value != "fast")
        usageError("--zk-settings must be 'defaults' or 'fast', got '" + value + "'");
      s.serverDefaults = value == "defaults";
    } else if (flag == "--servers") {
      if (value != "1" && value != "3" && value != "5")
        usageError("--servers must be 1, 3 or 5, got '" + value + "'");
      s.servers = std::stoul(value);
    } else if (flag == "--floor") {
      if (value != "on" && value != "off")
        usageError("--floor must be 'on' or 'off', got '" + value + "'");
      s.floor = value == "on";
    } else if (flag == "--floor-multi-bytes") {
      s.floorMultiBytes = parseCount(flag, value, 1);
    } else if (flag == "--warmups") {
      s.warmups = static_cast<int>(parseCount(flag, value, 0, 100));
    } else if (flag == "--peers") {
      s.peers = parseList(value, {"kazoo", "curator"}, flag);
    } else if (flag == "--scenarios") {
      s.scenarios = parseList(value, {"handover", "crash", "cold", "gate"}, flag);
    } else if (flag == "--sizes") {
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');)
        s.sizes.insert(parseCount(flag, item, 1));
    } else if (flag == "--rounds") {
      s.rounds = static_cast<int>(parseCount(flag, value, 1, 1000));
    } else if (flag == "--max-accounts") {
      s.maxAccounts = parseCount(flag, value, 1);
    } else {
      usageError("unknown argument '" + flag + "'");
    }
  }
  return s;
}

}  // namespace zkagent::bench
