#pragma once
// The WebSocket stream of every endpoint and client in the project.

#include <boost/beast/websocket/stream.hpp>

namespace zkagent::http {

// No WebSocket extension is ever negotiated (docs/device-protocol.md: no permessage-deflate), so
// the stream is built without Beast's deflate support: that code could never run, and its
// templates cost compile time in every unit holding a stream (the gateway library's unit took
// 148 CPU-seconds with them, 137 without).
template <typename NextLayer>
using WebSocketStream = boost::beast::websocket::stream<NextLayer, /*deflateSupported=*/false>;

}  // namespace zkagent::http
