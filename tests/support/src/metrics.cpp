#include "zktest/metrics.hpp"

#include <sstream>

namespace zktest {

std::optional<double> metricSample(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

bool hasMetricFamily(const std::string& exposition, const std::string& name) {
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > name.size() && line.starts_with(name) &&
        (line[name.size()] == ' ' || line[name.size()] == '{')) {
      return true;
    }
  }
  return false;
}

}  // namespace zktest
