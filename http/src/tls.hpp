// Beast's SSL stream for server.cpp and client.cpp, and the verified peer's names (the server's
// client-certificate identity). The contexts are public (zkagent/http/tls.hpp).
#pragma once

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <string>
#include <vector>

#include "zkagent/http/tls.hpp"

namespace zkagent::http::detail {

// The verified peer certificate's subject CN, then its DNS and URI alternative names; empty when
// the peer sent none or it did not verify.
std::vector<std::string> peerIdentities(SSL* ssl);

}  // namespace zkagent::http::detail
