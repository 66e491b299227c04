#!/usr/bin/env python3
"""The chaos checker on small hand-made histories: a clean one passes, and each kind of
violation is reported by the check that guards it (and only a broken history fails)."""
import json
import os
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


class Run:
    """acct-0 led by agent-0 (seq 1, created at 5 ms) until 1000 ms, then by agent-1 (seq 2,
    created at 1005 ms); the observers see each node 5 ms after its creation."""

    def __init__(self):
        self.ops = []
        self.log = []
        self.observer = [
            [10, 0, "acct-0", True, 1, "agent-0", 7, 100, 5],
            [1000, 0, "acct-0", False, -1, "", 0, 105, -1],
            [1010, 0, "acct-0", True, 2, "agent-1", 8, 110, 1005],
        ]
        self.final = {"last_heal_ms": 1500, "accounts": {"acct-0": {"led_ms": 50}}}
        self.events = [{"index": 0, "kinds": "agent_kill", "start_ms": 900, "heal_ms": 1100,
                        "settled_ms": 1200, "reelect_ms": 100,
                        "faults": [{"kind": "agent_kill", "start_ms": 900, "heal_ms": 1100}]}]

        self.devices = {"count": 0}
        self.journal = []
        self.bad_answers = {"count": 0, "first": []}

    def with_device(self, leased_ms=300):
        """acct-0/dev-0, leased under seq 2 after the last heal."""
        self.devices = {"count": 1, "per_account": 1, "heartbeat_ms": 300, "timeout_ms": 900,
                        "renew_interval_ms": 400, "lease_ttl_ms": 1000, "backoff_max_ms": 1000}
        self.final["devices"] = {"acct-0/dev-0": {"leased_ms": leased_ms, "token": 2}}
        self.final["devices_not_leased"] = []

    def lease_write(self, at, token, agent, result="accepted", op="renew", session=None):
        """The gateway's journal line: dev-0's write decided at at..at+1 ms. The observer saw
        agent-0 on session 7 and agent-1 on session 8."""
        self.journal.append({
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
           instance=None, status=None, session=None):
        self.ops.append([invoked, completed, agent, "acct-0", op_id,
                         status if status is not None else (200 if outcome == "ok" else 409),
                         outcome, token, False])
        if logged:
            # The observer saw agent-0 on session 7 and agent-1 on session 8.
            self.log.append(accepted_record("acct-0", op_id, token,
                                            instance or "agent-%d" % agent,
                                            session if session is not None else 7 + agent))

    def write(self, directory):
        os.makedirs(os.path.join(directory, "gateway-data"))
        with open(os.path.join(directory, "gateway-data", "log.%020d" % 0), "wb") as f:
            f.write(b"".join(self.log))
        history = {
            "meta": {"seed": 1, "events": 1, "accounts": ["acct-0"], "agents": ["agent-0",
                                                                                "agent-1"],
                     "session_timeout_ms": 1500, "break_fencing": False, "lock_delay_ms": 0,
                     "gateway_mode": "zookeeper", "gateway_data": "gateway-data",
                     "ended_ms": 2000, "devices": self.devices,
                     "lease_journal": "lease-journal.jsonl", "t0_steady_ms": T0_STEADY_MS},
            "schedule": [], "final": self.final, "gateway_runs": [],
            "bad_gateway_answers": self.bad_answers,
            "events": self.events,
            "observer_fields": ["t_ms", "server", "account", "present", "seq", "instance",
                                "session", "zxid", "created_ms"],
            "observer": self.observer,
            "ops_fields": ["invoked_ms", "completed_ms", "agent", "account", "op_id", "status",
                           "outcome", "token", "probe"],
            "ops": self.ops,
            "lease_fields": ["asked_ms", "answered_ms", "account", "device", "agent", "token",
                             "counter", "age_ms"],
            "leases": [],
        }
        with open(os.path.join(directory, "history.json"), "w") as f:
            json.dump(history, f)
        with open(os.path.join(directory, "lease-journal.jsonl"), "w") as f:
            f.write("".join(json.dumps(e) + "\n" for e in self.journal))


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
        r.op("lost", 1300, 1310, 1, 2, logged=False)
        with tempfile.TemporaryDirectory() as d:
            r.write(d)
            open(os.path.join(d, "gateway-data", "snapshot"), "wb").close()
            _, _, _, _, violations, _, _ = check.check(d)
        self.assertEqual({k for k, v in violations.items() if v}, {"3"})
        self.assertIn("compacted", violations["3"][0])

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
        r.observer[2][0] = 3000  # the observers reconnected and saw seq 2 only at 3000 ms
        self.assertEqual(self.violations(r), {})

    def test_a_token_accepted_before_its_node_was_created_violates_check_4(self):
        r = clean()
        # Seq 2 created at 1200 ms (seen at 1205): op c was acknowledged at 1110 ms. The early
        # side once had 5 s of extra slack and let this pass.
        r.observer[2][0], r.observer[2][8] = 1205, 1200
        self.assertEqual(set(self.violations(r)), {"4"})
        r.observer[2][8] = 1110 + check.CLOCK_ROUNDING_MS  # within the clock's rounding
        self.assertEqual(self.violations(r), {})

    def test_past_a_nodes_end_the_observers_largest_lag_is_the_only_slack(self):
        def stale_at(invoked, lag):
            r = clean()
            r.observer[2][0] = 1005 + lag  # seq 2 seen `lag` ms after its creation
            r.log.insert(2, accepted_record("acct-0", "stale", 1, "agent-0"))
            r.ops.append([invoked, 3000, 0, "acct-0", "stale", 0, "timeout", -1, False])
            return r
        # seq 1 was seen gone at 1000 ms; op c (logged next) was invoked at 1100 ms.
        self.assertEqual(self.violations(stale_at(1090, lag=100)), {})
        self.assertEqual(set(self.violations(stale_at(1090, lag=80))), {"4"})
        figures = self.figures(stale_at(1090, lag=100))
        self.assertEqual(figures["observer_lag_ms"],
                         {"count": 2, "p50": 100, "p99": 100, "max": 100})

    def test_an_observer_sample_without_a_creation_time_is_bad_data(self):
        r = clean()
        del r.observer[0][8]
        with self.assertRaises(SystemExit) as raised:
            self.violations(r)
        self.assertIn("created_ms", str(raised.exception))

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
        r.observer[2][0], r.observer[2][8] = 1605, 1600
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
