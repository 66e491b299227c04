#include "identity.hpp"

#include <nlohmann/json.hpp>

#include "gateway.hpp"

namespace zkagent::gateway {
namespace {

constexpr std::string_view kInstanceUri = "zkagent:instance:";

// SAX handler that keeps the string values of top-level "instanceId" keys and nothing else.
class InstanceIds final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::string> found;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t& text) override {
    if (wanted_) found.push_back(text);
    return value();
  }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool key(string_t& name) override {
    wanted_ = depth_ == 1 && name == "instanceId";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool value() {
    wanted_ = false;
    return true;
  }
  bool enter() {
    ++depth_;
    return value();
  }
  bool leave() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool wanted_ = false;
};

}  // namespace

bool certificateNames(const std::vector<std::string>& peerIdentities, std::string_view instanceId) {
  for (const auto& name : peerIdentities) {
    if (name == instanceId) return true;
    if (name.starts_with(kInstanceUri) && name.substr(kInstanceUri.size()) == instanceId) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> topLevelInstanceIds(std::string_view body) {
  InstanceIds handler;
  if (!nlohmann::json::sax_parse(body, &handler)) return {};
  return std::move(handler.found);
}

std::optional<http::Response> refuseForeignInstance(const Config& config,
                                                    const http::Request& request,
                                                    const std::vector<std::string>& instanceIds) {
  if (config.tlsClientCa.empty()) return std::nullopt;
  for (const auto& instance : instanceIds) {
    if (!certificateNames(request.peerIdentities, instance)) {
      std::string names;
      for (const auto& name : request.peerIdentities) names += (names.empty() ? "" : ", ") + name;
      return http::Response::error(
          403, "instanceId '" + instance + "' is not the instance of this client certificate (" +
                   (names.empty() ? std::string("no certificate") : names) + ")");
    }
  }
  return std::nullopt;
}

}  // namespace zkagent::gateway
