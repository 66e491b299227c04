// election-bench's command line (bench_settings.hpp).
#include "bench_settings.hpp"

#include <cstdio>
#include <cstdlib>
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
    "                      [--floor-multi-bytes N]\n";

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
      try {
        size_t used = 0;
        s.floorMultiBytes = std::stoul(value, &used);
        if (used != value.size() || s.floorMultiBytes == 0) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        usageError("--floor-multi-bytes must be a positive integer, got '" + value + "'");
      }
    } else if (flag == "--peers") {
      s.peers = parseList(value, {"kazoo", "curator"}, flag);
    } else if (flag == "--scenarios") {
      s.scenarios = parseList(value, {"handover", "crash", "cold", "gate"}, flag);
    } else if (flag == "--sizes") {
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');) {
        size_t used = 0, n = 0;
        try {
          n = std::stoul(item, &used);
        } catch (const std::exception&) {
        }
        if (used != item.size() || n == 0)
          usageError("--sizes: '" + item + "' is not a positive integer");
        s.sizes.insert(n);
      }
    } else if (flag == "--rounds") {
      try {
        size_t used = 0;
        s.rounds = std::stoi(value, &used);
        if (used != value.size() || s.rounds <= 0) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        usageError("--rounds must be a positive integer, got '" + value + "'");
      }
    } else if (flag == "--max-accounts") {
      try {
        size_t used = 0;
        s.maxAccounts = std::stoul(value, &used);
        if (used != value.size() || s.maxAccounts == 0) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        usageError("--max-accounts must be a positive integer, got '" + value + "'");
      }
    } else {
      usageError("unknown argument '" + flag + "'");
    }
  }
  return s;
}

}  // namespace zkagent::bench
