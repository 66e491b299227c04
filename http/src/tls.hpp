// TLS for server.cpp and client.cpp: contexts from PEM files and the verified peer's names.
// OpenSSL and Beast's ssl_stream stay inside the library's sources.
#pragma once

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <string>
#include <vector>

#include "zkagent/http.hpp"

namespace zkagent::http::detail {

// Throw std::invalid_argument naming the file that could not be loaded.
boost::asio::ssl::context serverContext(const ServerTls& tls);
boost::asio::ssl::context clientContext(const ClientTls& tls);

// The verified peer certificate's subject CN, then its DNS and URI alternative names; empty when
// the peer sent none or it did not verify.
std::vector<std::string> peerIdentities(SSL* ssl);

}  // namespace zkagent::http::detail
