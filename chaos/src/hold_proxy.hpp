#pragma once
// A loopback TCP proxy that can hold bytes instead of dropping them: in `hold` every byte read
// from either side is kept, and on release it is delivered, in order, late. That is a network
// that delays an agent's requests to the gateway past the moment its leadership ended, the way a
// stale token reaches a downstream service in real life. Connections closed by one side while
// held still have their held bytes delivered before the close is passed on.
//
// zktest::TcpProxy's blackhole drops bytes; here nothing is lost, only late.
#include <cstdint>
#include <memory>

namespace zkagent::chaos {

class HoldProxy {
 public:
  explicit HoldProxy(std::uint16_t targetPort);
  ~HoldProxy();
  HoldProxy(const HoldProxy&) = delete;
  HoldProxy& operator=(const HoldProxy&) = delete;

  std::uint16_t port() const;
  void hold();
  void release();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zkagent::chaos
