#!/usr/bin/env python3
"""Checks a chaos run's history against the gateway's durable log; writes report.md and
timeline.svg next to history.json. Python 3 standard library only.

    chaos/check.py DIR [--slack-ms 500] [--expect-violations]

Exit status: 0 no violation (or, with --expect-violations, violations of check 4: the negative
control's broken fencing must show as tokens accepted outside their leadership, not as any
violation at all), 1 otherwise, 2 bad input. The checks are described in docs/testing.md "Chaos runs".
"""
import argparse
import bisect
import json
import os
import struct
import sys
import zlib
from collections import Counter, defaultdict

OK = "ok"
# Answers that prove the operation was not applied: the agent's gate refused it (404 is the
# agent's answer for an account its election does not hold yet), the gateway refused it (a
# refusal is never logged), or the request never reached the agent.
DEFINITE_REFUSALS = {"not_leader", "stale_token", "not_current_leader", "account_fenced",
                     "suspended", "stopping", "zookeeper_unavailable", "connect_failed",
                     "unknown_account", "http_404"}
FENCING_REFUSALS = {"stale_token", "not_current_leader", "account_fenced"}
INF = float("inf")
# The check that broken fencing violates (the negative control): tokens accepted outside the
# interval in which their node was active.
FENCING_CHECK = "4"
# A token accepted before the observers first saw its node cannot be a stale one (the gateway
# accepts only the seq of an `active` node it read, so the node existed); the observers reconnect
# after a ZooKeeper server is killed and then see new nodes late, by up to a session or two. The
# early side of checks 4 and 6 therefore only catches a token no node ever carried, with this
# much more slack; the late side (accepted after the node was gone) keeps the plain slack.
EARLY_SIDE_EXTRA_MS = 5000


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


def read_gateway_log(data_dir):
    """Accepted operations in log order, the other records, and notes about the files."""
    notes, ops, others = [], [], []
    if os.path.exists(os.path.join(data_dir, "snapshot")):
        notes.append("a compaction happened: operations folded into the snapshot before the "
                     "current log cannot be checked one by one")
    logs = sorted(f for f in os.listdir(data_dir) if f.startswith("log."))
    if not logs:
        raise SystemExit("check: no log.* in %s" % data_dir)
    for name in logs:
        with open(os.path.join(data_dir, name), "rb") as f:
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
    """Per account, each active node the observers saw: seq, instance, when it was first seen
    present and when its absence (or a newer node) was first seen. zxids order what different
    servers showed: a sample with a larger zxid is a newer state."""

    def __init__(self, samples):
        by_account = defaultdict(list)
        for s in samples:
            by_account[s["account"]].append(s)
        self.nodes = {}
        for account, ss in by_account.items():
            nodes = {}
            for s in ss:
                if s["present"]:
                    n = nodes.setdefault(s["zxid"], {"czxid": s["zxid"], "seq": s["seq"],
                                                     "instance": s["instance"],
                                                     "session": s["session"],
                                                     "first": INF, "gone": INF})
                    n["first"] = min(n["first"], s["t_ms"])
            # A sample with zxid z (a present node's czxid, or the pzxid read with an absence)
            # shows every node created before z as gone.
            ordered = sorted(ss, key=lambda s: s["zxid"])
            zs = [s["zxid"] for s in ordered]
            suffix_min = [INF] * (len(ordered) + 1)
            for i in range(len(ordered) - 1, -1, -1):
                suffix_min[i] = min(suffix_min[i + 1], ordered[i]["t_ms"])
            for n in nodes.values():
                n["gone"] = suffix_min[bisect.bisect_right(zs, n["czxid"])]
            self.nodes[account] = sorted(nodes.values(), key=lambda n: n["czxid"])

    def with_seq(self, account, seq):
        return [n for n in self.nodes.get(account, []) if n["seq"] == seq]


