"""Soak (issue 5, item 7): MEMPROVE_SOAK_CALLS tool calls (10,000 in CI) in one server
process, against the built .pyz and the reference daemon.  Resident memory, open file
descriptors and threads are read from /proc after a warm-up of 1,000 calls, whatever the
count (a shorter one measured the allocator still settling: 0.8 to 1.0 MiB after 100
calls under 3.15, with the same code), and at every tenth of the run; at the end there
must be no growth beyond noise, no leaked descriptor and no leaked thread.  The figures
are printed and reported.
"""

import time

from harness import SAFETY_TIMEOUT
from hardening_support import (SOAK_CALLS, needs_proc, outcome_of, proc_stats, report)


import ledgerd  # noqa: E402

WINDOW = 16                       # calls in flight at once
WARM_UP = 1000                    # calls before the first measurement
RSS_NOISE_KIB = 1024              # growth allowed between the warm-up and the end

MIX = [("context", {}, "ok"), ("context", {}, "ok"), ("tasks", {}, "ok"), ("context", {}, "ok"),
       ("claims", {"numbers": [1, 2]}, "ok"), ("context", {}, "ok"),
       ("pack", {"budget": 1}, "invalid_params"), ("ledger_verify", {}, "ok"),
       ("context", {}, "ok"), ("checkpoint", {"facts": [{"text": "x", "runs": ["r99"]}]},
                               "run_label_unknown")]


def run_calls(server, first, count, era_every=2):
    """Pipelined calls first..first+count-1, WINDOW at a time; every outcome checked."""
    pending = []
    for n in range(first, first + count):
        tool, args, expected = MIX[n % len(MIX)]
        era = "modern" if n % era_every == 0 else "legacy"
        server.send(server.request_message("tools/call", server.call_params(tool, args, era=era),
                                           id=n))
        pending.append((n, era, expected))
        if len(pending) == WINDOW or n == first + count - 1:
            for request_id, era, expected in pending:
                code, value = outcome_of(server.response(request_id, timeout=SAFETY_TIMEOUT), era)
                assert code == expected, (request_id, value)
            pending = []


def test_soak(hserve, config, daemon, workspace):
    needs_proc()
    server = hserve(config=config, timeout=10)
    server.initialize()
    code, begun = outcome_of(server.call("begin", {"new_task": "Soak"}, id="begin"))
    assert code == "ok", begun
    ledgerd.memprove_run(daemon.url, config.token, str(workspace), begun["session_id"], "pytest", 0)
    assert outcome_of(server.call("checkpoint", {"facts": [{"text": "Soak fact."}],
                                                  "next_action": "Soak on."}, id="cp"))[0] == "ok"
    pid = server.proc.pid
    warm_up, total = WARM_UP, WARM_UP + SOAK_CALLS
    run_calls(server, 0, warm_up)
    before = proc_stats(pid)
    samples = [before["rss_kib"]]
    started = time.monotonic()
    done, step = warm_up, max(1, SOAK_CALLS // 10)
    while done < total:
        count = min(step, total - done)
        run_calls(server, done, count)
        done += count
        daemon.clear_ops()
        samples.append(proc_stats(pid)["rss_kib"])
    seconds = time.monotonic() - started
    after = proc_stats(pid)
    assert server.request("ping", id="still-here")["result"] == {}
    assert server.close() == 0
    growth = after["rss_kib"] - before["rss_kib"]
    second_half = samples[-1] - samples[len(samples) // 2]
    report("soak", calls=SOAK_CALLS, seconds=round(seconds, 1),
           calls_per_second=round(SOAK_CALLS / seconds),
           rss_kib_before=before["rss_kib"], rss_kib_after=after["rss_kib"],
           rss_growth_kib=growth, rss_samples_kib=samples, fds_before=before["fds"],
           fds_after=after["fds"], threads_before=before["threads"],
           threads_after=after["threads"])
    assert after["fds"] == before["fds"], "file descriptors leaked: %r -> %r" % (before, after)
    assert after["threads"] <= before["threads"], "threads leaked: %r -> %r" % (before, after)
    assert growth <= RSS_NOISE_KIB and second_half <= RSS_NOISE_KIB // 2, (
        "memory grows: %d KiB over the run, samples %r" % (growth, samples))
