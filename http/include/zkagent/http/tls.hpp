// The TLS rules of every listener and client in the project: http's Server and Client, the
// agent's device endpoint, the gateway's subscriber listener, the device library and
// zk-presence-watch. PEM files, TLS 1.2 as the floor (the rest OpenSSL's defaults), the peer
// verified against a CA; a client also checks that the server's certificate names the host it
// dialled. Including this header means linking OpenSSL (OpenSSL::SSL).
//
//   auto context = http::serverTlsContext({.cert = "server.pem", .key = "server.key"});
//   beast::ssl_stream<tcp::socket> stream(std::move(socket), context);   // then async_handshake
//
//   auto context = http::clientTlsContext({.ca = "ca.pem"});
//   http::expectServerName(stream.native_handle(), "agent-1.example");     // before the handshake
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <string>

#include "zkagent/http.hpp"

namespace zkagent::http {

// Throw std::invalid_argument naming the file that cannot be loaded or the key that does not
// match its certificate.
boost::asio::ssl::context serverTlsContext(const ServerTls& tls);
boost::asio::ssl::context clientTlsContext(const ClientTls& tls);

// For one client connection, before its handshake: the server's certificate must name `host`
// (a DNS name, or an IP address in an IP SAN), or the handshake fails; a DNS name is also sent as
// SNI.
void expectServerName(SSL* ssl, const std::string& host);

// Why a client's handshake with `host` failed, for a log line or a disconnect reason: the error,
// and when the server's certificate was refused, OpenSSL's reason ("certificate verify failed:
// unable to get local issuer certificate"); a name the certificate does not hold is said so
// ("...: IP address mismatch (host name mismatch: the certificate does not name 127.0.0.2)").
std::string handshakeFailure(SSL* ssl, const boost::system::error_code& error,
                             const std::string& host);

}  // namespace zkagent::http
