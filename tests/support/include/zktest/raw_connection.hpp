#pragma once
// A raw TCP connection to a loopback port, for tests that need to time a peer's bytes by hand: the
// connect and the write complete in the kernel even while the server process is stopped (SIGSTOP),
// so a test can leave a request waiting in its socket and watch what the server does on SIGCONT.

#include <chrono>
#include <cstdint>
#include <string>

namespace zktest {

class RawConnection {
 public:
  explicit RawConnection(uint16_t port);  // connects to 127.0.0.1:port
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes);  // all of it, or false
  // What arrives within `timeout` up to the end of the HTTP head (or the connection's end).
  std::string readHead(std::chrono::milliseconds timeout);
  // What arrives within `timeout` until the peer closes the connection.
  std::string readAll(std::chrono::milliseconds timeout);

 private:
  std::string read(std::chrono::milliseconds timeout, bool headOnly);

  int fd_;
  bool connected_ = false;
};

}  // namespace zktest