def check(out_dir, slack_ms):
    history = load_history(out_dir)
    meta = history["meta"]
    log_ops, log_others, notes = read_gateway_log(os.path.join(out_dir, meta["gateway_data"]))
    ops = history["ops"]
    by_id = {}
    for op in ops:
        by_id[op["op_id"]] = op
    timeline = ActiveTimeline(history["observer"])
    violations = defaultdict(list)

    # 1. Per account, tokens never decrease in log order; each token belongs to one instance
    #    (and one session), the one the observer saw holding active with that seq.
    last_token = {}
    owner = {}
    for pos, r in enumerate(log_ops):
        a, t = r["account"], r["token"]
        if t < last_token.get(a, -1):
            violations["1"].append("%s: log record %d (op %s) has token %d after token %d" %
                                   (a, pos, r["opId"], t, last_token[a]))
        last_token[a] = max(t, last_token.get(a, -1))
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

    # 3. Every operation acknowledged 200 is in the log exactly once; nothing refused or never
    #    sent is; the acknowledged token is the logged one.
    logged = Counter(r["opId"] for r in log_ops)
    logged_token = {r["opId"]: r["token"] for r in log_ops}
    # A compaction folds operations into the snapshot, where they cannot be told apart: a run
    # must not compact (the gateway compacts past 64 MiB of log), and a missing acknowledged
    # operation is a violation whatever the reason.
    compacted = any("compaction" in n for n in notes)
    for op in ops:
        n = logged.get(op["op_id"], 0)
        if op["outcome"] == OK:
            if n == 0:
                violations["3"].append("op %s (%s via agent %d) acknowledged at %d ms is not "
                                       "in the gateway log%s" %
                                       (op["op_id"], op["account"], op["agent"],
                                        op["completed_ms"],
                                        " (the gateway compacted its log)" if compacted else ""))
            elif op["token"] >= 0 and logged_token[op["op_id"]] != op["token"]:
                violations["3"].append("op %s acknowledged with hwm %d but logged with token %d" %
                                       (op["op_id"], op["token"], logged_token[op["op_id"]]))
        elif op["outcome"] in DEFINITE_REFUSALS and n > 0:
            violations["3"].append("op %s answered %s (%d) is in the gateway log" %
                                   (op["op_id"], op["outcome"], op["status"]))
    for op_id, n in logged.items():
        if n > 1:
            violations["3"].append("op %s is in the gateway log %d times" % (op_id, n))
        if op_id not in by_id:
            violations["3"].append("op %s is in the gateway log but was never sent" % op_id)

    # 4. Every accepted token was the account's active seq at acceptance, per the observer. The
    #    acceptance instant lies after the invocation of every operation logged up to it (the log
    #    is in decision order) and before the acknowledgement of every operation logged from it
    #    on. Slack: the interval in which the observers saw the node is widened by slack_ms on
    #    both sides (watch delivery to the gateway and to the observers, an observer reconnecting).
    #    An operation forwarded while the runner held its agent's gateway link reached the gateway
    #    no earlier than the link's release. Times are whole milliseconds: an operation invoked in
    #    the millisecond the hold was recorded may have gone through just before it, so only one
    #    invoked strictly later counts as held.
    holds = defaultdict(list)
    for e in history["events"]:
        for f in e["faults"]:
            if f["kind"] == "stale_delivery" and "held_ms" in f and "delivered_ms" in f:
                holds[f["agent"]].append((f["held_ms"], f["delivered_ms"]))
    lo, windows = -INF, []
    for r in log_ops:
        op = by_id.get(r["opId"])
        if op is not None:
            lo = max(lo, op["invoked_ms"])
            for held, delivered in holds.get(op["agent"], []):
                if held < op["invoked_ms"] <= delivered:
                    lo = max(lo, delivered)
        windows.append([lo, INF])
    hi = INF
    for i in range(len(log_ops) - 1, -1, -1):
        op = by_id.get(log_ops[i]["opId"])
        if op is not None and op["outcome"] == OK:
            hi = min(hi, op["completed_ms"])
        windows[i][1] = hi
    marks = []  # (account, time) of each check-4 violation, for the timeline
    worst_gap = 0  # the largest gap within the slack, to show how much of it was needed
    for r, (w_lo, w_hi) in zip(log_ops, windows):
        nodes = timeline.with_seq(r["account"], r["token"])
        # How far the acceptance window lies outside the observed interval (0: they overlap).
        gap = min((max(0, w_lo - n["gone"], n["first"] - w_hi - EARLY_SIDE_EXTRA_MS)
                   for n in nodes), default=INF)
        if gap <= slack_ms:
            worst_gap = max(worst_gap, gap)
            continue
        if nodes:
            seen = ", ".join("seen %s..%s ms" % (_ms(n["first"]), _ms(n["gone"])) for n in nodes)
        else:
            seen = "never seen as active"
        marks.append((r["account"], w_lo if w_lo != -INF else 0))
        violations["4"].append("%s: op %s (%s) accepted with token %d between %s and %s ms; "
                               "that seq was active: %s" %
                               (r["account"], r["opId"], r["instance"], r["token"], _ms(w_lo),
                                _ms(w_hi), seen))

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

    check_leases(history, timeline, slack_ms, bound, violations)

    # Operations that went into a held gateway link (not refused by the agent's gate first), and
    # how many of them the gateway accepted once they were delivered late.
    held_ops = [op for op in ops if op["outcome"] not in DEFINITE_REFUSALS and not op["probe"]
                and any(h < op["invoked_ms"] <= d for h, d in holds.get(op["agent"], []))]
    figures = compute_figures(history, log_ops, notes, bound)
    figures["held_ops"] = len(held_ops)
    figures["held_ops_accepted"] = sum(1 for op in held_ops if logged.get(op["op_id"], 0) > 0)
    figures["worst_gap_within_slack_ms"] = worst_gap
    return history, timeline, log_ops, log_others, violations, figures, marks


