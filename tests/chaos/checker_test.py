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


def text(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def accepted_record(account, op_id, token, instance, session=7):
    body = (b"\x01" + text(account) + text(op_id) + struct.pack("<Q", token) + text(instance) +
            struct.pack("<q", session) + text('{"chaos":1}') + struct.pack("<Q", token))
    return struct.pack("<II", len(body), zlib.crc32(body) & 0xFFFFFFFF) + body


class Run:
    """acct-0 led by agent-0 (seq 1) from 0 to 1000 ms, then by agent-1 (seq 2)."""

    def __init__(self):
        self.ops = []
        self.log = []
        self.observer = [
            [10, 0, "acct-0", True, 1, "agent-0", 7, 100],
            [1000, 0, "acct-0", False, -1, "", 0, 105],
            [1010, 0, "acct-0", True, 2, "agent-1", 8, 110],
        ]
        self.final = {"last_heal_ms": 1500, "accounts": {"acct-0": {"led_ms": 50}}}
        self.events = [{"index": 0, "kinds": "agent_kill", "start_ms": 900, "heal_ms": 1100,
                        "settled_ms": 1200, "reelect_ms": 100,
                        "faults": [{"kind": "agent_kill", "start_ms": 900, "heal_ms": 1100}]}]

        self.devices = {"count": 0}
        self.leases = []

    def with_device(self, leased_ms=300):
        """acct-0/dev-0, leased under seq 2 after the last heal."""
        self.devices = {"count": 1, "per_account": 1, "heartbeat_ms": 300, "timeout_ms": 900,
                        "renew_interval_ms": 400, "lease_ttl_ms": 1000, "backoff_max_ms": 1000}
        self.final["devices"] = {"acct-0/dev-0": {"leased_ms": leased_ms, "token": 2}}
        self.final["devices_not_leased"] = []

    def lease(self, asked, age, token, agent, counter=1):
        """The gateway's answer at asked..asked+2 ms: dev-0 renewed age ms before."""
        self.leases.append([asked, asked + 2, "acct-0", "dev-0", agent, token, counter, age])

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
                     "ended_ms": 2000, "devices": self.devices},
            "schedule": [], "final": self.final, "gateway_runs": [],
            "events": self.events,
            "observer_fields": ["t_ms", "server", "account", "present", "seq", "instance",
                                "session", "zxid"],
            "observer": self.observer,
            "ops_fields": ["invoked_ms", "completed_ms", "agent", "account", "op_id", "status",
                           "outcome", "token", "probe"],
            "ops": self.ops,
            "lease_fields": ["asked_ms", "answered_ms", "account", "device", "agent", "token",
                             "counter", "age_ms"],
            "leases": self.leases,
        }
        with open(os.path.join(directory, "history.json"), "w") as f:
            json.dump(history, f)


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
            _, _, _, _, violations, _, _ = check.check(d, slack_ms=50)
            return {k: v for k, v in violations.items() if v}

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
            _, _, _, _, violations, _, _ = check.check(d, slack_ms=50)
        self.assertEqual({k for k, v in violations.items() if v}, {"3"})
        self.assertIn("compacted", violations["3"][0])

    def test_the_negative_control_passes_only_on_a_fencing_violation(self):
        with tempfile.TemporaryDirectory() as d:
            r = clean()
            r.final["accounts"] = {}  # a liveness miss (check 5) alone
            r.write(d)
            self.assertEqual(check.main([d, "--expect-violations"]), 1)
        with tempfile.TemporaryDirectory() as d:
            r = Run()
            r.op("a", 100, 110, 0, 1)
            r.op("stale", 1300, 1310, 0, 1)
            r.op("c", 1400, 1410, 1, 2)
            r.write(d)
            self.assertEqual(check.main([d, "--slack-ms", "50", "--expect-violations"]), 0)

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

    def test_a_token_accepted_before_lagging_observers_saw_its_node_is_not_stale(self):
        r = clean()
        r.observer[2][0] = 3000  # the observers reconnected and saw seq 2 only at 3000 ms
        self.assertEqual(self.violations(r), {})
        r = clean()
        r.observer[2][0] = 9000  # far beyond any reconnect: no node carried that token then
        self.assertEqual(set(self.violations(r)), {"4"})

    def test_leases_renewed_by_each_leader_in_its_own_time_have_no_violation(self):
        r = clean()
        r.with_device()
        r.lease(500, 200, 1, "agent-0")   # renewed at 300 ms under seq 1
        r.lease(1990, 990, 1, "agent-0")  # renewed at 1000 ms: within the slack
        r.lease(1600, 100, 2, "agent-1")
        r.lease(3000, 1000, 2, "agent-1")  # at the TTL: renewed at 2000 ms or before
        self.assertEqual(self.violations(r), {})

    def test_a_lease_renewed_after_its_token_was_gone_violates_check_6(self):
        r = clean()
        r.with_device()
        r.lease(1400, 100, 1, "agent-0")  # renewed at 1300 ms: seq 1 gone at 1000 ms
        self.assertEqual(set(self.violations(r)), {"6"})

    def test_a_lease_under_a_token_renewed_by_another_instance_violates_check_6(self):
        r = clean()
        r.with_device()
        r.lease(1600, 100, 2, "agent-0")
        self.assertEqual(set(self.violations(r)), {"6"})

    def test_a_lease_taken_in_after_a_gateway_pause_may_have_been_sent_during_it(self):
        r = clean()
        r.with_device()
        r.pause_gateway(800, 1300)
        r.lease(1400, 100, 1, "agent-0")  # taken in at 1300 ms, sent before 1000 ms
        self.assertEqual(self.violations(r), {})

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
