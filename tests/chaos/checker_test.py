#!/usr/bin/env python3
"""The chaos checker on small hand-made histories: a clean one passes, and each kind of
violation is reported by the check that guards it (and only a broken history fails)."""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "chaos"))
import check  # noqa: E402


T0_STEADY_MS = 5_000_000  # the runner's start on the monotonic clock the gateway stamps


def text(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def accepted_record(account, op_id, token, instance, session=7):
    body = (b"\x01" + text(account) + text(op_id) + struct.pack("<Q", token) + text(instance) +
            struct.pack("<q", session) + text('{"chaos":1}') + struct.pack("<Q", token))
    return struct.pack("<II", len(body), zlib.crc32(body) & 0xFFFFFFFF) + body


WALL0_MS = 1_700_000_000_000  # the wall clock at the run's start
ROOT = "/chaos/accounts"


def jute_string(b):
    return struct.pack(">i", len(b)) + b


def create_txn(path, data, ephemeral):
    return (jute_string(path.encode()) + jute_string(data) + struct.pack(">i", 0) +
            (b"\x01" if ephemeral else b"\x00") + struct.pack(">i", 0))


def txn_entry(session, zxid, time, kind, record):
    """One ZooKeeper transaction log entry (zk_txnlog's docstring has the format)."""
    body = struct.pack(">qiqqi", session, 0, zxid, time, kind) + record
    return (struct.pack(">qi", zlib.adler32(body) & 0xFFFFFFFF, len(body)) + body + b"B")


def txn_log(entries):
    # The header, the entries, then the zeros the server preallocates.
    return struct.pack(">iiq", 0x5A4B4C47, 2, 0) + b"".join(entries) + b"\0" * 64


class Run:
    """acct-0 led by agent-0 (seq 1, session 7, created at 5 ms) until 1000 ms, when its session
    expired, then by agent-1 (seq 2, session 8, created at 1005 ms); the observers read each node
    5 ms after its creation."""

    def __init__(self, gateways=1):
        """gateways > 1: a cluster's run, each gateway with a log and a lease journal of its own
        (self.logs[g], self.journals[g]; self.log and self.journal are gateway 0's)."""
        self.ops = []
        self.gateways = gateways
        self.logs = [[] for _ in range(gateways)]
        self.log = self.logs[0]
        # Each active node's life as ZooKeeper logs it; `seen`: when the observers first read it.
        self.nodes = [
            {"seq": 1, "instance": "agent-0", "session": 7, "created": 5, "gone": 1000,
             "ended_by": "close", "seen": 10},
            {"seq": 2, "instance": "agent-1", "session": 8, "created": 1005, "gone": None,
             "ended_by": None, "seen": 1010},
        ]
        self.final = {"last_heal_ms": 1500, "accounts": {"acct-0": {"led_ms": 50}}}
        self.events = [{"index": 0, "kinds": "agent_kill", "start_ms": 900, "heal_ms": 1100,
                        "settled_ms": 1200, "reelect_ms": 100,
                        "faults": [{"kind": "agent_kill", "start_ms": 900, "heal_ms": 1100}]}]

        self.devices = {"count": 0}
        self.journals = [[] for _ in range(gateways)]
        self.journal = self.journals[0]
        self.bad_answers = {"count": 0, "first": []}

    def zookeeper_changes(self):
        """The nodes' creations and ends in time order, each with its zxid: (time, zxid,
        session, type, record). Servers log a handover as one multi; here every change is its own
        transaction, ends by `ended_by`: "delete", or "close" (the session's expiry)."""
        path = ROOT + "/acct-0/active"
        changes = []
        for n in self.nodes:
            data = json.dumps({"seq": n["seq"], "instanceId": n["instance"],
                               "sessionId": n["session"]}).encode()
            changes.append((n["created"], n["session"], 1, create_txn(path, data, True)))
            if n["ended_by"] == "delete":
                changes.append((n["gone"], n["session"], 2, jute_string(path.encode())))
            elif n["ended_by"] == "close":
                changes.append((n["gone"], n["session"], -11, struct.pack(">i", 0)))
        changes.sort(key=lambda c: c[0])
        return [(t, 100 + i, session, kind, record)
                for i, (t, session, kind, record) in enumerate(changes)]

    def observer_samples(self):
        zxid = {(t, kind): z for t, z, _, kind, _ in self.zookeeper_changes()}
        return [[n["seen"], 0, "acct-0", True, n["seq"], n["instance"], n["session"],
                 zxid[(n["created"], 1)]] for n in self.nodes if n["seen"]]

    def with_device(self, leased_ms=300):
        """acct-0/dev-0, leased under seq 2 after the last heal."""
        self.devices = {"count": 1, "per_account": 1, "heartbeat_ms": 300, "timeout_ms": 900,
                        "renew_interval_ms": 400, "lease_ttl_ms": 1000, "backoff_max_ms": 1000}
        self.final["devices"] = {"acct-0/dev-0": {"leased_ms": leased_ms, "token": 2}}
        self.final["devices_not_leased"] = []

    def lease_write(self, at, token, agent, result="accepted", op="renew", session=None,
                    gateway=0):
        """The gateway's journal line: dev-0's write decided at at..at+1 ms. The observer saw
        agent-0 on session 7 and agent-1 on session 8."""
        self.journals[gateway].append({
            "from_ms": T0_STEADY_MS + at, "to_ms": T0_STEADY_MS + at + 1, "unix_ms": 1,
            "list": op, "account": "acct-0", "device": "dev-0", "token": token, "counter": 1,
            "instance": agent, "session": session if session is not None else
            7 + int(agent[-1]), "result": result})

    def pause_gateway(self, start_ms, heal_ms):
        self.events = [{"index": 0, "kinds": "gateway_pause", "start_ms": start_ms,
                        "heal_ms": heal_ms, "settled_ms": heal_ms + 100, "reelect_ms": 100,
                        "faults": [{"kind": "gateway_pause", "start_ms": start_ms, "agent": -1,
                                    "heal_ms": heal_ms}]}]

    def hold_gateway_link(self, agent, held_ms, delivered_ms):
        """The runner's stale delivery: agent's link to the gateway held, then released."""
        self.events = [{"index": 0, "kinds": "stale_delivery", "start_ms": held_ms,
                        "heal_ms": delivered_ms + 100, "settled_ms": delivered_ms + 200,
                        "reelect_ms": 100,
                        "faults": [{"kind": "stale_delivery", "start_ms": held_ms, "agent": agent,
                                    "held_ms": held_ms, "delivered_ms": delivered_ms,
                                    "heal_ms": delivered_ms + 100}]}]

    def op(self, op_id, invoked, completed, agent, token, outcome="ok", logged=True,
           instance=None, status=None, session=None, gateways=(0,)):
        """`gateways`: whose logs accepted it (a cluster's retry at the next owner: two)."""
        self.ops.append([invoked, completed, agent, "acct-0", op_id,
                         status if status is not None else (200 if outcome == "ok" else 409),
                         outcome, token, False])
        for g in gateways if logged else ():
            # The observer saw agent-0 on session 7 and agent-1 on session 8.
            self.logs[g].append(accepted_record("acct-0", op_id, token,
                                                instance or "agent-%d" % agent,
                                                session if session is not None else 7 + agent))

    def files(self, g):
        """Gateway g's data dir, log archive and lease journal, named as the runner names them."""
        name = "gateway" if self.gateways == 1 else "gateway-%d" % g
        return {"id": name, "data": name + "-data", "log_archive": name + "-log-archive",
                "lease_journal": "lease-journal.jsonl" if self.gateways == 1 else
                name + "-lease-journal.jsonl"}

    def write(self, directory):
        for g, log in enumerate(self.logs):
            data = os.path.join(directory, self.files(g)["data"])
            os.makedirs(data)
            with open(os.path.join(data, "log.%020d" % 0), "wb") as f:
                f.write(b"".join(log))
        entries = [txn_entry(session, zxid, WALL0_MS + t, kind, record)
                   for t, zxid, session, kind, record in self.zookeeper_changes()]
        # Server 1 was down while the second half was committed: the union has every change.
        for server, logged in (("server-0", entries), ("server-1", entries[:len(entries) // 2])):
            os.makedirs(os.path.join(directory, "zookeeper", server))
            with open(os.path.join(directory, "zookeeper", server, "log.1"), "wb") as f:
                f.write(txn_log(logged))
        history = {
            "meta": {"seed": 1, "events": 1, "accounts": ["acct-0"], "agents": ["agent-0",
                                                                                "agent-1"],
                     "session_timeout_ms": 1500, "break_fencing": False, "lock_delay_ms": 0,
                     "gateway_mode": "zookeeper", "gateway_data": "gateway-data",
                     "ended_ms": 2000, "devices": self.devices,
                     "lease_journal": "lease-journal.jsonl", "t0_steady_ms": T0_STEADY_MS,
                     "root": ROOT, "zookeeper_logs": "zookeeper",
                     "gateway_log_archive": "gateway-log-archive",
                     "wall_clock": [[0, WALL0_MS], [2000, WALL0_MS + 2000]]},
            "schedule": [], "final": self.final, "gateway_runs": [],
            "bad_gateway_answers": self.bad_answers,
            "events": self.events,
            "observer_fields": ["t_ms", "server", "account", "present", "seq", "instance",
                                "session", "zxid"],
            "observer": self.observer_samples(),
            "ops_fields": ["invoked_ms", "completed_ms", "agent", "account", "op_id", "status",
                           "outcome", "token", "probe"],
            "ops": self.ops,
            "lease_fields": ["asked_ms", "answered_ms", "account", "device", "agent", "token",
                             "counter", "age_ms"],
            "leases": [],
        }
        if self.gateways > 1:  # a single gateway's history as runners before cluster mode wrote it
            history["meta"]["gateways"] = [self.files(g) for g in range(self.gateways)]
        with open(os.path.join(directory, "history.json"), "w") as f:
            json.dump(history, f)
        for g, journal in enumerate(self.journals):
            with open(os.path.join(directory, self.files(g)["lease_journal"]), "w") as f:
                f.write("".join(json.dumps(e) + "\n" for e in journal))


def clean():
    r = Run()
    r.op("a", 100, 110, 0, 1)
    r.op("b", 200, 210, 0, 1)
    r.op("c", 1100, 1110, 1, 2)
    r.op("refused", 1120, 1130, 0, 1, outcome="not_current_leader", logged=False)
    r.op("lost-answer", 1200, 3200, 1, -1, outcome="timeout", logged=False, status=0)
    return r


class CheckerTest(unittest.TestCase):
    def violations(self, run):
        with tempfile.TemporaryDirectory() as d:
            run.write(d)
            _, _, _, _, violations, _, _ = check.check(d)
            return {k: v for k, v in violations.items() if v}

    def violations_in(self, directory):
        _, _, _, _, violations, _, _ = check.check(directory)
        return {k: v for k, v in violations.items() if v}

    def figures(self, run):
        with tempfile.TemporaryDirectory() as d:
            run.write(d)
            return check.check(d)[5]

    def test_a_clean_history_has_no_violation(self):
        self.assertEqual(self.violations(clean()), {})

    def test_a_token_that_decreases_in_log_order_violates_check_1(self):
        r = clean()
        r.op("late-old", 1150, 1160, 0, 1)  # logged after token 2
        self.assertIn("1", self.violations(r))

    def test_a_token_used_by_two_instances_violates_check_1(self):
        r = clean()
        r.op("forged", 1300, 1310, 1, 2, instance="agent-0")
        self.assertIn("1", self.violations(r))

    def test_a_token_used_by_another_session_of_its_instance_violates_check_1(self):
        r = Run()
        r.op("a", 100, 110, 0, 1)
        r.op("c", 1100, 1110, 1, 2, session=9)  # agent-1 held seq 2 on session 8
        self.assertEqual(set(self.violations(r)), {"1"})

    def test_an_acknowledged_operation_missing_after_a_compaction_still_violates_check_3(self):
        r = clean()
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            # Compacted into generation 1, and generation 0 is in no archive: a, b and c lost.
            data = os.path.join(d, "gateway-data")
            os.remove(os.path.join(data, "log.%020d" % 0))
            open(os.path.join(data, "log.%020d" % 1), "wb").close()
            open(os.path.join(data, "snapshot"), "wb").close()
            _, _, _, _, violations, _, _ = check.check(d)
        self.assertEqual({k for k, v in violations.items() if v}, {"3"})
        self.assertIn("compacted", violations["3"][0])

    def test_logs_a_compaction_deleted_are_read_from_the_runners_archive(self):
        r = clean()
        r.op("d", 1300, 1310, 1, 2, logged=False)
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            data, archive = os.path.join(d, "gateway-data"), os.path.join(d, "gateway-log-archive")
            os.makedirs(archive)
            # a, b and c in generation 0, which only the archive still holds; d in generation 1.
            os.rename(os.path.join(data, "log.%020d" % 0), os.path.join(archive, "log.%020d" % 0))
            with open(os.path.join(data, "log.%020d" % 1), "wb") as f:
                f.write(accepted_record("acct-0", "d", 2, "agent-1", session=8))
            open(os.path.join(data, "snapshot"), "wb").close()
            ops, _, notes = check.read_gateway_log(data, archive)
            self.assertEqual([o["opId"] for o in ops], ["a", "b", "c", "d"])
            self.assertFalse(any("compaction" in n for n in notes), notes)
            self.assertEqual(self.violations_in(d), {})

    def test_the_negative_control_passes_only_on_held_operations_accepted_stale(self):
        def expect_violations(r):
            with tempfile.TemporaryDirectory() as d:
                r.write(d)
                return check.main([d, "--expect-violations"])
        r = clean()
        r.final["accounts"] = {}  # a liveness miss (check 5) alone
        self.assertEqual(expect_violations(r), 1)
        r = Run()
        r.op("a", 100, 110, 0, 1)
        r.op("stale", 1300, 1310, 0, 1)  # a check-4 violation, but not by a held operation
        r.op("c", 1400, 1410, 1, 2)
        self.assertEqual(expect_violations(r), 1)
        r = Run()
        r.hold_gateway_link(agent=0, held_ms=800, delivered_ms=1300)
        r.op("a", 100, 110, 0, 1)
        r.op("held", 850, 1850, 0, 1, outcome="gateway_unreachable", status=502)
        r.op("c", 1400, 1410, 1, 2)
        self.assertEqual(expect_violations(r), 0)

    def test_an_acknowledged_operation_missing_from_the_log_violates_check_3(self):
        r = clean()
        r.op("lost", 1300, 1310, 1, 2, logged=False)
        self.assertEqual(set(self.violations(r)), {"3"})

    def test_an_operation_logged_twice_violates_check_3(self):
        r = clean()
        r.log.append(r.log[-1])
        self.assertIn("3", self.violations(r))

    def test_a_refused_operation_in_the_log_violates_check_3(self):
        r = clean()
        r.op("refused-but-logged", 1300, 1310, 1, 2, outcome="stale_token")
        self.assertIn("3", self.violations(r))

    def test_a_token_accepted_after_its_leadership_ended_violates_check_4(self):
        r = clean()
        # An old leader's operation decided after its active node was gone, before the successor's
        # first operation was logged: the tokens in the log still only grow.
        r.log.insert(2, accepted_record("acct-0", "stale", 1, "agent-0"))
        r.ops.append([1080, 3000, 0, "acct-0", "stale", 0, "timeout", -1, False])
        self.assertEqual(set(self.violations(r)), {"4"})

    def test_a_stale_token_accepted_before_the_successor_sent_violates_only_check_4(self):
        r = Run()
        r.op("a", 100, 110, 0, 1)
        r.op("stale", 1300, 1310, 0, 1)  # hwm-only gateway: nothing newer accepted yet
        r.op("c", 1400, 1410, 1, 2)
        self.assertEqual(set(self.violations(r)), {"4"})

    def test_a_held_operation_accepted_after_its_release_with_the_old_token_violates_check_4(self):
        r = Run()
        r.hold_gateway_link(agent=0, held_ms=800, delivered_ms=1300)
        r.op("a", 100, 110, 0, 1)
        # Invoked during the hold, so it reached the gateway after 1300 ms: seq 1 was gone.
        r.op("held", 850, 1850, 0, 1, outcome="gateway_unreachable", status=502)
        r.op("c", 1400, 1410, 1, 2)
        self.assertEqual(set(self.violations(r)), {"4"})

    def test_an_operation_invoked_in_the_millisecond_of_the_hold_may_have_passed_before_it(self):
        r = Run()
        r.hold_gateway_link(agent=0, held_ms=800, delivered_ms=1300)
        r.op("a", 100, 110, 0, 1)
        # Decided at once (before the successor's op at 1010 ms); only its answer was held.
        r.op("raced-the-hold", 800, 1800, 0, 1, outcome="gateway_unreachable", status=502)
        r.op("c", 1010, 1020, 1, 2)
        self.assertEqual(self.violations(r), {})

    def test_a_token_accepted_after_its_node_was_created_but_before_it_was_seen_is_not_stale(self):
        r = clean()
        r.nodes[1]["seen"] = 3000  # the observers reconnected and read seq 2 only at 3000 ms
        self.assertEqual(self.violations(r), {})

    def test_writes_under_a_node_the_observers_never_read_are_judged_by_its_logged_life(self):
        # Seq 2 handed over at 1200 ms to agent-0's seq 3 (session 9), which lived 195 ms and
        # was never read by the observers; its lease writes within that life are legitimate.
        def run(write_at):
            r = clean()
            r.nodes[1].update(gone=1200, ended_by="delete")
            r.nodes.append({"seq": 3, "instance": "agent-0", "session": 9, "created": 1205,
                            "gone": 1400, "ended_by": "close", "seen": None})
            r.with_device()
            r.lease_write(write_at, 3, "agent-0", session=9)
            return r
        self.assertEqual(self.violations(run(1300)), {})
        self.assertEqual(set(self.violations(run(1700))), {"6"})
        self.assertEqual(self.figures(run(1300))["active_nodes_unseen"], 1)

    def test_a_token_accepted_before_its_node_was_created_violates_check_4(self):
        r = clean()
        # Seq 2 created at 1200 ms (seen at 1205): op c was acknowledged at 1110 ms. The early
        # side once had 5 s of extra slack and let this pass.
        r.nodes[1].update(created=1200, seen=1205)
        self.assertEqual(set(self.violations(r)), {"4"})
        r.nodes[1]["created"] = 1110 + check.CLOCK_ROUNDING_MS  # within the clock's rounding
        self.assertEqual(self.violations(r), {})

    def test_past_a_nodes_end_the_observers_largest_lag_is_the_only_slack(self):
        def stale_at(invoked, lag):
            r = clean()
            r.nodes[1]["seen"] = 1005 + lag  # seq 2 read `lag` ms after its creation
            r.log.insert(2, accepted_record("acct-0", "stale", 1, "agent-0"))
            r.ops.append([invoked, 3000, 0, "acct-0", "stale", 0, "timeout", -1, False])
            return r
        # seq 1 ended at 1000 ms; op c (logged next) was invoked at 1100 ms.
        self.assertEqual(self.violations(stale_at(1090, lag=100)), {})
        self.assertEqual(set(self.violations(stale_at(1090, lag=80))), {"4"})
        figures = self.figures(stale_at(1090, lag=100))
        self.assertEqual(figures["observer_lag_ms"],
                         {"count": 2, "p50": 100, "p99": 100, "max": 100})

    def test_a_node_the_observers_read_that_the_zookeeper_logs_lack_is_bad_data(self):
        with tempfile.TemporaryDirectory() as d:
            clean().write(d)
            path = os.path.join(d, "history.json")
            with open(path) as f:
                history = json.load(f)
            history["observer"][1][7] = 999  # a czxid no log holds
            with open(path, "w") as f:
                json.dump(history, f)
            with self.assertRaises(SystemExit) as raised:
                check.check(d)
            self.assertIn("transaction logs do not hold", str(raised.exception))

    def test_without_the_zookeeper_logs_the_run_cannot_be_checked(self):
        with tempfile.TemporaryDirectory() as d:
            clean().write(d)
            shutil.rmtree(os.path.join(d, "zookeeper"))
            with self.assertRaises(SystemExit) as raised:
                check.check(d)
            self.assertIn("transaction logs", str(raised.exception))

    def test_a_transaction_log_entry_cut_short_ends_the_file_and_is_noted(self):
        r = clean()
        r.nodes[1]["seen"] = None
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            path = os.path.join(d, "zookeeper", "server-0", "log.1")
            with open(path, "rb") as f:
                data = f.read().rstrip(b"\0")
            with open(path, "wb") as f:
                f.write(data[:-5])  # the last change (seq 2's creation) torn
            _, timeline, _, _, _, figures, _ = check.check(d)
            self.assertTrue(any("cut short" in n for n in figures["notes"]), figures["notes"])
            # Server 1's log stops earlier still: seq 2's creation is in neither.
        self.assertEqual([n["seq"] for n in timeline.nodes["acct-0"]], [1])

    def test_a_fault_not_carried_out_is_counted_and_reported(self):
        r = clean()
        r.events[0]["faults"].append({"kind": "zk_kill_agent_server", "start_ms": 900,
                                      "heal_ms": 1100, "agent": 0,
                                      "not_done": "the agent's session is on no server"})
        self.assertEqual(self.figures(r)["not_done"],
                         [(0, "zk_kill_agent_server", "the agent's session is on no server")])
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            check.main([d])
            self.assertIn("Faults not carried out as intended: 1",
                          open(os.path.join(d, "report.md")).read())

    def test_lease_writes_by_each_leader_in_its_own_time_have_no_violation(self):
        r = clean()
        r.with_device()
        r.lease_write(300, 1, "agent-0")
        r.lease_write(999, 1, "agent-0")  # just before seq 1 was seen gone
        r.lease_write(1300, 1, "agent-0", result="stale_token")  # refused: changes nothing
        r.lease_write(1500, 2, "agent-1")
        r.lease_write(1600, 2, "agent-1", op="remove")
        self.assertEqual(self.violations(r), {})

    def test_a_lease_write_accepted_after_its_token_was_gone_violates_check_6(self):
        for op in ("renew", "remove"):
            r = clean()
            r.with_device()
            r.lease_write(1300, 1, "agent-0", op=op)  # seq 1 seen gone at 1000 ms
            self.assertEqual(set(self.violations(r)), {"6"}, op)

    def test_a_lease_write_accepted_before_its_tokens_node_was_created_violates_check_6(self):
        r = Run()
        r.op("a", 100, 110, 0, 1)
        r.with_device()
        r.nodes[1].update(created=1600, seen=1605)
        r.lease_write(1400, 2, "agent-1")  # before seq 2 existed
        self.assertEqual(set(self.violations(r)), {"6"})

    def test_a_lease_write_under_a_token_by_another_instance_or_session_violates_check_6(self):
        r = clean()
        r.with_device()
        r.lease_write(1600, 2, "agent-0")
        self.assertEqual(set(self.violations(r)), {"6"})
        r = clean()
        r.with_device()
        r.lease_write(1600, 2, "agent-1", session=9)  # agent-1 held seq 2 on session 8
        self.assertEqual(set(self.violations(r)), {"6"})

    def test_the_lease_journal_is_required_and_a_bad_line_is_bad_data(self):
        r = clean()
        r.with_device()
        r.lease_write(300, 1, "agent-0")
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            os.remove(os.path.join(d, "lease-journal.jsonl"))
            with self.assertRaises(SystemExit) as raised:
                check.check(d)
            self.assertIn("lease journal", str(raised.exception))
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            with open(os.path.join(d, "lease-journal.jsonl"), "a") as f:
                f.write('{"from_ms": 1}\n')
            with self.assertRaises(SystemExit) as raised:
                check.check(d)
            self.assertIn("line 2: to_ms missing", str(raised.exception))

    def test_a_lease_journal_line_cut_short_by_a_kill_is_noted_and_the_rest_checked(self):
        r = clean()
        r.with_device()
        r.lease_write(1300, 1, "agent-0")
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            with open(os.path.join(d, "lease-journal.jsonl"), "a") as f:
                f.write('{"from_ms": 50')
            _, _, _, _, violations, figures, _ = check.check(d)
            self.assertEqual({k for k, v in violations.items() if v}, {"6"})
            self.assertTrue(any("cut short" in n for n in figures["notes"]), figures["notes"])

    def test_a_device_not_leased_under_its_leader_after_the_last_heal_violates_check_7(self):
        r = clean()
        r.with_device()
        r.final["devices_not_leased"] = ["acct-0/dev-0"]
        self.assertEqual(set(self.violations(r)), {"7"})
        r = clean()
        r.with_device(leased_ms=10000)
        self.assertEqual(set(self.violations(r)), {"7"})

    def test_a_lower_token_accepted_after_a_higher_one_was_acknowledged_violates_check_2(self):
        r = Run()
        r.op("c", 1100, 1110, 1, 2, logged=False)
        r.op("a", 100, 1200, 0, 1)  # logged first, but invoked... before c was acknowledged
        r.log.append(accepted_record("acct-0", "c", 2, "agent-1"))
        r.op("z", 1300, 1310, 0, 1)  # invoked after c's acknowledgement, accepted with token 1
        self.assertIn("2", self.violations(r))

    def test_an_account_not_led_after_the_last_heal_violates_check_5(self):
        r = clean()
        r.final["accounts"] = {}
        self.assertEqual(set(self.violations(r)), {"5"})

    def test_an_account_led_too_late_after_the_last_heal_violates_check_5(self):
        r = clean()
        r.final["accounts"]["acct-0"]["led_ms"] = 1500 + 2000 + 1
        self.assertEqual(set(self.violations(r)), {"5"})

    def test_the_report_and_the_timeline_are_written_and_the_exit_status_says_pass_or_fail(self):
        import xml.etree.ElementTree as ET
        with tempfile.TemporaryDirectory() as d:
            clean().write(d)
            self.assertEqual(check.main([d]), 0)
            self.assertEqual(check.main([d, "--expect-violations"]), 1)
            self.assertIn("PASS", open(os.path.join(d, "report.md")).read())
            svg = ET.parse(os.path.join(d, "timeline.svg")).getroot()
            self.assertTrue(svg.tag.endswith("svg"))
        with tempfile.TemporaryDirectory() as d:
            r = clean()
            r.final["accounts"] = {}
            r.write(d)
            self.assertEqual(check.main([d]), 1)
            self.assertIn("FAIL", open(os.path.join(d, "report.md")).read())

    def test_malformed_gateway_answers_fail_the_run_and_are_listed(self):
        r = clean()
        r.bad_answers = {"count": 3, "first": ['GET /v1/presence/acct-0: entry {"device":"dev-0"} '
                                               'lacks device, agent, epoch.token, epoch.counter '
                                               'or age_ms']}
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            self.assertEqual(check.main([d]), 1)
            with open(os.path.join(d, "report.md")) as f:
                self.assertIn("malformed gateway answer: GET /v1/presence/acct-0", f.read())

    # A cluster of two gateways: acct-0's shard owned by gateway 0, then by gateway 1.

    def test_cluster_an_operation_retried_at_the_next_owner_with_the_same_token_passes(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        # Gateway 0 logged b and died before its answer; the agent retried at gateway 1, where
        # seq 1 was still current: in both logs, same token (at least once across an owner's
        # death).
        r.op("b", 200, 700, 0, 1, gateways=(0, 1))
        r.op("c", 1100, 1110, 1, 2, gateways=(1,))
        self.assertEqual(self.violations(r), {})
        figures = self.figures(r)
        self.assertEqual(figures["ops_in_several_logs"], 1)
        self.assertEqual(figures["logged_ops_by_gateway"], {"gateway-0": 2, "gateway-1": 2})

    def test_cluster_tokens_grow_in_each_gateways_log_not_across_the_logs(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1, gateways=(1,))  # the shard at gateway 1 first
        r.op("c", 1100, 1110, 1, 2)  # then at gateway 0, read first
        self.assertEqual(self.violations(r), {})
        r.op("late-old", 1150, 1160, 0, 1)  # after token 2 in gateway 0's log
        v = self.violations(r)
        self.assertIn("1", v)
        self.assertIn("in gateway-0's log", v["1"][0])

    def test_cluster_an_operation_twice_in_one_gateways_log_violates_check_3(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        r.op("b", 200, 210, 0, 1, gateways=(1, 1))
        r.op("c", 1100, 1110, 1, 2, gateways=(1,))
        v = self.violations(r)
        self.assertEqual(set(v), {"3"})
        self.assertIn("op b is in gateway-1's log 2 times", v["3"][0])

    def test_cluster_an_operation_in_two_logs_with_different_tokens_violates_check_3(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        r.op("c", 1100, 1110, 1, 2, gateways=(1,))
        r.logs[0].append(accepted_record("acct-0", "c", 1, "agent-0"))  # c at 0, under seq 1
        self.assertIn("3", self.violations(r))

    def test_cluster_an_acknowledged_operation_in_no_gateways_log_violates_check_3(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        r.op("c", 1100, 1110, 1, 2, gateways=(1,))
        r.op("lost", 1300, 1310, 1, 2, logged=False)
        v = self.violations(r)
        self.assertEqual(set(v), {"3"})
        self.assertIn("not in any gateway's log", v["3"][0])

    def test_cluster_a_stale_token_accepted_by_a_gateway_that_is_not_the_owner_violates_check_4(
            self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        # Gateway 1 accepted seq 1 after its node was gone; its own log's tokens still grow.
        r.op("stale", 1300, 1310, 0, 1, gateways=(1,))
        r.op("c", 1400, 1410, 1, 2)
        v = self.violations(r)
        self.assertEqual(set(v), {"4"})
        self.assertIn("in gateway-1's log", v["4"][0])

    def test_cluster_a_lease_write_under_a_gone_token_at_any_gateway_violates_check_6(self):
        r = Run(gateways=2)
        r.op("a", 100, 110, 0, 1)
        r.op("c", 1100, 1110, 1, 2, gateways=(1,))
        r.with_device()
        r.lease_write(300, 1, "agent-0")
        r.lease_write(1500, 2, "agent-1", gateway=1)
        self.assertEqual(self.violations(r), {})
        r.lease_write(1300, 1, "agent-0", gateway=1)  # seq 1 gone at 1000 ms
        v = self.violations(r)
        self.assertEqual(set(v), {"6"})
        self.assertIn("accepted by gateway-1", v["6"][0])

    def test_a_torn_tail_is_reported_and_the_records_before_it_are_read(self):
        r = clean()
        r.log.append(accepted_record("acct-0", "torn", 2, "agent-1")[:-3])
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            ops, _, notes = check.read_gateway_log(os.path.join(d, "gateway-data"))
            self.assertEqual([o["opId"] for o in ops], ["a", "b", "c"])
            self.assertTrue(any("stops at byte" in n for n in notes), notes)


if __name__ == "__main__":
    unittest.main()
