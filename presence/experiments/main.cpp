// presence-experiments: runs the presence experiments (detection latency per way of leaving,
// renewal peak after a mass restart, TTL < renewal negative control) on the virtual clock, prints a
// table and writes the JSON report.
#include <charconv>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "experiments.hpp"

namespace {

constexpr std::string_view kUsage =
    "usage: presence-experiments --out REPORT.json [--seed N]\n"
    "  Runs the presence experiments (detection latency, renewal peak, negative control) on a\n"
    "  virtual clock, prints a table and writes the JSON report. The same seed gives the same\n"
    "  report.\n";

struct Options {
  std::string out;
  std::uint64_t seed = 0;
};

// Returns the options, or nullopt after printing why they are bad.
std::optional<Options> parse(int argc, char** argv) {
  Options options;
  auto fail = [](const std::string& why) {
    std::cerr << "presence-experiments: " << why << "\n" << kUsage;
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg != "--out" && arg != "--seed")
      return fail("unknown argument '" + std::string(arg) + "'");
    if (i + 1 == argc) return fail(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--out") {
      if (value.empty()) return fail("--out needs a non-empty path");
      options.out = value;
      continue;
    }
    const auto [end, error] = std::from_chars(value.begin(), value.end(), options.seed);
    if (error != std::errc{} || end != value.end()) {
      return fail("--seed must be an unsigned integer, got '" + std::string(value) + "'");
    }
  }
  if (options.out.empty()) return fail("--out is required");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  const auto options = parse(argc, argv);
  if (!options) return 2;
  try {
    namespace experiments = zkagent::presence::experiments;
    const experiments::Report report = experiments::run(options->seed);
    std::cout << "seed " << options->seed << "\n\n" << experiments::toTable(report);
    std::ofstream file(options->out);
    file << experiments::toJson(report).dump(2) << "\n";
    file.close();
    if (!file) {
      std::cerr << "presence-experiments: cannot write " << options->out << "\n";
      return 1;
    }
    std::cout << "\nreport written to " << options->out << "\n";
  } catch (const std::exception& error) {
    std::cerr << "presence-experiments: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
