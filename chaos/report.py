"""The human side of a chaos run's check: report.md (the checks, the first violations of each,
the figures) and timeline.svg (who held `active` per account over time, the fault windows, the
violations). Python 3 standard library only; chaos/check.py decides, this module only renders.
"""
import os

# The gateway's fencing refusals, marked on the timeline.
FENCING_REFUSALS = {"stale_token", "not_current_leader", "account_fenced"}


CHECK_TITLES = {
    "1": "tokens accepted per account never decrease in log order; each token is one instance's",
    "2": "no operation accepted with a token lower than one already acknowledged",
    "3": "every acknowledged operation is in a gateway log, at most once per log (in two logs "
         "only with one token); nothing refused is",
    "4": "every accepted token was the account's active seq at acceptance (ZooKeeper's log)",
    "5": "after the last heal every account is led again in time and answers",
    "6": "every lease write accepted was under its account's active seq, by its holder",
    "7": "after the last heal every device is leased under its account's leader in time",
}


def write_report(out_dir, history, violations, figures):
    meta = history["meta"]
    lines = ["# Chaos run, seed %d" % meta["seed"], ""]
    total = sum(len(v) for v in violations.values())
    lines.append("**%s** — %d events, %d accounts, %d agents, session timeout %d ms, gateway "
                 "%s%s." % ("PASS: no violation" if total == 0 else "FAIL: %d violations" % total,
                            figures["events"], len(meta["accounts"]), len(meta["agents"]),
                            meta["session_timeout_ms"], meta["gateway_mode"],
                            ", FENCING BROKEN (negative control)" if meta["break_fencing"] else ""))
    lines += ["", "Replay: `scripts/chaos --events %d --seed %d --accounts %d --agents %d%s%s "
              "--out DIR`" % (meta["events"], meta["seed"], len(meta["accounts"]),
                              len(meta["agents"]), " --break-fencing" if meta["break_fencing"]
                              else "",
                              " --duration-s %d" % meta["duration_s"] if meta.get("duration_s")
                              else ""), ""]
    lines += ["## Checks", "", "| # | property | violations |", "| --- | --- | ---: |"]
    for k, title in CHECK_TITLES.items():
        lines.append("| %s | %s | %d |" % (k, title, len(violations.get(k, []))))
    lag = figures["observer_lag_ms"]
    lines += ["", "Checks 1, 4 and 6 read every active node's life from ZooKeeper's transaction "
              "logs (%d nodes, %d of them never read by the observers). A write may not precede "
              "its node's creation; past its end, the only slack is the observers' largest lag. "
              "Observer lag (first read after creation) over %s: %s." % (
                  figures["active_nodes"], figures["active_nodes_unseen"],
                  "%d nodes" % lag["count"] if lag else "no node",
                  "p50 %d ms, p99 %d ms, max %d ms" % (lag["p50"], lag["p99"], lag["max"])
                  if lag else "-"), ""]
    lines += ["Faults not carried out as intended: %d%s." % (
        len(figures["not_done"]), "".join("; event %d %s: %s" % n for n in figures["not_done"])),
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
        v = per_kind.get(k, {})  # a run that failed before its first event has no operations
        reasons = ", ".join("%s %d" % r for r in sorted(figures["refused_reasons"].get(k, {})
                                                         .items()))
        lines.append("| %s | %d | %d | %d | %d | %s |" % (
            "**all**" if k == "all" else k.replace("kind:", ""), v.get("invoked", 0), v.get("acknowledged", 0),
            v.get("refused", 0), v.get("indeterminate", 0), reasons))
    lines += ["", "Indeterminate by cause: " + (", ".join(
        "%s %d" % r for r in sorted(figures["indeterminate_reasons"].items())) or "none") +
        ". Operations in the gateway log: %d." % figures["logged_ops"], ""]
    if len(figures.get("gateways", [])) > 1:
        lines += ["Gateways: %s; operations in each log: %s; in two logs with the same token (a "
                  "retry at the next owner after an owner's death): %d." % (
                      ", ".join(figures["gateways"]),
                      ", ".join("%s %d" % kv for kv in figures["logged_ops_by_gateway"].items()),
                      figures["ops_in_several_logs"]), ""]
    lines += ["Stale deliveries: %d, with %d operations sent into the held link (not refused by "
              "the agent's gate first); %d of them were accepted when delivered late." %
              (figures["stale_deliveries"], figures.get("held_ops", 0),
               figures.get("held_ops_accepted", 0)), ""]
    devices = meta.get("devices")
    if isinstance(devices, dict) and devices.get("count"):
        leased = [d["leased_ms"] for d in history.get("final", {}).get("devices", {}).values()]
        lines += ["Devices: %d (%d per account; heartbeat %d ms, timeout %d ms, lease TTL %d ms), "
                  "%d lease samples read from the gateway; after the last heal the last device "
                  "was leased under its leader after %s ms. Lease writes in the gateway's "
                  "journal (check 6 judges the accepted ones): %s." %
                  (devices["count"], devices["per_account"], devices["heartbeat_ms"],
                   devices["timeout_ms"], devices["lease_ttl_ms"], devices.get("lease_samples", 0),
                   max(leased) if leased else "-",
                   ", ".join("%s %d" % w for w in figures["lease_writes"].items()) or "none"),
                  ""]
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
    "agent_gateway_partition": "#92c5de", "gateway_zk_partition": "#9970ab",
    "agent_clock_step": "#dfc27d", "gateway_clock_step": "#bf812d",
    "gateway_disk_full": "#878787", "device_storm": "#e08214",
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
            start, stop = n["created"], min(n["gone"], end)
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
