// ws_presence_peer.js: the Node.js `ws` server as device_bench's peer beside the agent. It speaks
// the agent's device protocol as far as a heartbeat goes (docs/device-protocol.md): the welcome
// frame after the upgrade, then a pong for every ping text frame, parsed as JSON as the agent
// does. No leases, no leadership.
//
// usage: NODE_PATH=/usr/share/nodejs node ws_presence_peer.js
//        prints "LISTENING 127.0.0.1:<port>"; on SIGUSR2 prints "PINGS <pings answered so far>"
'use strict';
const {WebSocketServer} = require('ws');

let pings = 0;
const server = new WebSocketServer({host: '127.0.0.1', port: 0, perMessageDeflate: false});
server.on('listening', () => console.log(`LISTENING 127.0.0.1:${server.address().port}`));
server.on('connection', (socket, request) => {
  const query = new URL(request.url, 'http://peer').searchParams;
  // The agent's welcome, keys in its order; heartbeat_ms and timeout_ms 0: it times nothing out.
  socket.send(JSON.stringify({
    account: query.get('account'),
    agent: 'node-ws',
    counter: 1,
    device: query.get('device'),
    heartbeat_ms: 0,
    timeout_ms: 0,
    token: 1,
    type: 'welcome',
  }));
  socket.on('message', (data, isBinary) => {
    let message;
    try {
      message = isBinary ? null : JSON.parse(data);
    } catch {
      message = null;
    }
    if (!message || message.type !== 'ping' || !Number.isInteger(message.seq)) {
      socket.close(1003, 'bad frame');
      return;
    }
    ++pings;
    socket.send(JSON.stringify({type: 'pong', seq: message.seq}));
  });
});
process.on('SIGUSR2', () => console.log(`PINGS ${pings}`));
