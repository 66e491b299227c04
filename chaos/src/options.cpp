#include "options.hpp"

#include <cstdlib>
#include <iostream>
#include <string>

namespace zkagent::chaos {

namespace {

[[noreturn]] void usage(const std::string& error, int exitCode = 2) {
  std::ostream& out = exitCode == 0 ? std::cout : std::cerr;
  if (!error.empty()) out << "chaos-runner: " << error << "\n";
  out << "usage: chaos-runner --events N --seed S --out DIR [--accounts K] [--agents M]\n"
         "                    [--gateways G]\n"
         "                    [--session-timeout-ms MS] [--workers-per-agent W]\n"
         "                    [--think-ms MS] [--devices-per-account D] [--bin-dir DIR]\n"
         "                    [--break-fencing] [--gateway-partitions] [--clock-steps]\n"
         "                    [--disk-faults] [--device-storms] [--duration-s S]\n"
         "                    [--device-timing-scale K] [--calm-ms MS] [--no-process-kills]\n"
         "                    [--gateway-compact-after-mib N]\n"
         "       chaos-runner --print-schedule --events N --seed S [--agents M] [--gateways G]\n";
  std::exit(exitCode);
}

long long parseNumber(const std::string& flag, const std::string& text, long long lo,
                      long long hi) {
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size() && value >= lo && value <= hi) return value;
  } catch (const std::exception&) {
  }
  usage(flag + ": must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
        ", got '" + text + "'");
}

}  // namespace

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--break-fencing") {
      o.breakFencing = true;
      continue;
    }
    if (flag == "--gateway-partitions") {
      o.gatewayPartitions = true;
      continue;
    }
    if (flag == "--clock-steps") {
      o.clockSteps = true;
      continue;
    }
    if (flag == "--disk-faults") {
      o.diskFaults = true;
      continue;
    }
    if (flag == "--device-storms") {
      o.deviceStorms = true;
      continue;
    }
    if (flag == "--no-process-kills") {
      o.noProcessKills = true;
      continue;
    }
    if (flag == "--help") {
      std::cout << "chaos-runner: a seeded chaos run; writes DIR/history.json for chaos/check.py "
                   "(docs/testing.md \"Chaos runs\")\n";
      usage("", 0);
    }
    if (flag == "--print-schedule") {
      o.printSchedule = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--events") {
      o.events = static_cast<int>(parseNumber(flag, value, 1, 100000));
    } else if (flag == "--duration-s") {
      o.durationS = static_cast<int>(parseNumber(flag, value, 1, 7 * 24 * 3600));
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(parseNumber(flag, value, 0, 1LL << 62));
    } else if (flag == "--out") {
      o.out = value;
    } else if (flag == "--accounts") {
      o.accounts = static_cast<int>(parseNumber(flag, value, 1, 5000));
    } else if (flag == "--agents") {
      o.agents = static_cast<int>(parseNumber(flag, value, 2, 9));
    } else if (flag == "--gateways") {
      o.gateways = static_cast<int>(parseNumber(flag, value, 1, 3));
    } else if (flag == "--session-timeout-ms") {
      o.sessionTimeoutMs = static_cast<int>(parseNumber(flag, value, 600, 60000));
    } else if (flag == "--workers-per-agent") {
      o.workersPerAgent = static_cast<int>(parseNumber(flag, value, 1, 64));
    } else if (flag == "--devices-per-account") {
      o.devicesPerAccount = static_cast<int>(parseNumber(flag, value, 0, 100));
    } else if (flag == "--device-timing-scale") {
      o.deviceTimingScale = static_cast<int>(parseNumber(flag, value, 1, 100));
    } else if (flag == "--calm-ms") {
      o.extraCalmMs = static_cast<int>(parseNumber(flag, value, 0, 3600 * 1000));
    } else if (flag == "--gateway-compact-after-mib") {
      o.gatewayCompactAfterMib = static_cast<int>(parseNumber(flag, value, 0, 1 << 20));
    } else if (flag == "--think-ms") {
      o.thinkMs = static_cast<int>(parseNumber(flag, value, 0, 10000));
    } else if (flag == "--bin-dir") {
      o.binDir = value;
    } else {
      usage("unknown flag '" + flag + "'");
    }
  }
  if (o.out.empty() && !o.printSchedule) usage("--out: required");
  // A cluster gateway always fences against ZooKeeper (no hwm_only to break), and the hold proxy
  // holds an agent's link to one gateway, not to the owners it routes to by itself.
  if (o.gateways > 1 && o.breakFencing)
    usage("--break-fencing: not with --gateways > 1 (a cluster gateway has no hwm_only mode)");
  if (o.gateways > 1 && o.diskFaults)
    usage("--disk-faults: not with --gateways > 1 (one gateway's data dir only)");
  return o;
}

ScheduleOptions scheduleOptions(const Options& options) {
  ScheduleOptions schedule;
  schedule.seed = options.seed;
  schedule.events = options.events;
  schedule.agents = options.agents;
  schedule.gateways = options.gateways;
  schedule.sessionTimeoutMs = options.sessionTimeoutMs;
  schedule.breakFencing = options.breakFencing;
  schedule.gatewayPartitions = options.gatewayPartitions;
  schedule.clockSteps = options.clockSteps;
  schedule.diskFaults = options.diskFaults;
  schedule.deviceStorms = options.deviceStorms;
  schedule.noProcessKills = options.noProcessKills;
  return schedule;
}

}  // namespace zkagent::chaos