def check_leases(history, timeline, slack_ms, ops_bound, violations):
    """6. Every device lease the gateway showed was last renewed under its account's active seq,
    by the instance holding it: the gateway answered between asked_ms and answered_ms and the
    renewal was age_ms before that (a lease at the full TTL, expired but not swept yet, was
    renewed at least a TTL before). The active interval is widened by slack_ms as in check 4. A
    batch the gateway took in just after it was resumed from a pause may have been sent at any
    time during the pause: it waited in the socket, so its window reaches back to the pause's
    start. (A batch held in an agent's link is no exception: it must be refused on delivery.)
    7. After the last heal every device is leased under its account's current leader within the
    operations' bound plus the device's timeout and its longest reconnect backoff."""
    devices = history["meta"].get("devices")
    if not isinstance(devices, dict) or not devices.get("count"):
        return
    ttl = devices["lease_ttl_ms"]
    pauses = [(f["start_ms"], f["heal_ms"]) for e in history["events"] for f in e["faults"]
              if f["kind"] == "gateway_pause"]
    fields = history["lease_fields"]
    reported = set()
    for row in history["leases"]:
        s = dict(zip(fields, row))
        key = (s["account"], s["device"], s["token"], s["counter"])
        if key in reported:
            continue
        if s["age_ms"] < ttl:
            lo, hi = s["asked_ms"] - s["age_ms"], s["answered_ms"] - s["age_ms"]
        else:
            lo, hi = -INF, s["answered_ms"] - ttl
        for start, heal in pauses:
            if start <= hi and lo <= heal + slack_ms:
                lo = min(lo, start)
        nodes = timeline.with_seq(s["account"], s["token"])
        fits = [n for n in nodes if lo <= n["gone"] + slack_ms
                and n["first"] - slack_ms - EARLY_SIDE_EXTRA_MS <= hi]
        if fits and all(n["instance"] == s["agent"] for n in fits):
            continue
        reported.add(key)
        seen = ", ".join("%s seen %s..%s ms" % (n["instance"], _ms(n["first"]), _ms(n["gone"]))
                         for n in nodes) or "never seen as active"
        violations["6"].append("%s/%s: lease under token %d (%s, connection %d) renewed between "
                               "%s and %s ms; that seq was active: %s" %
                               (s["account"], s["device"], s["token"], s["agent"], s["counter"],
                                _ms(lo), _ms(hi), seen))
    final = history.get("final", {})
    bound = ops_bound + devices["timeout_ms"] + devices["backoff_max_ms"] + 1000
    for key in final.get("devices_not_leased", []):
        violations["7"].append("%s: not leased under its account's leader after the last heal" %
                               key)
    for key, d in sorted(final.get("devices", {}).items()):
        if d["leased_ms"] > bound:
            violations["7"].append("%s: leased under its leader %d ms after the last heal (bound "
                                   "%d ms)" % (key, d["leased_ms"], bound))


