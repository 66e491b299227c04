#!/usr/bin/env python3
"""Checks a chaos run's history against the gateway's durable log (every gateway's, in a
cluster); writes report.md and
timeline.svg next to history.json. Python 3 standard library only.

    chaos/check.py DIR [--expect-violations]

Exit status: 0 no violation (or, with --expect-violations, violations of check 4 by operations
sent into a held gateway link: the negative control's broken fencing must show as stale tokens
accepted when delivered late, not as any violation at all), 1 otherwise, 2 bad input. The checks
are described in docs/testing.md "Chaos runs".
"""
import argparse
import bisect
import json
import os
import struct
import sys
import zlib
from collections import Counter, defaultdict

import zk_txnlog
from report import write_report, write_svg

OK = "ok"
# Answers that prove the operation was not applied: the agent's gate refused it (404 is the
# agent's answer for an account its election does not hold yet), the gateway refused it (a
# refusal is never logged), or the request never reached the agent.
DEFINITE_REFUSALS = {"not_leader", "stale_token", "not_current_leader", "account_fenced",
                     "suspended", "stopping", "zookeeper_unavailable", "connect_failed",
                     "unknown_account", "http_404"}
INF = float("inf")
# The check that broken fencing violates (the negative control): tokens accepted outside the
# interval in which their node was active.
FENCING_CHECK = "4"
# Checks 4 and 6 take a node's life from ZooKeeper's transaction times (its leader's wall clock in
# whole milliseconds, carried into the run's clock by two whole-millisecond readings), so it is
# known to within this much. It is rounding, not slack.
CLOCK_ROUNDING_MS = 2
LEASE_JOURNAL_FIELDS = {"from_ms": int, "to_ms": int, "list": str, "account": str, "device": str,
                        "token": int, "counter": int, "instance": str, "session": int,
                        "result": str}


# ---------------------------------------------------------------------------------------------
# The gateway's durable log (fencing/src/journal.cpp): frames of u32 length | u32 CRC-32 | body,
# little-endian; strings are u32 length + bytes; the body's first byte is the record tag.

class _Body:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.data):
            raise ValueError("short field")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def text(self):
        return self.take(self.u32()).decode("utf-8", "replace")


def _records(data):
    """Yields decoded records; stops at the first bad frame (a torn tail) and says where."""
    at = 0
    while at < len(data):
        if len(data) - at < 8:
            return ("partial record header", at)
        length, crc = struct.unpack_from("<II", data, at)
        body = data[at + 8:at + 8 + length]
        if length == 0 or len(body) < length:
            return ("record length %d runs past the end" % length, at)
        if zlib.crc32(body) & 0xFFFFFFFF != crc:
            return ("CRC mismatch", at)
        b = _Body(body)
        tag = b.u8()
        if tag == 1:
            yield {"tag": "op", "account": b.text(), "opId": b.text(), "token": b.u64(),
                   "instance": b.text(), "session": b.i64(), "payload": b.text(), "hwm": b.u64()}
        elif tag == 2:
            yield {"tag": "fenced", "account": b.text(), "activeSeq": b.u64(), "hwm": b.u64(),
                   "unixMs": b.i64()}
        elif tag == 3:
            yield {"tag": "reset", "account": b.text(), "hwm": b.u64(), "actor": b.text(),
                   "reason": b.text(), "unixMs": b.i64()}
        else:
            yield {"tag": "other%d" % tag}
        at += 8 + length
    return None


