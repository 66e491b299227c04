#pragma once
// The WebSocket stream of every endpoint and client in the project.

#include <boost/beast/websocket/stream.hpp>

namespace zkagent::http {

// No WebSocket extension is ever negotiated (docs/device-protocol.md: no permessage-deflate), so
// the stream is built without Beast's deflate support: that code could never run, and its
// templates were about a fifth of the compile of every unit holding a WebSocket stream.
template <typename NextLayer>
using WebSocketStream = boost::beast::websocket::stream<NextLayer, /*deflateSupported=*/false>;

}  // namespace zkagent::http