def _ms(x):
    return "inf" if x == INF else ("-inf" if x == -INF else "%d" % x)


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


# ---------------------------------------------------------------------------------------------
# report.md and timeline.svg

CHECK_TITLES = {
    "1": "tokens accepted per account never decrease in log order; each token is one instance's",
    "2": "no operation accepted with a token lower than one already acknowledged",
    "3": "every acknowledged operation is in the gateway log exactly once; nothing refused is",
    "4": "every accepted token was the account's active seq at acceptance (observer)",
    "5": "after the last heal every account is led again in time and answers",
    "6": "every device lease was renewed under its account's active seq, by its holder",
    "7": "after the last heal every device is leased under its account's leader in time",
}


def write_report(out_dir, history, violations, figures, slack_ms):
    meta = history["meta"]
    lines = ["# Chaos run, seed %d" % meta["seed"], ""]
    total = sum(len(v) for v in violations.values())
    lines.append("**%s** — %d events, %d accounts, %d agents, session timeout %d ms, gateway "
                 "%s%s." % ("PASS: no violation" if total == 0 else "FAIL: %d violations" % total,
                            figures["events"], len(meta["accounts"]), len(meta["agents"]),
                            meta["session_timeout_ms"], meta["gateway_mode"],
                            ", FENCING BROKEN (negative control)" if meta["break_fencing"] else ""))
    lines += ["", "Replay: `scripts/chaos --events %d --seed %d --accounts %d --agents %d%s "
              "--out DIR`" % (meta["events"], meta["seed"], len(meta["accounts"]),
                              len(meta["agents"]), " --break-fencing" if meta["break_fencing"]
                              else ""), ""]
    lines += ["## Checks", "", "| # | property | violations |", "| --- | --- | ---: |"]
    for k, title in CHECK_TITLES.items():
        lines.append("| %s | %s | %d |" % (k, title, len(violations.get(k, []))))
    lines += ["", "Check 4 slack: %d ms on each side of the interval the observers saw; the largest "
              "gap an accepted operation needed: %d ms." % (slack_ms,
                                                           figures["worst_gap_within_slack_ms"]),
              ""]
    for k in CHECK_TITLES:
        if violations.get(k):
            lines.append("### Violations of check %s (first 50 of %d)" % (k, len(violations[k])))
            lines.append("")
            lines += ["- " + v for v in violations[k][:50]]
            lines.append("")
    lines += ["## Events by kind", "", "| kind | faults |", "| --- | ---: |"]
    for k, n in sorted(figures["faults_by_kind"].items()):
        lines.append("| %s | %d |" % (k, n))
    lines.append("| (events with several faults at once) | %d |" % figures["combined_events"])
    lines += ["", "## Operations by outcome, per nemesis kind", "",
              "The kind is the event in progress when the operation was invoked (from the fault's "
              "start until every account was led again); `calm` is between events. First per "
              "kind (an event with several faults counts for each of them), then per "
              "combination.", "",
              "| during | invoked | acknowledged | refused | indeterminate | refused by reason |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    per_kind = figures["per_kind"]
    rows = sorted((k for k in per_kind if k.startswith("kind:")), key=lambda k: k)
    rows.append("all")
    rows += ["", "By combination (each event's faults together):", ""] + sorted(
        k for k in per_kind if not k.startswith("kind:") and k != "all")
    for k in rows:
        if k == "" or k.startswith("By combination"):
            lines.append(k)
            if k.startswith("By"):
                lines += ["| during | invoked | acknowledged | refused | indeterminate | "
                          "refused by reason |", "| --- | ---: | ---: | ---: | ---: | --- |"]
            continue
        v = per_kind[k]
        reasons = ", ".join("%s %d" % r for r in sorted(figures["refused_reasons"].get(k, {})
                                                         .items()))
        lines.append("| %s | %d | %d | %d | %d | %s |" % (
            "**all**" if k == "all" else k.replace("kind:", ""), v.get("invoked", 0), v.get("acknowledged", 0),
            v.get("refused", 0), v.get("indeterminate", 0), reasons))
    lines += ["", "Indeterminate by cause: " + (", ".join(
        "%s %d" % r for r in sorted(figures["indeterminate_reasons"].items())) or "none") +
        ". Operations in the gateway log: %d." % figures["logged_ops"], ""]
    lines += ["Stale deliveries: %d, with %d operations sent into the held link (not refused by "
              "the agent's gate first); %d of them were accepted when delivered late." %
              (figures["stale_deliveries"], figures.get("held_ops", 0),
               figures.get("held_ops_accepted", 0)), ""]
    devices = meta.get("devices")
    if isinstance(devices, dict) and devices.get("count"):
        leased = [d["leased_ms"] for d in history.get("final", {}).get("devices", {}).values()]
        lines += ["Devices: %d (%d per account; heartbeat %d ms, timeout %d ms, lease TTL %d ms), "
                  "%d lease samples read from the gateway; after the last heal the last device "
                  "was leased under its leader after %s ms." %
                  (devices["count"], devices["per_account"], devices["heartbeat_ms"],
                   devices["timeout_ms"], devices["lease_ttl_ms"], len(history.get("leases", [])),
                   max(leased) if leased else "-"), ""]
    lines += ["## Re-election after a heal", ""]
    w = figures["worst_reelect"]
    if w:
        lines.append("Worst: %d ms after the heal of event %d (%s); median %d ms." %
                     (w[0], w[1], w[2], figures["median_reelect_ms"]))
    if figures["unsettled_events"]:
        lines += ["", "Events after whose heal not every account was led again within the "
                  "settle deadline (session timeout + 5 s); for up to 3 accounts, the active "
                  "node the observer saw last and who claimed to lead:", ""]
    for index, kinds, accounts in figures["unsettled_events"]:
        shown = "; ".join("%s active=%s claims=%s" % (
            a["account"], "%s/%s" % (a["active"]["instance"], a["active"]["seq"])
            if a.get("active") else "none",
            ",".join("%s/%s" % (c["agent"], c["token"]) for c in a["leader_claims"]) or "none")
            for a in accounts[:3])
        lines.append("- event %d (%s): %d accounts%s" % (index, kinds, len(accounts),
                                                         (": " + shown) if shown else ""))
    lines.append("")
    lines.append("After the last heal: worst %s ms until an operation through the account's "
                 "leader succeeded (bound %d ms)." % (figures["final_worst_led_ms"],
                                                     figures["final_bound_ms"]))
    if figures["notes"]:
        lines += ["", "## Notes", ""] + ["- " + n for n in figures["notes"]]
    lines += ["", "Timeline: [timeline.svg](timeline.svg).", ""]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(lines))


