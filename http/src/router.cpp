// Request/response helpers and the Router: everything of the HTTP library that needs no socket.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <future>
#include <stdexcept>

#include "zkagent/http.hpp"

namespace zkagent::http {
namespace {

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::vector<std::string> splitPath(std::string_view path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (start < path.size()) {
    if (path[start] == '/') {
      ++start;
      continue;
    }
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    segments.emplace_back(path.substr(start, end - start));
    start = end;
  }
  return segments;
}

bool isParameter(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

// Compares in time independent of where the strings differ, so the token cannot be guessed
// byte by byte from response times.
bool sameSecret(std::string_view given, std::string_view expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
  }
  return difference == 0;
}

std::string jsonEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Response internalError(const std::exception& error) {
  return Response::error(500, std::string("internal error: ") + error.what());
}

}  // namespace

std::string_view toString(Method method) {
  switch (method) {
    case Method::Get:
      return "GET";
    case Method::Head:
      return "HEAD";
    case Method::Post:
      return "POST";
    case Method::Put:
      return "PUT";
    case Method::Delete:
      return "DELETE";
    case Method::Patch:
      return "PATCH";
    case Method::Options:
      return "OPTIONS";
    case Method::Other:
      break;
  }
  return "OTHER";
}

std::optional<std::string_view> Request::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (equalsIgnoreCase(key, name)) return value;
  }
  return std::nullopt;
}

Response Response::json(int status, std::string body) {
  return Response{status, "application/json", std::move(body), {}};
}

Response Response::text(int status, std::string body, std::string contentType) {
  return Response{status, std::move(contentType), std::move(body), {}};
}

Response Response::error(int status, std::string_view message) {
  return json(status, "{\"error\":\"" + jsonEscape(message) + "\"}");
}

Router::Router(RouterOptions options) : options_(std::move(options)) {}

void Router::add(Method method, std::string_view pattern, Handler handler, Access access) {
  addRoute(method, pattern, Route{method, {}, std::move(handler), {}, access});
}

void Router::addDeferred(Method method, std::string_view pattern, DeferredHandler handler,
                         Access access) {
  addRoute(method, pattern, Route{method, {}, {}, std::move(handler), access});
}

void Router::addRoute(Method method, std::string_view pattern, Route route) {
  if (pattern.empty() || pattern.front() != '/') {
    throw std::invalid_argument("route pattern must start with '/': " + std::string(pattern));
  }
  auto segments = splitPath(pattern);
  for (const auto& segment : segments) {
    bool braces = segment.find_first_of("{}") != std::string::npos;
    if (braces && !isParameter(segment)) {
      throw std::invalid_argument("malformed route segment '" + segment + "' in " +
                                  std::string(pattern));
    }
  }
  for (const auto& existing : routes_) {
    if (existing.method == method && existing.segments == segments) {
      throw std::invalid_argument("duplicate route " + std::string(toString(method)) + " " +
                                  std::string(pattern));
    }
  }
  route.segments = std::move(segments);
  routes_.push_back(std::move(route));
}

Response Router::handle(Request request) const {
  std::promise<Response> answer;
  auto answered = answer.get_future();
  dispatch(std::move(request),
           [&answer](Response response) { answer.set_value(std::move(response)); });
  return answered.get();
}

// The route for the request with its parameters filled in, or nullptr and the refusal.
const Router::Route* Router::resolve(Request& request, Response& refusal) const {
  auto segments = splitPath(request.path);
  // Best match per method: fewest parameter segments, so literal routes win.
  const Route* chosen = nullptr;
  size_t chosenParameters = 0;
  std::string allowed;
  for (const auto& route : routes_) {
    if (route.segments.size() != segments.size()) continue;
    size_t parameters = 0;
    bool match = true;
    for (size_t i = 0; i < segments.size() && match; ++i) {
      if (isParameter(route.segments[i])) {
        ++parameters;
      } else {
        match = route.segments[i] == segments[i];
      }
    }
    if (!match) continue;
    if (route.method != request.method) {
      if (allowed.find(toString(route.method)) == std::string::npos) {
        allowed += (allowed.empty() ? "" : ", ") + std::string(toString(route.method));
      }
      continue;
    }
    if (chosen == nullptr || parameters < chosenParameters) {
      chosen = &route;
      chosenParameters = parameters;
    }
  }
  if (chosen == nullptr) {
    if (allowed.empty()) {
      refusal = Response::error(404, "no such resource: " + request.path);
      return nullptr;
    }
    refusal = Response::error(
        405, std::string(toString(request.method)) + " not allowed on " + request.path);
    refusal.headers.emplace_back("Allow", allowed);
    return nullptr;
  }
  const bool operatorRoute = chosen->access == Access::Operator;
  const bool operatorToken = (operatorRoute || chosen->access == Access::OperatorRead) &&
                             !options_.operatorToken.empty();
  if (operatorRoute && !operatorToken && !options_.openOperatorActions) {
    refusal = Response::error(403, std::string(toString(request.method)) + " " + request.path +
                                       " is an operator action and no operator token is "
                                       "configured: set " +
                                       options_.operatorTokenSetting);
    return nullptr;
  }
  const std::string& expected = operatorToken ? options_.operatorToken : options_.bearerToken;
  if (chosen->access != Access::Public && !expected.empty()) {
    auto authorization = request.header("authorization").value_or("");
    constexpr std::string_view kScheme = "Bearer ";
    bool bearer = authorization.size() >= kScheme.size() &&
                  equalsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme);
    if (!bearer || !sameSecret(authorization.substr(kScheme.size()), expected)) {
      refusal = Response::error(
          401, operatorToken ? "missing or wrong operator token" : "missing or wrong bearer token");
      refusal.headers.emplace_back("WWW-Authenticate", "Bearer");
      return nullptr;
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& segment = chosen->segments[i];
    if (isParameter(segment)) request.params[segment.substr(1, segment.size() - 2)] = segments[i];
  }
  return chosen;
}

std::optional<Response> Router::refusal(Request head) const {
  Response refused;
  if (resolve(head, refused) != nullptr) return std::nullopt;
  return refused;
}

void Router::dispatch(Request request, Responder respond,
                      const std::function<void(std::function<void()>)>& runBlocking) const {
  Response refusal;
  const Route* route = resolve(request, refusal);
  if (route == nullptr) return respond(std::move(refusal));
  if (route->deferred) {
    try {
      route->deferred(request, respond);
    } catch (const std::exception& error) {
      respond(internalError(error));
    }
    return;
  }
  auto run = [route, request = std::move(request), respond = std::move(respond)] {
    Response response;
    try {
      response = route->handler(request);
    } catch (const std::exception& error) {
      response = internalError(error);
    }
    respond(std::move(response));
  };
  if (runBlocking) {
    runBlocking(std::move(run));
  } else {
    run();
  }
}

}  // namespace zkagent::http
