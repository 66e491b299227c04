#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <zkagent/fencing.hpp>

namespace zkagent::fencing {
namespace {

using nlohmann::json;

json validRequest() {
  return {{"account", "wx_desk-1.a"},         {"token", 7},     {"instanceId", "host-a-001"},
          {"sessionId", 72057594037927937LL}, {"opId", "op-1"}, {"payload", {{"text", "hi"}}}};
}

std::string errorOf(const json& request) {
  try {
    parseOperation(request.dump());
  } catch (const BadRequest& error) {
    return error.what();
  }
  return "";
}

TEST(FencingWire, ParsesAFullOperation) {
  const Operation op = parseOperation(validRequest().dump());
  EXPECT_EQ(op.fencing.account, "wx_desk-1.a");
  EXPECT_EQ(op.fencing.token, 7u);
  EXPECT_EQ(op.fencing.instanceId, "host-a-001");
  EXPECT_EQ(op.fencing.sessionId, 72057594037927937LL);
  EXPECT_EQ(op.opId, "op-1");
  EXPECT_EQ(json::parse(op.payload), json({{"text", "hi"}}));
}

TEST(FencingWire, OperationRoundTripsThroughJson) {
  const Operation op = parseOperation(validRequest().dump());
  EXPECT_EQ(parseOperation(toJson(op).dump()), op);
}

TEST(FencingWire, MissingPayloadIsNull) {
  json request = validRequest();
  request.erase("payload");
  EXPECT_EQ(parseOperation(request.dump()).payload, "null");
}

TEST(FencingWire, NegativeSessionIdIsAccepted) {
  // Session ids of servers with id >= 128 are negative as signed 64-bit numbers.
  json request = validRequest();
  request["sessionId"] = -5;
  EXPECT_EQ(parseOperation(request.dump()).fencing.sessionId, -5);
}

TEST(FencingWire, EachMissingFieldIsNamed) {
  for (const char* field : {"account", "token", "instanceId", "sessionId", "opId"}) {
    json request = validRequest();
    request.erase(field);
    EXPECT_EQ(errorOf(request), std::string("missing field '") + field + "'") << field;
  }
}

TEST(FencingWire, IllTypedTokenIsRefused) {
  for (const json& bad : {json(-1), json(1.5), json("7"), json(nullptr), json::array()}) {
    json request = validRequest();
    request["token"] = bad;
    EXPECT_NE(errorOf(request).find("'token' must be a non-negative integer"), std::string::npos)
        << bad.dump();
  }
}

TEST(FencingWire, TokenBeyondUint64IsRefused) {
  const std::string body = R"({"account":"a","token":18446744073709551616,"instanceId":"i",)"
                           R"("sessionId":1,"opId":"o"})";
  EXPECT_THROW(parseOperation(body), BadRequest);
}

TEST(FencingWire, SessionIdBeyondInt64IsRefused) {
  json request = validRequest();
  request["sessionId"] = 9223372036854775808ULL;
  EXPECT_NE(errorOf(request).find("'sessionId'"), std::string::npos);
}

// The rule itself is tested in tests/naming; here: the wire refuses with it, naming the field.
TEST(FencingWire, AnAccountIdOutsideTheRuleIsRefusedNamingTheField) {
  json request = validRequest();
  request["account"] = "../etc";
  EXPECT_EQ(errorOf(request), "field 'account': must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  request["account"] = "A-z_0.9";
  EXPECT_EQ(errorOf(request), "");
}

TEST(FencingWire, IdsMustBePrintableAndBounded) {
  for (const char* field : {"opId", "instanceId"}) {
    for (const std::string& bad :
         {std::string(), std::string(129, 'o'), std::string("a b"), std::string("a\nb")}) {
      json request = validRequest();
      request[field] = bad;
      EXPECT_NE(errorOf(request).find(std::string("field '") + field + "'"), std::string::npos)
          << field << " = " << json(bad).dump();
    }
  }
}

TEST(FencingWire, MalformedJsonErrorIsAsciiAndSaysSo) {
  const std::string body = "{\"account\": \xff\xfe";
  try {
    parseOperation(body);
    FAIL() << "malformed JSON was accepted";
  } catch (const BadRequest& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("malformed JSON", 0), 0u) << message;
    EXPECT_NO_THROW(static_cast<void>(json(message).dump()));  // a gateway can send it
  }
}

TEST(FencingWire, NumberBeyondDoubleRangeIsMalformedNotACrash) {
  // Found by the fuzzer: nlohmann throws out_of_range, not parse_error, for this.
  try {
    parseOperation("[200e01005");
    FAIL() << "accepted";
  } catch (const BadRequest& error) {
    EXPECT_EQ(std::string(error.what()).rfind("malformed JSON", 0), 0u) << error.what();
  }
}

TEST(FencingWire, NonObjectIsRefused) {
  EXPECT_EQ(errorOf(json::array({1, 2})), "request must be a JSON object");
}

TEST(FencingWire, OversizedInputIsRefused) {
  json request = validRequest();
  request["payload"] = std::string(kMaxOperationBytes, 'x');
  EXPECT_NE(errorOf(request).find("request too large"), std::string::npos);
}

TEST(FencingWire, DeeplyNestedPayloadIsRefused) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  const std::string body = R"({"account":"a","token":1,"instanceId":"i","sessionId":1,)"
                           R"("opId":"o","payload":)" +
                           deep + "}";
  EXPECT_THROW(parseOperation(body), BadRequest);
}

TEST(FencingWire, FencingTokenParsesAlone) {
  const FencingToken token =
      parseFencingToken(R"({"account":"acc","token":3,"instanceId":"h","sessionId":9})");
  EXPECT_EQ(token, (FencingToken{"acc", 3, "h", 9}));
  EXPECT_EQ(parseFencingToken(toJson(token).dump()), token);
}

TEST(FencingWire, DecisionJsonMatchesTheGatewayContract) {
  EXPECT_EQ(toJson(Decision{Verdict::accepted, 5, false, {}}),
            json({{"accepted", true}, {"hwm", 5}}));
  const json rejected = toJson(Decision{Verdict::stale_token, 9, false, "token 3 is below"});
  EXPECT_EQ(rejected["accepted"], false);
  EXPECT_EQ(rejected["reason"], "stale_token");
  EXPECT_EQ(rejected["hwm"], 9);
  EXPECT_EQ(toJson(Decision{Verdict::accepted, 5, true, {}})["replayed"], true);
}

TEST(FencingWire, ReasonCodesAreStable) {
  EXPECT_EQ(reasonCode(Verdict::accepted), "accepted");
  EXPECT_EQ(reasonCode(Verdict::stale_token), "stale_token");
  EXPECT_EQ(reasonCode(Verdict::not_current_leader), "not_current_leader");
  EXPECT_EQ(reasonCode(Verdict::account_fenced), "account_fenced");
}

}  // namespace
}  // namespace zkagent::fencing