def read_gateway_log(data_dir, archive_dir=None):
    """Accepted operations in log order, the other records, and notes about the files. The
    runner's archive (hard links of every log the gateway wrote) holds the logs a compaction
    deleted; a generation missing from both is noted as a compaction the log cannot show."""
    notes, ops, others = [], [], []
    paths = {}
    for folder in (archive_dir, data_dir):  # the data dir's copy wins: the same file
        if folder and os.path.isdir(folder):
            paths.update((f, os.path.join(folder, f)) for f in os.listdir(folder)
                         if f.startswith("log."))
    if not paths:
        raise SystemExit("check: no log.* in %s" % data_dir)
    generations = sorted(int(name[len("log."):]) for name in paths)
    if generations != list(range(generations[0], generations[-1] + 1)) or generations[0] != 0:
        notes.append("a compaction happened: operations folded into the snapshot from logs "
                     "neither the data dir nor the archive holds cannot be checked one by one "
                     "(generations %s)" % generations)
    for name in sorted(paths):
        with open(paths[name], "rb") as f:
            data = f.read()
        gen = _records(data)
        while True:
            try:
                record = next(gen)
            except StopIteration as stop:
                if stop.value:
                    notes.append("%s: stops at byte %d (%s)" % (name, stop.value[1], stop.value[0]))
                break
            (ops if record["tag"] == "op" else others).append(record)
    return ops, others, notes


def gateway_sources(meta):
    """Every gateway of the run, each {"id", "data", "log_archive", "lease_journal"} (paths in
    the run's dir): meta.gateways, or, in a history written before cluster mode, the one gateway
    under the single mode's keys."""
    if "gateways" in meta:
        return meta["gateways"]
    return [{"id": "gateway", "data": meta["gateway_data"],
             "log_archive": meta.get("gateway_log_archive"),
             "lease_journal": meta.get("lease_journal")}]


def read_lease_journal(out_dir, meta, gateway, notes):
    """A gateway's lease journal (gateway --lease-journal): each lease entry's fencing
    decision, its from_ms..to_ms carried into the run's milliseconds, one at a time (a soak's
    journal holds millions of lines). A last line without its newline is a write cut short by a
    kill -9 (noted in `notes`); any other bad line is bad input."""
    if not gateway.get("lease_journal"):
        raise SystemExit("check: history.json has no meta.lease_journal; was it written by an "
                         "older chaos-runner?")
    if "t0_steady_ms" not in meta:
        raise SystemExit("check: history.json has no meta.t0_steady_ms; was it written by an "
                         "older chaos-runner?")
    name = gateway["lease_journal"]
    path = os.path.join(out_dir, name)
    try:
        journal = open(path)
    except OSError as e:
        raise SystemExit("check: cannot read the gateway's lease journal: %s" % e)
    with journal:
        for number, line in enumerate(journal, 1):
            if not line.endswith("\n"):
                notes.append("%s: the last line is cut short (%d bytes), not checked" %
                             (name, len(line)))
                break
            try:
                e = json.loads(line)
            except ValueError as error:
                raise SystemExit("check: %s line %d: not JSON: %s" % (path, number, error))
            for field, kind in LEASE_JOURNAL_FIELDS.items():
                if not isinstance(e, dict) or not isinstance(e.get(field), kind):
                    raise SystemExit("check: %s line %d: %s missing or not %s" %
                                     (path, number, field, kind.__name__))
            e["from_ms"] -= meta["t0_steady_ms"]
            e["to_ms"] -= meta["t0_steady_ms"]
            e["gateway"] = gateway["id"]
            yield e


# ---------------------------------------------------------------------------------------------

def load_history(out_dir):
    path = os.path.join(out_dir, "history.json")
    try:
        with open(path) as f:
            history = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("check: cannot read %s: %s" % (path, e))
    fields = history["ops_fields"]
    history["ops"] = [dict(zip(fields, row)) for row in history["ops"]]
    ofields = history["observer_fields"]
    history["observer"] = [dict(zip(ofields, row)) for row in history["observer"]]
    return history


