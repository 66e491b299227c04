#!/usr/bin/python3
"""A zkagent device on Python's `websockets` library (Debian python3-websockets), written from
docs/device-protocol.md alone: the library follows the 307 to the leader by itself; this script
adds the welcome, ping/pong, the 4001 close naming the leader and reconnects.

usage: ws_device.py [--ca FILE] URL ACCOUNT DEVICE [TOKEN]

With wss:// the agent's certificate must chain to the CA in FILE and name the host (Python's
default TLS context).

Prints, flushed at once: CONNECTED <agent> <token>.<counter>, EXTENSIONS <the first extension
offered> <those accepted, - for none>, HEARTBEAT <agent> (the first pong of a connection),
CLOSED <code> <reason>. SIGTERM closes with 1000 and exits 0.
"""
import asyncio
import json
import random
import signal
import ssl
import sys
import urllib.parse

import websockets


def say(*words):
    print(*words, flush=True)


def origin(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def run(url, account, device, token, ca):
    tls = ssl.create_default_context(cafile=ca) if ca else None
    query = urllib.parse.urlencode({"account": account, "device": device})
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    target, failures = origin(url), 0
    while not stop.is_set():
        try:
            secure = target.startswith("wss:")
            async with websockets.connect(f"{target}/v1/devices?{query}", extra_headers=headers,
                                          ping_interval=None, open_timeout=5,
                                          ssl=tls if secure else None) as ws:
                welcome = json.loads(await asyncio.wait_for(ws.recv(), 5))
                assert welcome["type"] == "welcome", welcome
                failures = 0
                say("CONNECTED", welcome["agent"], f'{welcome["token"]}.{welcome["counter"]}')
                # The library offers permessage-deflate; the protocol has the agent accept none.
                offered = ws.request_headers.get("Sec-WebSocket-Extensions", "-")
                accepted = ws.response_headers.get("Sec-WebSocket-Extensions", "-")
                say("EXTENSIONS", offered.split(";")[0], accepted.replace(" ", ""))
                heartbeat = welcome.get("heartbeat_ms", 30000) / 1000
                seq, answered = 0, False
                while not stop.is_set():
                    seq += 1
                    await ws.send(json.dumps({"type": "ping", "seq": seq}))
                    deadline = asyncio.get_running_loop().time() + heartbeat * random.uniform(0.9, 1)
                    while (left := deadline - asyncio.get_running_loop().time()) > 0:
                        try:
                            frame = await asyncio.wait_for(ws.recv(), left)
                        except asyncio.TimeoutError:
                            break
                        frame = json.loads(frame)
                        if frame.get("type") == "pong" and not answered:
                            answered = True
                            say("HEARTBEAT", welcome["agent"])
                if stop.is_set():
                    await ws.close(1000, "device leaving")
                    return
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else 1006
            reason = closed.rcvd.reason if closed.rcvd else ""
            say("CLOSED", code, reason or "-")
            if code == 4001 and reason:
                target = origin(reason)
                continue
        except ssl.SSLCertVerificationError as error:
            say("FAILED", "SSLCertVerificationError", error.verify_message.replace(" ", "_"))
        except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake) as error:
            say("FAILED", type(error).__name__)
        target = origin(url)
        failures += 1
        await asyncio.sleep(random.uniform(0, min(2.0, 0.1 * 2 ** failures)))


if __name__ == "__main__":
    args, ca = sys.argv[1:], None
    if args[:1] == ["--ca"] and len(args) > 1:
        ca, args = args[1], args[2:]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(run(args[0], args[1], args[2], args[3] if len(args) > 3 else "", ca))
