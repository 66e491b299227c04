#include <gtest/gtest.h>

#include <stdexcept>

#include "zkagent/http.hpp"

using namespace zkagent::http;

namespace {

Request make(Method method, std::string path, std::string authorization = {}) {
  Request request;
  request.method = method;
  request.path = path;
  request.target = path;
  if (!authorization.empty()) request.headers.emplace_back("authorization", authorization);
  return request;
}

std::optional<std::string> headerOf(const Response& response, std::string_view name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

}  // namespace

TEST(Router, ParameterSegmentsLandInParams) {
  Router router;
  router.add(Method::Post, "/v1/accounts/{id}/reset-hwm",
             [](const Request& request) { return Response::text(200, request.params.at("id")); });
  auto response = router.handle(make(Method::Post, "/v1/accounts/acc-7/reset-hwm"));
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "acc-7");
}

TEST(Router, LiteralRouteWinsOverParameterRoute) {
  Router router;
  router.add(Method::Get, "/v1/accounts/{id}",
             [](const Request&) { return Response::text(200, "param"); });
  router.add(Method::Get, "/v1/accounts/all",
             [](const Request&) { return Response::text(200, "literal"); });
  EXPECT_EQ(router.handle(make(Method::Get, "/v1/accounts/all")).body, "literal");
  EXPECT_EQ(router.handle(make(Method::Get, "/v1/accounts/x")).body, "param");
}

TEST(Router, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  Router router;
  router.add(Method::Post, "/v1/ops", [](const Request&) { return Response::json(200, "{}"); });
  auto missing = router.handle(make(Method::Get, "/v1/nothing"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/v1/nothing"), std::string::npos);
  auto wrong = router.handle(make(Method::Get, "/v1/ops"));
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(headerOf(wrong, "Allow"), "POST");
  // A parameter never matches an empty or extra segment.
  router.add(Method::Get, "/a/{x}", [](const Request&) { return Response::json(200, "{}"); });
  EXPECT_EQ(router.handle(make(Method::Get, "/a")).status, 404);
  EXPECT_EQ(router.handle(make(Method::Get, "/a/b/c")).status, 404);
}

TEST(Router, BearerTokenIsRequiredExceptOnPublicRoutes) {
  Router router({.bearerToken = "s3cret"});
  router.add(Method::Get, "/data", [](const Request&) { return Response::text(200, "data"); });
  router.add(
      Method::Get, "/healthz", [](const Request&) { return Response::text(200, "ok"); },
      Access::Public);
  auto anonymous = router.handle(make(Method::Get, "/data"));
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(headerOf(anonymous, "WWW-Authenticate"), "Bearer");
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "Bearer wrong")).status, 401);
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "Bearer s3cre")).status, 401);
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "Bearer s3cret!")).status, 401);
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "Basic s3cret")).status, 401);
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "Bearer s3cret")).status, 200);
  EXPECT_EQ(router.handle(make(Method::Get, "/data", "bearer s3cret")).status, 200);
  EXPECT_EQ(router.handle(make(Method::Get, "/healthz")).status, 200);
}