class ActiveTimeline:
    """Per account, every active node's life from ZooKeeper's transaction logs (zk_txnlog): seq,
    instance, session, created and gone (run ms; gone INF while it exists), and when the
    observers first read it (INF: never; a node can live less than a read's round trip). `lags`
    are how late the observers first saw each node they saw after its creation, and `slack_ms`
    the largest of them: the only slack checks 4 and 6 allow past a node's end (a watcher of the
    same ensemble, such as the gateway, may learn of the end that much later)."""

    def __init__(self, log_nodes, samples, to_run_ms):
        self.nodes = {}
        by_czxid = {}
        for account, ns in log_nodes.items():
            converted = []
            for n in ns:
                c = dict(n, created=to_run_ms(n["created"]), first=INF,
                         gone=INF if n["gone"] is None else to_run_ms(n["gone"]))
                converted.append(c)
                by_czxid[(account, n["czxid"])] = c
            self.nodes[account] = converted
        for s in samples:
            if not s["present"]:
                continue
            n = by_czxid.get((s["account"], s["zxid"]))
            if n is None or n["seq"] != s["seq"]:
                raise SystemExit("check: the observers read %s's active node seq %d (czxid %#x) "
                                 "at %d ms, which ZooKeeper's transaction logs %s: the logs are "
                                 "incomplete or misread, and checks 1, 4 and 6 cannot be trusted" %
                                 (s["account"], s["seq"], s["zxid"], s["t_ms"],
                                  "do not hold" if n is None else "give seq %d" % n["seq"]))
            n["first"] = min(n["first"], s["t_ms"])
        # A sample is stamped when its read was sent, so a node created during the read shows a
        # small negative lag: none.
        self.lags = sorted(max(0, n["first"] - n["created"]) for ns in self.nodes.values()
                           for n in ns if n["first"] != INF)
        self.slack_ms = self.lags[-1] if self.lags else 0
        self.unseen = sum(1 for ns in self.nodes.values() for n in ns if n["first"] == INF)

    def outside(self, n, lo, hi):
        """How far [lo, hi] (when a write was decided) lies outside node n's active interval:
        before its creation, or after its end by more than the slack. 0 when they overlap."""
        return max(0, lo - n["gone"] - self.slack_ms, n["created"] - CLOCK_ROUNDING_MS - hi)

    def with_seq(self, account, seq):
        return [n for n in self.nodes.get(account, []) if n["seq"] == seq]


def read_active_timeline(out_dir, history, notes):
    """The ActiveTimeline of a run: ZooKeeper's logs as the runner copied them, their times
    carried into the run's milliseconds by the wall-clock readings the runner took at its start
    and at its end (interpolated: the two clocks may drift apart over a long run)."""
    meta = history["meta"]
    for key in ("zookeeper_logs", "wall_clock", "root"):
        if key not in meta:
            raise SystemExit("check: history.json has no meta.%s; was it written by an older "
                             "chaos-runner?" % key)
    (run0, wall0), (run1, wall1) = meta["wall_clock"]
    rate = (run1 - run0) / (wall1 - wall0) if wall1 != wall0 else 1.0

    def to_run_ms(wall):
        return run0 + round((wall - wall0) * rate)

    try:
        changes, log_notes = zk_txnlog.read_logs(os.path.join(out_dir, meta["zookeeper_logs"]))
    except (OSError, ValueError) as e:
        raise SystemExit("check: ZooKeeper's transaction logs: %s" % e)
    notes += log_notes
    return ActiveTimeline(zk_txnlog.active_nodes(changes, meta["root"]), history["observer"],
                          to_run_ms)


