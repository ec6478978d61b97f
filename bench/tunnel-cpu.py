#!/usr/bin/env python3
"""CPU per GB of a download through CONNECT tunnels, several proxies alternating (issue 28).

    tunnel-cpu.py --url https://allowed.bench.test/big --cacert CA --rounds N NAME=PID@PROXY_URL ... [direct]

Run inside a namespace held by `bench/run.sh --hold CAND` (nsenter -t PID -n -m), where nginx serves the 1 GiB body.
Each round downloads the body once through every proxy in turn (`curl --http1.1 -x PROXY`, output discarded) and
takes, per download: the proxy's CPU (utime + stime of its process tree, /proc), curl's (rusage of the child), nginx's
(its processes, /proc) and the whole machine's (non-idle jiffies of /proc/stat: other work on the machine shows up
there too). Prints one line per download and the medians per proxy, all in CPU-s per GB (10^9 bytes).
"""
import argparse
import os
import resource
import statistics
import subprocess
import time

CLK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid):
    """utime + stime (s) of `pid` and its descendants."""
    total, todo = 0, [int(pid)]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / CLK


def nginx_cpu():
    total = 0.0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/comm") as f:
                    if f.read().strip() == "nginx":
                        total += tree_cpu(p)
            except FileNotFoundError:
                pass
    return total


def machine_cpu():
    """(non-idle, softirq) seconds of the whole machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / CLK, v[6] / CLK


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def download(name, pid, proxy, a):
    before = (tree_cpu(pid) if pid else 0.0, child_cpu(), nginx_cpu(), *machine_cpu(), time.monotonic())
    cmd = ["curl", "-s", "--http1.1", "--cacert", a.cacert, "-o", "/dev/null", "-w", "%{size_download}", a.url]
    if proxy:
        cmd[1:1] = ["-x", proxy]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    after = (tree_cpu(pid) if pid else 0.0, child_cpu(), nginx_cpu(), *machine_cpu(), time.monotonic())
    size = int(out.stdout or 0)
    if size < 10**8:
        raise SystemExit(f"{name}: only {size} bytes: {out.stderr}")
    gb = size / 1e9
    d = [(y - x) / gb for x, y in zip(before, after)]
    row = {"proxy": d[0], "curl": d[1], "nginx": d[2], "machine": d[3], "softirq": d[4], "MB/s": gb * 1e3 / (d[5] * gb)}
    row["sum"] = row["proxy"] + row["curl"] + row["nginx"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="https://allowed.bench.test/big")
    ap.add_argument("--cacert", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("proxies", nargs="+", help="NAME=PID@URL, or `direct`")
    a = ap.parse_args()
    targets = []
    for p in a.proxies:
        if p == "direct":
            targets.append(("direct", None, None))
        else:
            name, rest = p.split("=", 1)
            pid, url = rest.split("@", 1)
            targets.append((name, pid, url))
    cols = ["MB/s", "proxy", "curl", "nginx", "sum", "machine", "softirq"]
    rows = {n: [] for n, _, _ in targets}
    print("round proxy " + " ".join(cols), flush=True)
    for r in range(a.rounds):
        # Rotate the order each round so no proxy always follows the same one.
        for name, pid, url in targets[r % len(targets):] + targets[: r % len(targets)]:
            row = download(name, pid, url, a)
            rows[name].append(row)
            print(r, name, " ".join(f"{row[c]:.3f}" if c != "MB/s" else f"{row[c]:.0f}" for c in cols), flush=True)
    print("\nmedians (CPU-s/GB; MB/s):\n| proxy | " + " | ".join(cols) + " |\n" + "|---" * (len(cols) + 1) + "|")
    for name, _, _ in targets:
        med = [statistics.median(x[c] for x in rows[name]) for c in cols]
        print(f"| {name} | " + " | ".join(f"{m:.0f}" if c == "MB/s" else f"{m:.2f}" for c, m in zip(cols, med)) + " |")


if __name__ == "__main__":
    main()