KIND_COLOURS = {
    "agent_kill": "#f4a582", "agent_pause": "#fddbc7", "agent_partition": "#d1e5f0",
    "zk_kill_agent_server": "#b8e186", "zk_kill_leader": "#7fbc41", "gateway_kill": "#c2a5cf",
    "gateway_pause": "#e7d4e8", "stale_delivery": "#fee08b",
}
INSTANCE_COLOURS = ["#2166ac", "#1b7837", "#762a83", "#b35806", "#01665e", "#8c510a",
                    "#542788", "#4d4d4d", "#c51b7d"]


def write_svg(out_dir, history, timeline, violations_ops):
    meta = history["meta"]
    accounts = meta["accounts"]
    end = max(meta["ended_ms"], 1)
    width = int(min(6000, max(1200, end / 100)))
    left, top, row = 80, 40, 12
    height = top + row * len(accounts) + 40
    scale = (width - left - 10) / end

    def x(t):
        return left + max(0.0, min(t, end)) * scale

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="9">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="4" y="14" font-size="12">seed %d: who led each account (bar colour = '
           'instance), fault windows shaded, refused by fencing (red tick), violation (black '
           'X)</text>' % meta["seed"]]
    for e in history["events"]:
        for f in e["faults"]:
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.6">'
                       '<title>event %d %s %s..%s ms</title></rect>' % (
                           x(f["start_ms"]), top, max(1.0, x(f["heal_ms"]) - x(f["start_ms"])),
                           row * len(accounts), KIND_COLOURS.get(f["kind"], "#ddd"), e["index"],
                           f["kind"], f["start_ms"], f["heal_ms"]))
    legend_x = left
    for kind, colour in KIND_COLOURS.items():
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s'
                   '</text>' % (legend_x, height - 22, colour, legend_x + 13, height - 13, kind))
        legend_x += 15 + 6 * len(kind)
    for i, a in enumerate(accounts):
        y = top + i * row
        out.append('<text x="4" y="%d">%s</text>' % (y + 9, a))
        for n in timeline.nodes.get(a, []):
            start, stop = n["first"], min(n["gone"], end)
            try:
                colour = INSTANCE_COLOURS[meta["agents"].index(n["instance"]) %
                                          len(INSTANCE_COLOURS)]
            except ValueError:
                colour = "#999"
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s seq %d'
                       '</title></rect>' % (x(start), y + 2, max(0.5, x(stop) - x(start)), row - 4,
                                            colour, n["instance"], n["seq"]))
    row_of = {a: i for i, a in enumerate(accounts)}
    for op in history["ops"]:
        if op["outcome"] in FENCING_REFUSALS:
            y = top + row_of[op["account"]] * row
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="red" stroke-width="1"/>'
                       % (x(op["completed_ms"]), x(op["completed_ms"]), y, y + row))
    for account, t in violations_ops:
        y = top + row_of.get(account, 0) * row + row / 2
        out.append('<path d="M%.1f %.1f l6 6 m-6 0 l6 -6" transform="translate(-3 -3)" '
                   'stroke="black" stroke-width="2"/>' % (x(t), y))
    out.append("</svg>")
    with open(os.path.join(out_dir, "timeline.svg"), "w") as f:
        f.write("\n".join(out))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--slack-ms", type=int, default=500)
    parser.add_argument("--expect-violations", action="store_true",
                        help="negative control: succeed only if check 4 (a token accepted "
                             "outside its leadership) is violated")
    args = parser.parse_args(argv)
    if args.slack_ms < 0:
        parser.error("--slack-ms: must not be negative")
    history, timeline, _, _, violations, figures, marks = check(args.dir, args.slack_ms)
    write_report(args.dir, history, violations, figures, args.slack_ms)
    write_svg(args.dir, history, timeline, marks)
    total = sum(len(v) for v in violations.values())
    print("check: %s: %d events, %d operations (%d acknowledged), %d in the gateway log; "
          "%d violations %s" % (args.dir, figures["events"], len(history["ops"]),
                                figures["per_kind"].get("all", {}).get("acknowledged", 0),
                                figures["logged_ops"], total,
                                dict((k, len(v)) for k, v in sorted(violations.items()) if v)))
    for k in sorted(violations):
        for v in violations[k][:5]:
            print("  check %s: %s" % (k, v))
    if figures["worst_reelect"]:
        print("check: worst re-election after a heal %d ms (event %d, %s)" %
              figures["worst_reelect"])
    print("check: report %s" % os.path.join(args.dir, "report.md"))
    if args.expect_violations:
        # A liveness miss (checks 5, 7) or anything else is not what broken fencing shows.
        if not violations.get(FENCING_CHECK):
            print("check: expected violations of check %s (broken fencing), found none" %
                  FENCING_CHECK)
            return 1
        return 0
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
