#!/usr/bin/env python3
"""The chaos schedule is a function of the seed: the same seed gives the same faults, targets and
durations; faults that run together keep the ensemble's quorum and touch each agent and the
gateway at most once. Usage: schedule_test.py PATH/TO/chaos-runner"""
import json
import subprocess
import sys
import unittest

RUNNER = None


def schedule(seed, events=500, *extra):
    out = subprocess.run([RUNNER, "--print-schedule", "--seed", str(seed), "--events",
                          str(events), *extra], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


class ScheduleTest(unittest.TestCase):
    def test_the_same_seed_replays_the_same_schedule_and_another_seed_does_not(self):
        self.assertEqual(schedule(7), schedule(7))
        self.assertNotEqual(schedule(7), schedule(8))

    def test_every_kind_occurs_and_several_faults_sometimes_run_at_once(self):
        s = schedule(7)
        kinds = {f["kind"] for e in s for f in e["faults"]}
        self.assertEqual(kinds, {"agent_kill", "agent_pause", "agent_partition",
                                 "zk_kill_agent_server", "zk_kill_leader", "gateway_kill",
                                 "gateway_pause", "stale_delivery"})
        self.assertTrue(any(len(e["faults"]) > 1 for e in s))

    def test_the_gateway_partitions_are_drawn_only_when_asked_for(self):
        plain = schedule(7)
        with_partitions = {f["kind"] for e in schedule(7, 500, "--gateway-partitions")
                           for f in e["faults"]}
        partitions = {"agent_gateway_partition", "gateway_zk_partition"}
        self.assertEqual(with_partitions & partitions, partitions)
        self.assertFalse({f["kind"] for e in plain for f in e["faults"]} & partitions)
        for e in schedule(7, 500, "--gateway-partitions"):
            for f in e["faults"]:
                if f["kind"] == "agent_gateway_partition":
                    self.assertGreaterEqual(f["agent"], 0, e)

    def test_clock_steps_are_drawn_only_when_asked_for_and_step_either_way(self):
        steps = [f for e in schedule(7, 500, "--clock-steps") for f in e["faults"]
                 if f["kind"].endswith("_clock_step")]
        self.assertEqual({f["kind"] for f in steps}, {"agent_clock_step", "gateway_clock_step"})
        self.assertTrue(all(60 <= abs(f["step_s"]) <= 7200 for f in steps))
        self.assertTrue(any(f["step_s"] < 0 for f in steps) and any(f["step_s"] > 0 for f in steps))
        self.assertFalse([f for e in schedule(7) for f in e["faults"] if "step_s" in f])

    def test_disk_faults_are_drawn_only_when_asked_for(self):
        full = [f for e in schedule(7, 500, "--disk-faults") for f in e["faults"]
                if f["kind"] == "gateway_disk_full"]
        self.assertTrue(full)
        self.assertTrue(all(500 <= f["duration_ms"] <= 3000 for f in full))
        self.assertFalse([f for e in schedule(7) for f in e["faults"]
                          if f["kind"] == "gateway_disk_full"])

    def test_device_storms_are_drawn_only_when_asked_for_and_name_an_agent(self):
        storms = [f for e in schedule(7, 500, "--device-storms") for f in e["faults"]
                  if f["kind"] == "device_storm"]
        self.assertTrue(storms)
        self.assertTrue(all(f["agent"] >= 0 for f in storms))
        self.assertFalse([f for e in schedule(7) for f in e["faults"]
                          if f["kind"] == "device_storm"])

    def test_faults_run_together_keep_a_quorum_and_one_fault_per_agent_and_gateway(self):
        for e in (schedule(7) + schedule(99) + schedule(7, 500, "--gateway-partitions") +
                  schedule(7, 500, "--gateway-partitions", "--clock-steps", "--disk-faults",
                           "--device-storms")):
            kinds = [f["kind"] for f in e["faults"]]
            self.assertLessEqual(sum(k.startswith("zk_") for k in kinds), 1, e)
            self.assertLessEqual(sum(k.startswith("gateway_") for k in kinds), 1, e)
            agents = [f["agent"] for f in e["faults"] if f["agent"] >= 0]
            self.assertEqual(len(agents), len(set(agents)), e)
            if "stale_delivery" in kinds:
                self.assertEqual(len(kinds), 1, e)

    def test_a_cluster_draws_no_fault_on_an_agents_link_to_one_gateway(self):
        plain = schedule(7, 500, "--gateway-partitions")
        cluster = schedule(7, 500, "--gateway-partitions", "--gateways", "3")
        kinds = {f["kind"] for e in cluster for f in e["faults"]}
        self.assertFalse(kinds & {"stale_delivery", "agent_gateway_partition"})
        self.assertTrue({"gateway_kill", "gateway_pause", "gateway_zk_partition"} <= kinds)
        self.assertEqual(schedule(7, 500, "--gateway-partitions", "--gateways", "1"), plain)
        for flag in ("--break-fencing", "--disk-faults"):
            bad = subprocess.run([RUNNER, "--gateways", "2", flag, "--out", "/nonexistent"],
                                 capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn(flag, bad.stderr)

    def test_an_agent_pause_always_outlasts_the_session_timeout(self):
        for e in schedule(7, 500, "--session-timeout-ms", "2000"):
            for f in e["faults"]:
                if f["kind"] == "agent_pause":
                    self.assertGreater(f["duration_ms"], 2000)

    def test_the_negative_control_is_stale_deliveries_only(self):
        s = schedule(1, 5, "--break-fencing")
        self.assertEqual({f["kind"] for e in s for f in e["faults"]}, {"stale_delivery"})

    def test_a_bad_flag_is_refused_naming_it(self):
        bad = subprocess.run([RUNNER, "--events", "0", "--out", "/nonexistent"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--events", bad.stderr)


if __name__ == "__main__":
    RUNNER = sys.argv.pop(1)
    unittest.main()
