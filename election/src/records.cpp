// The digest file, znode records (their JSON) and the names of enums.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "zkagent/election.hpp"

namespace zkagent::election {

std::string readDigestFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read digest file '" + path + "'");
  std::string digest;
  std::getline(in, digest);
  while (!digest.empty() && digest.back() == '\r') digest.pop_back();
  const auto colon = digest.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == digest.size())
    throw std::invalid_argument("digest file '" + path +
                                "' must hold user:password on its first line");
  return digest;
}

std::string toJson(const MemberInfo& m) {
  nlohmann::json j{{"instanceId", m.instanceId},
                   {"pid", m.pid},
                   {"startTime", m.startTime},
                   {"endpoint", m.endpoint}};
  if (!m.deviceEndpoint.empty()) j["deviceEndpoint"] = m.deviceEndpoint;
  return j.dump();
}

std::string toJson(const ActiveInfo& a) {
  nlohmann::json j{{"seq", a.seq},
                   {"instanceId", a.instanceId},
                   {"sessionId", a.sessionId},
                   {"activeSince", a.activeSince},
                   {"endpoint", a.endpoint}};
  if (!a.deviceEndpoint.empty()) j["deviceEndpoint"] = a.deviceEndpoint;
  return j.dump();
}

std::optional<MemberInfo> parseMember(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object() || !j.contains("instanceId") || !j["instanceId"].is_string())
    return std::nullopt;
  MemberInfo m;
  m.instanceId = j["instanceId"].get<std::string>();
  if (auto it = j.find("pid"); it != j.end() && it->is_number_integer()) m.pid = it->get<int64_t>();
  if (auto it = j.find("startTime"); it != j.end() && it->is_number_integer()) {
    m.startTime = it->get<int64_t>();
  }
  if (auto it = j.find("endpoint"); it != j.end() && it->is_string())
    m.endpoint = it->get<std::string>();
  if (auto it = j.find("deviceEndpoint"); it != j.end() && it->is_string())
    m.deviceEndpoint = it->get<std::string>();
  return m;
}

std::optional<ActiveInfo> parseActive(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto seq = j.find("seq");
  auto instance = j.find("instanceId");
  auto session = j.find("sessionId");
  if (seq == j.end() || !seq->is_number_integer() || instance == j.end() ||
      !instance->is_string() || session == j.end() || !session->is_number_integer()) {
    return std::nullopt;
  }
  ActiveInfo a;
  a.seq = seq->get<int64_t>();
  a.instanceId = instance->get<std::string>();
  a.sessionId = session->get<int64_t>();
  if (auto it = j.find("activeSince"); it != j.end() && it->is_number_integer()) {
    a.activeSince = it->get<int64_t>();
  }
  if (auto it = j.find("endpoint"); it != j.end() && it->is_string())
    a.endpoint = it->get<std::string>();
  if (auto it = j.find("deviceEndpoint"); it != j.end() && it->is_string())
    a.deviceEndpoint = it->get<std::string>();
  return a;
}

std::string_view toString(SessionState s) {
  switch (s) {
    case SessionState::Connecting:
      return "connecting";
    case SessionState::Connected:
      return "connected";
    case SessionState::Suspended:
      return "suspended";
    case SessionState::Expired:
      return "expired";
    case SessionState::Closed:
      return "closed";
  }
  return "unknown";
}

std::string_view toString(ZkError e) {
  switch (e) {
    case ZkError::Ok:
      return "ok";
    case ZkError::NoNode:
      return "no_node";
    case ZkError::NodeExists:
      return "node_exists";
    case ZkError::NotEmpty:
      return "not_empty";
    case ZkError::BadVersion:
      return "bad_version";
    case ZkError::ConnectionLoss:
      return "connection_loss";
    case ZkError::SessionExpired:
      return "session_expired";
    case ZkError::Closing:
      return "closing";
    case ZkError::Other:
      return "other";
  }
  return "unknown";
}

std::string_view toString(Role r) {
  switch (r) {
    case Role::Init:
      return "INIT";
    case Role::Candidate:
      return "CANDIDATE";
    case Role::Waiting:
      return "WAITING";
    case Role::Leader:
      return "LEADER";
    case Role::Suspend:
      return "SUSPEND";
    case Role::Stopped:
      return "STOPPED";
  }
  return "UNKNOWN";
}

std::string_view toString(LossReason r) {
  switch (r) {
    case LossReason::Suspended:
      return "suspended";
    case LossReason::SessionExpired:
      return "session_expired";
    case LossReason::Drift:
      return "drift";
    case LossReason::Resigned:
      return "resigned";
    case LossReason::Stopped:
      return "stopped";
    case LossReason::Rebalance:
      return "rebalance";
  }
  return "unknown";
}

std::string_view toString(GateDecision::Verdict v) {
  switch (v) {
    case GateDecision::Verdict::Allowed:
      return "allowed";
    case GateDecision::Verdict::NotLeader:
      return "not_leader";
    case GateDecision::Verdict::Suspended:
      return "suspended";
    case GateDecision::Verdict::Drifted:
      return "drifted";
    case GateDecision::Verdict::UnknownAccount:
      return "unknown_account";
  }
  return "unknown";
}

}  // namespace zkagent::election