// Operator routes need the operator token, not the bearer token; with no operator token they are
// refused naming the setting, unless operator actions are explicitly open.
TEST(Router, OperatorRoutesNeedTheOperatorToken) {
  auto routes = [](RouterOptions options) {
    Router router(std::move(options));
    router.add(Method::Get, "/data", [](const Request&) { return Response::text(200, "data"); });
    router.add(
        Method::Post, "/drain", [](const Request&) { return Response::text(200, "drained"); },
        Access::Operator);
    return router;
  };
  auto both = routes({.bearerToken = "agent", .operatorToken = "operator"});
  EXPECT_EQ(both.handle(make(Method::Post, "/drain", "Bearer agent")).status, 401);
  EXPECT_EQ(both.handle(make(Method::Post, "/drain")).status, 401);
  EXPECT_EQ(both.handle(make(Method::Post, "/drain", "Bearer operator")).status, 200);
  EXPECT_EQ(both.handle(make(Method::Get, "/data", "Bearer operator")).status, 401);
  EXPECT_EQ(both.handle(make(Method::Get, "/data", "Bearer agent")).status, 200);

  auto none = routes({.bearerToken = "agent", .operatorTokenSetting = "admin.token"});
  auto refused = none.handle(make(Method::Post, "/drain", "Bearer agent"));
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("POST /drain is an operator action and no operator token is "
                              "configured: set admin.token"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(routes({}).handle(make(Method::Post, "/drain")).status, 403);

  auto open = routes({.bearerToken = "agent", .openOperatorActions = true});
  EXPECT_EQ(open.handle(make(Method::Post, "/drain")).status, 401);
  EXPECT_EQ(open.handle(make(Method::Post, "/drain", "Bearer agent")).status, 200);
  EXPECT_EQ(routes({.openOperatorActions = true}).handle(make(Method::Post, "/drain")).status, 200);
}

// What a server asks before reading a body: the refusals dispatch would give, and nothing for a
// request a handler would get (the handler does not run either way).
TEST(Router, RefusalOnTheHeadersAloneIsWhatDispatchWouldRefuse) {
  Router router({.bearerToken = "s3cret"});
  int handled = 0;
  router.add(Method::Post, "/upload", [&](const Request&) {
    ++handled;
    return Response::text(200, "ok");
  });
  router.add(
      Method::Get, "/healthz", [&](const Request&) { return Response::text(200, "ok"); },
      Access::Public);
  EXPECT_EQ(router.refusal(make(Method::Post, "/upload"))->status, 401);
  EXPECT_EQ(router.refusal(make(Method::Post, "/upload", "Bearer s3cre"))->status, 401);
  EXPECT_EQ(router.refusal(make(Method::Post, "/nowhere", "Bearer s3cret"))->status, 404);
  EXPECT_EQ(router.refusal(make(Method::Get, "/upload", "Bearer s3cret"))->status, 405);
  EXPECT_FALSE(router.refusal(make(Method::Post, "/upload", "Bearer s3cret")).has_value());
  EXPECT_FALSE(router.refusal(make(Method::Get, "/healthz")).has_value());
  EXPECT_EQ(handled, 0);
}

TEST(Router, HandlerExceptionBecomes500WithMessage) {
  Router router;
  router.add(Method::Get, "/boom",
             [](const Request&) -> Response { throw std::runtime_error("disk \"full\""); });
  auto response = router.handle(make(Method::Get, "/boom"));
  EXPECT_EQ(response.status, 500);
  EXPECT_EQ(response.body, R"({"error":"internal error: disk \"full\""})");
}

TEST(Router, MalformedOrDuplicateRoutesAreRejected) {
  Router router;
  auto ok = [](const Request&) { return Response::json(200, "{}"); };
  EXPECT_THROW(router.add(Method::Get, "no-slash", ok), std::invalid_argument);
  EXPECT_THROW(router.add(Method::Get, "/a/{open", ok), std::invalid_argument);
  EXPECT_THROW(router.add(Method::Get, "/a/{}", ok), std::invalid_argument);
  router.add(Method::Get, "/a/{x}", ok);
  EXPECT_THROW(router.add(Method::Get, "/a/{x}", ok), std::invalid_argument);
}

TEST(Request, HeaderLookupIgnoresCase) {
  Request request;
  request.headers.emplace_back("content-type", "application/json");
  EXPECT_EQ(request.header("Content-Type"), "application/json");
  EXPECT_EQ(request.header("x-missing"), std::nullopt);
}

TEST(Response, ErrorEscapesTheMessageAsJson) {
  EXPECT_EQ(Response::error(400, "bad \\ \"x\"\n\x01").body, R"({"error":"bad \\ \"x\"\n\u0001"})");
}
