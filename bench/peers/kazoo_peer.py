#!/usr/bin/python3
"""kazoo peer of election-bench: one KazooClient (one session) and one kazoo Election recipe per
account, each blocked in its own thread as the recipe expects (kazoo's default threading handler;
its gevent handler loses the connection under a thousand concurrent contenders). Speaks zk-elect's
line protocol so the benchmark drives every implementation alike:

  SESSION <unix_ns> <negotiated_timeout_ms> | READY | LEADER <account> <token> <unix_ns>
  LOST <account> <reason> <unix_ns>

SIGTERM stops the client (one closeSession: the server drops every lock node at once) and exits.

  /usr/bin/python3 kazoo_peer.py --zk HOST:PORT --instance-id ID --accounts-file F
                                 [--root /wx-accounts] [--session-timeout-ms N]
"""
import argparse
import os
import signal
import sys
import time

import threading

from kazoo.client import KazooClient

output_lock = threading.Lock()


def emit(line):
    with output_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def token_of(node):
    """'<uuid>__lock__0000000007' -> 7, the contender's sequence (our fencing-token analogue)."""
    try:
        return int(node[-10:])
    except (TypeError, ValueError):
        return -1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zk", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--accounts-file", required=True)
    parser.add_argument("--root", default="/wx-accounts")
    parser.add_argument("--session-timeout-ms", type=int, default=10000)
    args = parser.parse_args()
    with open(args.accounts_file, encoding="utf-8") as f:
        accounts = [line.strip() for line in f if line.strip() and not line.startswith("#")]

    threading.stack_size(256 * 1024)  # thousands of contender threads
    client = KazooClient(hosts=args.zk, timeout=args.session_timeout_ms / 1000.0)
    client.start(timeout=30)
    emit("SESSION %d %d" % (time.time_ns(), client._session_timeout))

    stopping = threading.Event()

    def stand(account, election):
        def lead():
            emit("LEADER %s %d %d" % (account, token_of(election.lock.node), time.time_ns()))
            stopping.wait()
        election.run(lead)

    elections = []
    for account in accounts:
        election = client.Election(args.root + "/" + account, args.instance_id)
        elections.append(election)
        threading.Thread(target=stand, args=(account, election), daemon=True).start()

    def stop(_signum, _frame):
        client.stop()  # closeSession
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    # READY once every contender has its node: from then on a handover only needs watches to fire.
    while any(e.lock.node is None for e in elections):
        time.sleep(0.005)
    emit("READY")
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
