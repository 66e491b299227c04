// zk-agentctl: the operator CLI over a zk-agent's admin API (docs/operator-guide.md).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zkagent/http.hpp"
#include "zkagent/naming.hpp"

namespace {

constexpr std::string_view kUsage =
    R"(usage: zk-agentctl [--admin HOST:PORT] [--token TOKEN] COMMAND
  status            the agent's full status (JSON)
  leaders           one line per account: account, role, token, leader, blocked reasons
  resign ACCOUNT    hand ACCOUNT over now (the agent stands again at the back of the queue)
  drain             stop standing, hand every led account to a schedulable successor

--admin defaults to 127.0.0.1:8470; the token defaults to $ZKAGENT_ADMIN_TOKEN.
Exit codes: 0 done, 1 the agent refused or failed, 2 usage error, 3 agent unreachable.
)";

int usage(const std::string& problem) {
  std::cerr << "zk-agentctl: " << problem << "\n" << kUsage;
  return 2;
}

int printLeaders(const std::string& body) {
  const auto status = nlohmann::json::parse(body, nullptr, false);
  if (!status.is_object()) return usage("the agent answered something that is not JSON");
  std::printf("%-32s %-9s %-6s %-24s %s\n", "ACCOUNT", "ROLE", "TOKEN", "LEADER", "BLOCKED");
  for (const auto& a : status.value("accounts", nlohmann::json::array())) {
    std::string blocked;
    for (const auto& r : a.value("blocked_reasons", nlohmann::json::array())) {
      if (!blocked.empty()) blocked += ',';
      blocked += r.get<std::string>();
    }
    const auto& leader = a["leader"];
    std::printf("%-32s %-9s %-6s %-24s %s\n", a.value("account", "").c_str(),
                a.value("role", "").c_str(), a["token"].is_null() ? "-" : a["token"].dump().c_str(),
                leader.is_object() ? leader.value("instance", "").c_str() : "-", blocked.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string admin = "127.0.0.1:8470";
  const char* envToken = std::getenv("ZKAGENT_ADMIN_TOKEN");
  std::string token = envToken ? envToken : "";
  std::vector<std::string> command;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if ((args[i] == "--admin" || args[i] == "--token") && i + 1 < args.size()) {
      (args[i] == "--admin" ? admin : token) = args[i + 1];
      ++i;
    } else {
      command.push_back(args[i]);
    }
  }
  if (command.empty()) return usage("no command");
  zkagent::naming::HostPort address;
  if (auto error =
          zkagent::naming::hostPortError(admin, address, zkagent::naming::PortZero::Refused))
    return usage("--admin: " + *error);
  zkagent::http::ClientOptions options;
  options.host = address.host;
  options.port = address.port;
  options.bearerToken = token;
  zkagent::http::Client client(options);

  zkagent::http::ClientResponse response;
  const std::string& verb = command[0];
  if (verb == "status" || verb == "leaders") {
    if (command.size() != 1) return usage(verb + " takes no argument");
    response = client.get("/v1/status");
  } else if (verb == "drain") {
    if (command.size() != 1) return usage("drain takes no argument");
    response = client.post("/v1/drain", "");
  } else if (verb == "resign") {
    if (command.size() != 2) return usage("resign needs one ACCOUNT");
    response = client.post("/v1/accounts/" + command[1] + "/resign", "");
  } else {
    return usage("unknown command '" + verb + "'");
  }
  if (!response.delivered()) {
    std::cerr << "zk-agentctl: cannot reach " << admin << ": " << response.transportError << "\n";
    return 3;
  }
  if (response.status >= 300) {
    std::cerr << "zk-agentctl: " << verb << " answered " << response.status << ": " << response.body
              << "\n";
    return 1;
  }
  if (verb == "leaders") return printLeaders(response.body);
  const auto body = nlohmann::json::parse(response.body, nullptr, false);
  std::cout << (body.is_discarded() ? response.body : body.dump(2)) << "\n";
  return 0;
}
