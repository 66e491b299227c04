#!/usr/bin/python3
"""Runs device/js/zkdevice.js in a real headless Chromium, on the browser's own WebSocket, and
prints what the module reports. The page is about:blank with the module evaluated into it through
the DevTools protocol (spoken with python3-websockets), so no web server is involved.

usage: browser_device.py [--trust CERT] URL ACCOUNT DEVICE [TOKEN]

--trust: the agents' certificate (PEM) for wss://; Chromium is told to accept that one public key
(--ignore-certificate-errors-spki-list, which Chromium honours only with its own profile
directory) instead of having a test CA installed into an NSS database.

Prints, flushed at once: BROWSER <version> once, then CONNECTED <agent> <token>.<counter>,
HEARTBEAT <agent> (the first pong of a connection), REDIRECTED <origin>,
DISCONNECTED <reason>. SIGTERM stops the device (close 1000), ends Chromium and exits 0.
Exit 3 when Chromium does not start.
"""
import asyncio
import base64
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import websockets

MODULE = pathlib.Path(__file__).resolve().parents[3] / "device" / "js" / "zkdevice.js"


def say(*words):
    print(*words, flush=True)


def spki_sha256(certificate):
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate, with the openssl CLI."""
    key = subprocess.run(["openssl", "x509", "-in", certificate, "-noout", "-pubkey"],
                         check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key,
                         check=True, capture_output=True).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def start_chromium(profile, trust):
    binary = shutil.which("chromium") or "/usr/bin/chromium"
    pins = [f"--ignore-certificate-errors-spki-list={spki_sha256(trust)}"] if trust else []
    browser = subprocess.Popen(
        [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", *pins, "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    port_file = pathlib.Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if port_file.exists() and len(port_file.read_text().split("\n")) >= 2:
            port = int(port_file.read_text().split("\n")[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return browser, pages[0]["webSocketDebuggerUrl"]
        if browser.poll() is not None:
            break
        time.sleep(0.05)
    browser.kill()
    say("FAILED chromium did not start")
    sys.exit(3)


class Page:
    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    async def evaluate(self, expression):
        self.next_id += 1
        await self.ws.send(json.dumps({"id": self.next_id, "method": "Runtime.evaluate",
                                       "params": {"expression": expression,
                                                  "returnByValue": True}}))
        while True:
            answer = json.loads(await self.ws.recv())
            if answer.get("id") == self.next_id:
                result = answer.get("result", {})
                if "exceptionDetails" in result:
                    raise RuntimeError(json.dumps(result["exceptionDetails"])[:500])
                return result.get("result", {}).get("value")


async def run(url, account, device, token, trust):
    profile = tempfile.mkdtemp(prefix="zk-browser-device-")
    browser, debugger = start_chromium(profile, trust)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with websockets.connect(debugger, max_size=None, ping_interval=None) as ws:
            page = Page(ws)
            say("BROWSER", (await page.evaluate("navigator.userAgent")).split(" ")[-2])
            await page.evaluate(MODULE.read_text())
            await page.evaluate(f"""
              window.__events = [];
              window.__device = new ZkDevice({{
                endpoints: [{json.dumps(url)}], account: {json.dumps(account)},
                device: {json.dumps(device)}, backoffInitialMs: 100, backoffMaxMs: 1000,
                tokenProvider: {"async () => " + json.dumps(token) if token else "null"},
                onEvent: (e) => window.__events.push(e)}});
              window.__device.start(); true""")
            answered = set()
            while not stop.is_set():
                events = json.loads(await page.evaluate("JSON.stringify(window.__events.splice(0))"))
                for e in events:
                    if e["type"] == "connected":
                        answered.discard(e["agent"])
                        say("CONNECTED", e["agent"], f'{e["token"]}.{e["counter"]}')
                    elif e["type"] == "pong":
                        agent = (await page.evaluate(
                            "window.__device.connected && window.__device.connected.agent"))
                        if agent and agent not in answered:
                            answered.add(agent)
                            say("HEARTBEAT", agent)
                    elif e["type"] == "redirected":
                        say("REDIRECTED", e["to"])
                    elif e["type"] == "disconnected":
                        say("DISCONNECTED", e["reason"].replace(" ", "_"))
                try:
                    await asyncio.wait_for(stop.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
            await page.evaluate("window.__device.stop(); true")
            await asyncio.sleep(0.2)  # the close frame leaves before the browser goes
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    args, trust = sys.argv[1:], None
    if args[:1] == ["--trust"] and len(args) > 1:
        trust, args = args[1], args[2:]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(run(args[0], args[1], args[2], args[3] if len(args) > 3 else "", trust))
