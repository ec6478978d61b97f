#!/usr/bin/env python3
"""Start-up of two leash builds against `unshare -rn true`, interleaved so that drift hits all three alike.

    bench/startup-ab.py [--fifo] OLD_LEASH NEW_LEASH [RUNS]

With --fifo the driver (and so every command it starts) runs under SCHED_FIFO: on two cores shared with compilers
and tests, a woken process otherwise waits for its turn, and each of the run's hand-overs (leash, its init, the
command) adds that wait; the figures then measure the load more than the start-up. Needs root (or CAP_SYS_NICE).

Each round runs the three commands in a rotated order with posix_spawn and waits for each; the medians over RUNS
rounds (after 5 warm-up rounds) are printed with their ratio to unshare. leash runs as the benchmark harness runs it:
an allowlist policy and an --upstream-ca (both written to a temporary directory here), each build from a copy made
there at the start (see fresh_copy).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WARMUP = 5


def fresh_copy(exe, d, name):
    """A copy of `exe` written just now. The same bytes start at different speeds depending on how the page cache
    holds the file: measured here, a binary copied an hour earlier started 0.5-0.6 ms slower than a fresh copy of
    itself (more page faults, the fault-around path walking small folios). Both builds are copied, so both start
    from the same state."""
    path = os.path.join(d, name)
    shutil.copyfile(exe, path)
    os.chmod(path, 0o755)
    return path


def main():
    args = sys.argv[1:]
    if args and args[0] == "--fifo":
        args = args[1:]
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
    old, new = args[0], args[1]
    runs = int(args[2]) if len(args) > 2 else 150
    with tempfile.TemporaryDirectory() as d:
        policy, ca = os.path.join(d, "policy.yaml"), os.path.join(d, "ca.pem")
        with open(policy, "w") as f:
            f.write("network:\n  mode: allowlist\n  allowed_hosts: [allowed.bench.test]\n")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", os.path.join(d, "ca.key"), "-out", ca, "-days", "1", "-subj", "/CN=ab"],
                       check=True, capture_output=True)
        leash = lambda exe: [exe, "run", "--policy", policy, "--upstream-ca", ca, "--", "true"]
        old, new = fresh_copy(old, d, "old"), fresh_copy(new, d, "new")
        cmds = {"unshare": ["/usr/bin/unshare", "-rn", "true"], "old": leash(old), "new": leash(new)}
        times = {k: [] for k in cmds}
        quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_WRONLY, 0) for fd in (1, 2)]
        names = list(cmds)
        for i in range(runs + WARMUP):
            for k in names[i % 3:] + names[:i % 3]:
                start = time.perf_counter()
                pid = os.posix_spawn(cmds[k][0], cmds[k], dict(os.environ), file_actions=quiet)
                os.waitpid(pid, 0)
                if i >= WARMUP:
                    times[k].append((time.perf_counter() - start) * 1e3)
    m = {k: statistics.median(v) for k, v in times.items()}
    print(f"{runs} rounds, medians: unshare {m['unshare']:.2f} ms, old {m['old']:.2f} ms "
          f"({m['old'] / m['unshare']:.2f}x), new {m['new']:.2f} ms ({m['new'] / m['unshare']:.2f}x)")


if __name__ == "__main__":
    main()
