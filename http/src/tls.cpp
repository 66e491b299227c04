// Contexts, server names and peer names over OpenSSL. TLS 1.2 is the floor; the rest is
// OpenSSL's defaults.
#include "tls.hpp"

#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <memory>
#include <stdexcept>

namespace zkagent::http {
namespace ssl = boost::asio::ssl;
namespace {

void load(const std::filesystem::path& path, std::string_view what, auto&& loader) {
  boost::system::error_code error;
  loader(path.string(), error);
  if (error) {
    throw std::invalid_argument(std::string(what) + " '" + path.string() +
                                "': cannot load: " + error.message());
  }
}

ssl::context baseContext() {
  ssl::context context(ssl::context::tls);
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                      ssl::context::single_dh_use);
  return context;
}

void loadIdentity(ssl::context& context, const std::filesystem::path& cert,
                  const std::filesystem::path& key) {
  load(cert, "certificate", [&](const std::string& file, boost::system::error_code& error) {
    context.use_certificate_chain_file(file, error);
  });
  load(key, "private key", [&](const std::string& file, boost::system::error_code& error) {
    context.use_private_key_file(file, ssl::context::pem, error);
  });
  if (SSL_CTX_check_private_key(context.native_handle()) != 1) {
    throw std::invalid_argument("private key '" + key.string() + "' does not match certificate '" +
                                cert.string() + "'");
  }
}

void loadCa(ssl::context& context, const std::filesystem::path& ca, std::string_view what) {
  load(ca, what, [&](const std::string& file, boost::system::error_code& error) {
    context.load_verify_file(file, error);
  });
}

std::string asString(const ASN1_STRING* text) {
  const auto* bytes = ASN1_STRING_get0_data(text);
  return std::string(reinterpret_cast<const char*>(bytes),
                     static_cast<size_t>(ASN1_STRING_length(text)));
}

}  // namespace

ssl::context serverTlsContext(const ServerTls& tls) {
  auto context = baseContext();
  loadIdentity(context, tls.cert, tls.key);
  if (!tls.clientCa.empty()) {
    loadCa(context, tls.clientCa, "client CA");
    // The CA list is also what the server names in its certificate request.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.clientCa.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(context.native_handle(), names);
    context.set_verify_mode(ssl::verify_peer |
                            (tls.requireClientCert ? ssl::verify_fail_if_no_peer_cert : 0));
  }
  return context;
}

ssl::context clientTlsContext(const ClientTls& tls) {
  auto context = baseContext();
  loadCa(context, tls.ca, "CA");
  context.set_verify_mode(ssl::verify_peer);
  if (!tls.cert.empty() || !tls.key.empty()) loadIdentity(context, tls.cert, tls.key);
  return context;
}

void expectServerName(SSL* ssl, const std::string& host) {
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  boost::system::error_code notAddress;
  boost::asio::ip::make_address(host, notAddress);
  if (!notAddress) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    return;
  }
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  // SNI. SSL_set_tlsext_host_name is a macro with an old-style cast.
  SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
           const_cast<char*>(host.c_str()));
}

std::string handshakeFailure(SSL* ssl, const boost::system::error_code& error,
                             const std::string& host) {
  std::string why = error.message();
  // OpenSSL appends "(SSL routines)" or similar: the library adds nothing for a reader.
  if (const auto paren = why.find(" ("); paren != std::string::npos) why.resize(paren);
  const long verdict = SSL_get_verify_result(ssl);
  if (verdict != X509_V_OK) why += std::string(": ") + X509_verify_cert_error_string(verdict);
  if (verdict == X509_V_ERR_HOSTNAME_MISMATCH || verdict == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    why += " (host name mismatch: the certificate does not name " + host + ")";
  }
  return why;
}

namespace detail {

std::vector<std::string> peerIdentities(SSL* ssl) {
  std::vector<std::string> names;
  if (SSL_get_verify_result(ssl) != X509_V_OK) return names;
  std::unique_ptr<X509, decltype(&X509_free)> cert(SSL_get1_peer_certificate(ssl), &X509_free);
  if (!cert) return names;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  for (int at = -1; (at = X509_NAME_get_index_by_NID(subject, NID_commonName, at)) >= 0;) {
    names.push_back(asString(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at))));
  }
  auto* alternatives = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  if (alternatives != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(alternatives); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(alternatives, i);
      if (name->type == GEN_DNS) names.push_back(asString(name->d.dNSName));
      if (name->type == GEN_URI) names.push_back(asString(name->d.uniformResourceIdentifier));
    }
    GENERAL_NAMES_free(alternatives);
  }
  return names;
}

}  // namespace detail
}  // namespace zkagent::http
