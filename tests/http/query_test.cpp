// The one query-string reader of every listener (the agent's device upgrade, the gateway's
// subscriber upgrade).
#include "zkagent/http/query.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using zkagent::http::forEachParameter;
using zkagent::http::parameterValue;
using zkagent::http::percentDecode;

TEST(Query, EscapesAndPlusDecodeAsFormsWriteThemAndMalformedEscapesStay) {
  EXPECT_EQ(percentDecode("alice%2Ccarol"), "alice,carol");
  EXPECT_EQ(percentDecode("a%2cb"), "a,b");
  EXPECT_EQ(percentDecode("b+b"), "b b");  // URLSearchParams writes a space as '+'
  EXPECT_EQ(percentDecode("%2B"), "+");
  EXPECT_EQ(percentDecode("100%"), "100%");
  EXPECT_EQ(percentDecode("%zz%4"), "%zz%4");
}

TEST(Query, ParametersComeInOrderWithDecodedKeysAndEmptyPartsSkipped) {
  std::vector<std::pair<std::string, std::string>> seen;
  forEachParameter("viewer=bob&&t%61rgets=a%2Cb&flag&token=x.y-z_", [&](const std::string& key,
                                                                        std::string_view part) {
    seen.emplace_back(key, parameterValue(part));
  });
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::string>>{
                      {"viewer", "bob"}, {"targets", "a,b"}, {"flag", ""}, {"token", "x.y-z_"}}));
}

}  // namespace