def check(out_dir):
    history = load_history(out_dir)
    meta = history["meta"]
    gateways = gateway_sources(meta)
    cluster = len(gateways) > 1
    logs, log_others, notes = [], [], []  # logs: (gateway id, its accepted ops in log order)
    for g in gateways:
        archive = g.get("log_archive")
        g_ops, g_others, g_notes = read_gateway_log(os.path.join(out_dir, g["data"]),
                                                    archive and os.path.join(out_dir, archive))
        for r in g_ops:
            r["gateway"] = g["id"]
        logs.append((g["id"], g_ops))
        log_others += g_others
        notes += ["%s: %s" % (g["id"], n) for n in g_notes] if cluster else g_notes
    log_ops = [r for _, g_ops in logs for r in g_ops]  # the union, gateway by gateway

    def where(r):
        return " in %s's log" % r["gateway"] if cluster else ""
    ops = history["ops"]
    by_id = {}
    for op in ops:
        by_id[op["op_id"]] = op
    timeline = read_active_timeline(out_dir, history, notes)
    violations = defaultdict(list)

    # 1. Per account, tokens never decrease in log order (each gateway's log); each token belongs
    #    to one instance (and one session), the one ZooKeeper's log shows holding active with
    #    that seq (over every gateway's log).
    last_token = {}
    owner = {}
    for pos, r in ((pos, r) for _, g_ops in logs for pos, r in enumerate(g_ops)):
        a, t = r["account"], r["token"]
        if t < last_token.get((r["gateway"], a), -1):
            violations["1"].append("%s: log record %d%s (op %s) has token %d after token %d" %
                                   (a, pos, where(r), r["opId"], t,
                                    last_token[(r["gateway"], a)]))
        last_token[(r["gateway"], a)] = max(t, last_token.get((r["gateway"], a), -1))
        who = (r["instance"], r["session"])
        if owner.setdefault((a, t), who) != who:
            violations["1"].append("%s: token %d used by %s and by %s" % (a, t, owner[(a, t)], who))
    for (a, t), (instance, session) in owner.items():
        for n in timeline.with_seq(a, t):
            if (n["instance"], n["session"]) != (instance, session):
                violations["1"].append("%s: token %d accepted for %s (session %d) but active seq "
                                       "%d was %s's (session %d)" %
                                       (a, t, instance, session, t, n["instance"], n["session"]))

    # 2. No operation accepted with a token lower than one already acknowledged (real time:
    #    acknowledged before the later operation was even invoked).
    acked_by_account = defaultdict(list)
    for op in ops:
        if op["outcome"] == OK and op["token"] >= 0:
            acked_by_account[op["account"]].append((op["completed_ms"], op["token"]))
    prefix = {}
    for a, lst in acked_by_account.items():
        lst.sort()
        best, maxes = -1, []
        for _, tok in lst:
            best = max(best, tok)
            maxes.append(best)
        prefix[a] = ([c for c, _ in lst], maxes)
    for r in log_ops:
        op = by_id.get(r["opId"])
        if op is None or r["account"] not in prefix:
            continue
        times, maxes = prefix[r["account"]]
        i = bisect.bisect_left(times, op["invoked_ms"])
        if i > 0 and maxes[i - 1] > r["token"]:
            violations["2"].append("%s: op %s accepted with token %d, invoked at %d ms after "
                                   "token %d had been acknowledged" %
                                   (r["account"], r["opId"], r["token"], op["invoked_ms"],
                                    maxes[i - 1]))

    # 3. Every operation acknowledged 200 is in a gateway's log, the acknowledged token the
    #    logged one; nothing refused or never sent is. Within one gateway's log an opId is there
    #    at most once. In a cluster the same opId may be in two gateways' logs, with the same
    #    token only: an owner died before its answer reached the agent, which retried at the next
    #    owner (docs/gateway-cluster.md "An answer lost with its owner"); counted, not a
    #    violation. The agent's answer does not name the gateway that decided, so an
    #    acknowledged operation is looked for in every log.
    logged = Counter(r["opId"] for r in log_ops)  # over every log
    in_log = Counter((r["gateway"], r["opId"]) for r in log_ops)
    logged_tokens = defaultdict(set)
    logged_in = defaultdict(list)
    for r in log_ops:
        logged_tokens[r["opId"]].add(r["token"])
        logged_in[r["opId"]].append(r["gateway"])
    # A compaction folds operations into the snapshot, where they cannot be told apart: a run
    # must not compact (the gateway compacts past 64 MiB of log), and a missing acknowledged
    # operation is a violation whatever the reason.
    compacted = any("compaction" in n for n in notes)
    the_log = "any gateway's log" if cluster else "the gateway log"
    for op in ops:
        n = logged.get(op["op_id"], 0)
        if op["outcome"] == OK:
            if n == 0:
                violations["3"].append("op %s (%s via agent %d) acknowledged at %d ms is not "
                                       "in %s%s" %
                                       (op["op_id"], op["account"], op["agent"],
                                        op["completed_ms"], the_log,
                                        " (the gateway compacted its log)" if compacted else ""))
            elif op["token"] >= 0 and op["token"] not in logged_tokens[op["op_id"]]:
                violations["3"].append("op %s acknowledged with hwm %d but logged with token %s" %
                                       (op["op_id"], op["token"],
                                        sorted(logged_tokens[op["op_id"]])))
        elif op["outcome"] in DEFINITE_REFUSALS and n > 0:
            violations["3"].append("op %s answered %s (%d) is in %s" %
                                   (op["op_id"], op["outcome"], op["status"],
                                    ", ".join(sorted(set(logged_in[op["op_id"]])))
                                    if cluster else "the gateway log"))
    for (gateway, op_id), n in in_log.items():
        if n > 1:
            violations["3"].append("op %s is in %s %d times" %
                                   (op_id, "%s's log" % gateway if cluster else "the gateway log",
                                    n))
    in_several_logs = 0
    for op_id, n in logged.items():
        if op_id not in by_id:
            violations["3"].append("op %s is in %s but was never sent" %
                                   (op_id, ", ".join(sorted(set(logged_in[op_id])))
                                    if cluster else "the gateway log"))
        if len(set(logged_in[op_id])) > 1:
            if len(logged_tokens[op_id]) > 1:
                violations["3"].append("op %s is in the logs of %s with tokens %s: a retry "
                                       "across gateways must carry the same token" %
                                       (op_id, ", ".join(sorted(set(logged_in[op_id]))),
                                        sorted(logged_tokens[op_id])))
            else:
                in_several_logs += 1

    # 4. Every accepted token was the account's active seq at acceptance, per ZooKeeper's log. The
    #    acceptance instant lies after the invocation of every operation logged up to it (each
    #    gateway's log is in its decision order) and before the acknowledgement of every
    #    operation logged from it on. It must not lie before the node's creation, nor after its
    #    end by more than the observers' largest measured lag (ActiveTimeline.outside).
    #    An operation forwarded while the runner held its agent's gateway link reached the gateway
    #    no earlier than the link's release. Times are whole milliseconds: an operation invoked in
    #    the millisecond the hold was recorded may have gone through just before it, so only one
    #    invoked strictly later counts as held.
    holds = defaultdict(list)
    for e in history["events"]:
        for f in e["faults"]:
            if f["kind"] == "stale_delivery" and "held_ms" in f and "delivered_ms" in f:
                holds[f["agent"]].append((f["held_ms"], f["delivered_ms"]))
    marks = []  # (account, time) of each check-4 violation, for the timeline
    held_accepted_stale = 0  # check-4 violations by operations sent into a held link
    for _, g_ops in logs:  # each gateway's log is in its own decision order
        lo, windows = -INF, []
        for r in g_ops:
            op = by_id.get(r["opId"])
            if op is not None:
                lo = max(lo, op["invoked_ms"])
                for held, delivered in holds.get(op["agent"], []):
                    if held < op["invoked_ms"] <= delivered:
                        lo = max(lo, delivered)
            windows.append([lo, INF])
        hi = INF
        for i in range(len(g_ops) - 1, -1, -1):
            op = by_id.get(g_ops[i]["opId"])
            if op is not None and op["outcome"] == OK:
                hi = min(hi, op["completed_ms"])
            windows[i][1] = hi
        for r, (w_lo, w_hi) in zip(g_ops, windows):
            nodes = timeline.with_seq(r["account"], r["token"])
            if any(timeline.outside(n, w_lo, w_hi) == 0 for n in nodes):
                continue
            op = by_id.get(r["opId"])
            held = op is not None and any(h < op["invoked_ms"] <= d
                                          for h, d in holds.get(op["agent"], []))
            held_accepted_stale += held
            marks.append((r["account"], w_lo if w_lo != -INF else 0))
            violations["4"].append("%s: op %s (%s%s) accepted%s with token %d between %s and %s "
                                   "ms; that seq was active: %s" %
                                   (r["account"], r["opId"], r["instance"],
                                    ", sent into a held link" if held else "", where(r),
                                    r["token"], _ms(w_lo), _ms(w_hi), _seen(nodes)))

    # 5. After the last heal, every account is led again within the session timeout + 2 s (plus
    #    the lock delay when one is configured) and an operation through its leader succeeds.
    final = history.get("final", {})
    bound = meta["session_timeout_ms"] + meta.get("lock_delay_ms", 0) + 2000
    if "interrupted_before_event" in final:
        notes.append("interrupted: the schedule ended before event %d" %
                     final["interrupted_before_event"])
    if "error" in final:
        violations["5"].append("the run failed before its end: %s" % final["error"])
    led = final.get("accounts", {})
    for a in meta["accounts"]:
        if a not in led:
            violations["5"].append("%s: not led (no operation through a leader succeeded) after "
                                   "the last heal" % a)
        elif led[a]["led_ms"] > bound:
            violations["5"].append("%s: led again %d ms after the last heal (bound %d ms)" %
                                   (a, led[a]["led_ms"], bound))

    leases = check_leases(out_dir, history, timeline, bound, violations, notes)

    # Operations that went into a held gateway link (not refused by the agent's gate first), and
    # how many of them the gateway accepted once they were delivered late.
    held_ops = [op for op in ops if op["outcome"] not in DEFINITE_REFUSALS and not op["probe"]
                and any(h < op["invoked_ms"] <= d for h, d in holds.get(op["agent"], []))]
    figures = compute_figures(history, log_ops, notes, bound)
    figures["gateways"] = [g["id"] for g in gateways]
    figures["logged_ops_by_gateway"] = {gid: len(g_ops) for gid, g_ops in logs}
    figures["ops_in_several_logs"] = in_several_logs
    figures["held_ops"] = len(held_ops)
    figures["held_ops_accepted"] = sum(1 for op in held_ops if logged.get(op["op_id"], 0) > 0)
    figures["held_accepted_stale"] = held_accepted_stale
    figures["lease_writes"] = leases
    figures["observer_lag_ms"] = _distribution(timeline.lags)
    figures["active_nodes"] = sum(len(ns) for ns in timeline.nodes.values())
    figures["active_nodes_unseen"] = timeline.unseen
    figures["not_done"] = [(e["index"], f["kind"], f["not_done"]) for e in history["events"]
                           for f in e["faults"] if "not_done" in f]
    # Presence answers the runner could not read as leases: the run's data is bad (main fails).
    bad = history.get("bad_gateway_answers", {"count": 0, "first": []})
    figures["bad_gateway_answers"] = bad["count"]
    notes += ["malformed gateway answer: " + text for text in bad["first"]]
    return history, timeline, log_ops, log_others, violations, figures, marks


