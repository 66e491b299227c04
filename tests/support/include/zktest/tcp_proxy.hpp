#pragma once
// A loopback TCP proxy a test puts between a client and a server (usually ZooKeeper) to cut the
// network in the two ways that matter:
//
//   pass       bytes flow both ways (the start mode);
//   blackhole  every connection stays open but all bytes are dropped, both ways, and new
//              connections are accepted but lead nowhere: a partition where neither side sees
//              a FIN or RST and only timeouts tell. Connections that were blackholed stay
//              silent for good (their byte streams have holes); after switching back to pass,
//              new connections work;
//   close      every connection is reset and new ones are refused: a crashed peer or a firewall
//              that rejects;
//   dropReplies  requests still reach the server but nothing comes back (on every connection
//              from then on, old or new): the way to lose the reply of a request that was
//              applied, as a create whose answer never arrives.
//
//   zktest::TcpProxy proxy(zk.port());
//   Client client(proxy.connectString());
//   proxy.setMode(zktest::TcpProxy::Mode::blackhole);   // the client will see a disconnect
//
// The proxy runs on its own thread; setMode() returns once the new mode is in force.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zktest {

class TcpProxy {
 public:
  enum class Mode { pass, blackhole, close, dropReplies };

  // Listens on a free loopback port and forwards to 127.0.0.1:targetPort.
  explicit TcpProxy(std::uint16_t targetPort);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::uint16_t port() const;
  std::string connectString() const;  // "127.0.0.1:<port>"

  // Throws if switching back from close cannot listen on the same port again.
  void setMode(Mode mode);
  Mode mode() const;
  // Client connections the proxy holds open right now.
  std::size_t openConnections() const;

  // What reached the target (client-to-server bytes only), one entry per write in the order
  // written, with the client connection it came from (numbered in accept order). Only what is
  // written after record() is kept; blackholed bytes never reach the target.
  struct Forwarded {
    std::size_t connection;
    std::string bytes;
  };
  void record();
  std::vector<Forwarded> forwarded() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

const char* toString(TcpProxy::Mode mode);

}  // namespace zktest
