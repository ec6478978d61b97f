"""Judge one run of examples/vm/run.sh from the files it left in RUNDIR; prints one `PASS`/`FAIL` line per check,
then the timings (`vm: ...`), and exits 1 if any check failed. Usage: python3 verdict.py RUNDIR [ACCEL]
"""
import json
import os
import sys

GUEST = "169.254.100.2"

run = sys.argv[1]
accel = sys.argv[2] if len(sys.argv) > 2 else "?"


def read(name):
    try:
        with open(os.path.join(run, name)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


# serial.log lines are `SECONDS LINE`, SECONDS since QEMU started; results are `LEASH-VM CHECK WORDS...`.
results = {}
for line in read("serial.log").splitlines():
    stamp, _, text = line.partition(" ")
    if text.startswith("LEASH-VM "):
        words = text.split()[1:]
        key = words[0] if words[0] != "direct" else "direct " + words[1]
        results[key] = (float(stamp), words[1:])
config = dict(line.split("=", 1) for line in read("guest/leash/config").splitlines() if "=" in line)
audit = [json.loads(line) for line in read("audit.jsonl").splitlines() if line.strip()]
failed = 0


def check(name, ok, detail=""):
    global failed
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}".rstrip())


def words(key):
    return results.get(key, (0.0, []))[1]


def fetch(key, status, body):
    w = words(key)
    ok = len(w) >= 3 and w[0] == status and w[2].startswith("body=" + body)
    check(key, ok, " ".join(w))


def logged(decision, host, path=None):
    return [
        e for e in audit
        if e.get("decision") == decision and e.get("host") == host and (path is None or e.get("path") == path)
        and str(e.get("client", "")).startswith(GUEST + ":")
    ]


check("booted", "init" in results and "done" in results, "init and done lines on the console")
check("nic", words("nic")[:1] == ["eth0"], " ".join(words("nic")))
check("no-default-route", words("route") == ["none"], " ".join(words("route")))
check("ipv6-link-local-only", words("ipv6") == ["link-local-only"], " ".join(words("ipv6")))
fetch("allowed", "200", "origin_/vm")
fetch("refused", "403", "")
fetch("https", "200", "origin-tls_/vm")
w = words("https-origin-ca")
check("https-origin-ca", w[:2] == ["000", "curl=60"], " ".join(w) + " (leash's certificate, and the guest verifies)")
for target in filter(None, config.get("direct", "").split(",")):
    w = words("direct " + target)
    check("direct " + target, w[1:2] == ["failed"], " ".join(w[1:]))
check("host-unreached", read("sentinel.log") == "", "no connection reached the host's sentinel")
for name in ("nft.txt", "nft-after.txt"):
    text = read(name)
    ok = "table inet leash_vm" in text and 'iifname "tap0"' in text and 'oifname "tap0"' in text
    check("firewall " + name, ok, "table inet leash_vm drops forwarding in and out of tap0")
check("audit allowed", bool(logged("allow", "allowed.test", "/vm")), f"allow allowed.test /vm from {GUEST}")
check("audit refused", bool(logged("block", "refused.test")), f"block refused.test from {GUEST}")
check("audit https", bool(logged("inspect", "docs.test")) and bool(logged("allow", "docs.test", "/vm")),
      f"inspect docs.test, allow /vm inside, from {GUEST}")

init = results.get("init", (0.0, ["?"]))
first = results.get("allowed", (0.0, []))
print(f"vm: accel {accel}, machine pc; QEMU start to /init {init[0]:.2f} s (guest uptime {init[1][0]} s), "
      f"to first allowed fetch {first[0]:.2f} s, to power-off {results.get('done', (0.0,))[0]:.2f} s")
print(f"vm: {failed} check(s) failed" if failed else "vm: every check passed")
sys.exit(1 if failed else 0)