def check_leases(out_dir, history, timeline, ops_bound, violations, notes):
    """6. Every lease write a gateway accepted (its journal: renewals and removals alike) was
    decided under its account's active seq, for the instance and session holding it: the
    gateway's from_ms..to_ms must overlap that node's active interval as in check 4. Refused
    writes change nothing and are not judged.
    7. After the last heal every device is leased under its account's current leader within the
    operations' bound plus the device's timeout and its longest reconnect backoff.
    Returns the journal's writes counted by list and result."""
    devices = history["meta"].get("devices")
    if not isinstance(devices, dict) or not devices.get("count"):
        return {}
    counts = Counter()
    journals = (e for g in gateway_sources(history["meta"])
                for e in read_lease_journal(out_dir, history["meta"], g, notes))
    for e in journals:
        counts["%s %s" % (e["list"], e["result"])] += 1
        if e["result"] != "accepted":
            continue
        nodes = timeline.with_seq(e["account"], e["token"])
        fits = [n for n in nodes if timeline.outside(n, e["from_ms"], e["to_ms"]) == 0]
        if fits and all((n["instance"], n["session"]) == (e["instance"], e["session"])
                        for n in fits):
            continue
        violations["6"].append("%s/%s: %s under token %d (%s, session %d, connection %d) "
                               "accepted by %s between %d and %d ms; that seq was active: %s" %
                               (e["account"], e["device"], e["list"], e["token"], e["instance"],
                                e["session"], e["counter"], e["gateway"], e["from_ms"],
                                e["to_ms"], _seen(nodes)))
    final = history.get("final", {})
    bound = ops_bound + devices["timeout_ms"] + devices["backoff_max_ms"] + 1000
    for key in final.get("devices_not_leased", []):
        violations["7"].append("%s: not leased under its account's leader after the last heal" %
                               key)
    for key, d in sorted(final.get("devices", {}).items()):
        if d["leased_ms"] > bound:
            violations["7"].append("%s: leased under its leader %d ms after the last heal (bound "
                                   "%d ms)" % (key, d["leased_ms"], bound))
    return dict(sorted(counts.items()))


def _ms(x):
    return "inf" if x == INF else ("-inf" if x == -INF else "%d" % x)


def _seen(nodes):
    return ", ".join("%s (session %d) from %s to %s ms" % (n["instance"], n["session"],
                                                           _ms(n["created"]), _ms(n["gone"]))
                     for n in nodes) or "never active"


def _distribution(values):
    """p50, p99 and max of sorted values (None when there are none)."""
    if not values:
        return None
    return {"count": len(values), "p50": values[len(values) // 2],
            "p99": values[min(len(values) - 1, len(values) * 99 // 100)], "max": values[-1]}


def outcome_class(outcome):
    if outcome == OK:
        return "acknowledged"
    if outcome in DEFINITE_REFUSALS:
        return "refused"
    return "indeterminate"


def label_ops(history):
    """The nemesis kind active when each op was invoked: an event's window runs from its start to
    when every account was led again (or its heal plus the session timeout)."""
    windows = []
    for e in history["events"]:
        end = e["settled_ms"] if e.get("settled_ms") is not None else (
            e["heal_ms"] + history["meta"]["session_timeout_ms"])
        windows.append((e["start_ms"], end, e["kinds"]))
    starts = [w[0] for w in windows]
    labels = []
    for op in history["ops"]:
        i = bisect.bisect_right(starts, op["invoked_ms"]) - 1
        if op["probe"]:
            labels.append("final probe")
        elif i >= 0 and op["invoked_ms"] <= windows[i][1]:
            labels.append(windows[i][2])
        else:
            labels.append("calm")
    return labels


def compute_figures(history, log_ops, notes, bound):
    labels = label_ops(history)
    per_kind = defaultdict(lambda: Counter())
    refused_reasons = defaultdict(lambda: Counter())
    indeterminate_reasons = Counter()
    totals = Counter()
    for op, label in zip(history["ops"], labels):
        c = outcome_class(op["outcome"])
        # Per combination, and per single kind (an event with several faults counts for each).
        keys = {label, "all"} | {"kind:" + k for k in label.split("+")}
        for key in keys:
            per_kind[key]["invoked"] += 1
            per_kind[key][c] += 1
            if c == "refused":
                refused_reasons[key][op["outcome"]] += 1
        totals[op["outcome"]] += 1
        if c == "indeterminate":
            indeterminate_reasons[op["outcome"]] += 1
    faults = Counter()
    for e in history["events"]:
        for f in e["faults"]:
            faults[f["kind"]] += 1
    combos = sum(1 for e in history["events"] if len(e["faults"]) > 1)
    reelect = [(e["reelect_ms"], e["index"], e["kinds"]) for e in history["events"]
               if e.get("reelect_ms") is not None]
    # The last event's re-election is check 5's: the final probes measure it.
    unsettled = [(e["index"], e["kinds"], e.get("unsettled", [])) for e in history["events"]
                 if e.get("reelect_ms") is None and not e.get("last")]
    final = history.get("final", {}).get("accounts", {})
    stale = [f for e in history["events"] for f in e["faults"] if f["kind"] == "stale_delivery"]
    return {
        "events": len(history["events"]),
        "faults_by_kind": dict(faults),
        "combined_events": combos,
        "per_kind": {k: dict(v) for k, v in per_kind.items()},
        "refused_reasons": {k: dict(v) for k, v in refused_reasons.items()},
        "indeterminate_reasons": dict(indeterminate_reasons),
        "outcomes": dict(totals),
        "logged_ops": len(log_ops),
        "notes": notes,
        "worst_reelect": max(reelect) if reelect else None,
        "median_reelect_ms": sorted(r[0] for r in reelect)[len(reelect) // 2] if reelect else None,
        "unsettled_events": unsettled,
        "final_worst_led_ms": max((v["led_ms"] for v in final.values()), default=None),
        "final_bound_ms": bound,
        "stale_deliveries": len(stale),
    }


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--expect-violations", action="store_true",
                        help="negative control: succeed only if check 4 is violated by "
                             "operations sent into a held link (stale tokens accepted late)")
    args = parser.parse_args(argv)
    history, timeline, _, _, violations, figures, marks = check(args.dir)
    write_report(args.dir, history, violations, figures)
    write_svg(args.dir, history, timeline, marks)
    total = sum(len(v) for v in violations.values())
    by_gateway = figures["logged_ops_by_gateway"]
    logs = ("the gateway log" if len(by_gateway) == 1 else "the gateways' logs (%s; %d in two)" %
            (", ".join("%s %d" % kv for kv in by_gateway.items()), figures["ops_in_several_logs"]))
    print("check: %s: %d events, %d operations (%d acknowledged), %d in %s; "
          "%d violations %s" % (args.dir, figures["events"], len(history["ops"]),
                                figures["per_kind"].get("all", {}).get("acknowledged", 0),
                                figures["logged_ops"], logs, total,
                                dict((k, len(v)) for k, v in sorted(violations.items()) if v)))
    for k in sorted(violations):
        for v in violations[k][:5]:
            print("  check %s: %s" % (k, v))
    if figures["worst_reelect"]:
        print("check: worst re-election after a heal %d ms (event %d, %s)" %
              figures["worst_reelect"])
    lag = figures["observer_lag_ms"]
    if lag:
        print("check: observer lag over %d nodes: p50 %d ms, p99 %d ms, max %d ms (the slack)" %
              (lag["count"], lag["p50"], lag["p99"], lag["max"]))
    if figures["not_done"]:
        print("check: %d faults not carried out as intended" % len(figures["not_done"]))
    if figures["bad_gateway_answers"]:
        print("check: ERROR: %d malformed answers from the gateway's GET /v1/presence (report "
              "notes list the first); the run's data is bad" % figures["bad_gateway_answers"])
        return 1
    print("check: report %s" % os.path.join(args.dir, "report.md"))
    if args.expect_violations:
        # What broken fencing shows: stale tokens, held in a link, accepted when delivered. A
        # liveness miss (checks 5, 7), or a check-4 violation by an operation that was not held,
        # is not it.
        if not figures["held_accepted_stale"]:
            print("check: expected check-%s violations by operations sent into a held link "
                  "(broken fencing), found none" % FENCING_CHECK)
            return 1
        print("check: negative control: %d held operations accepted with a stale token" %
              figures["held_accepted_stale"])
        return 0
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
