#!/usr/bin/env python3
"""Write what benchflow puts in a sandbox for network_mode='denylist', made by benchflow's own code.

    material.py OUTDIR [--blocked-url URL]... [--blocked-host HOST]...

Runs `start_egress_denylist` from egress_denylist.py (benchflow 0.7.11, unmodified, from its wheel in
$BENCHFLOW_SRC)
against a stand-in for a sandbox: every file benchflow uploads lands under OUTDIR instead of
/opt/benchflow-egress (policy.json, proxy.py, ca.crt, ca.key, and certs/<host>.pem, the leaves benchflow mints in
advance for the hosts that carry URL rules), and none of the shell commands it sends is run. The root shell command
it would run next (it installs ca.crt in the image's trust store and starts the proxy on 127.0.0.1:18628) is kept in
OUTDIR/setup.sh for reference; the caller starts the proxy itself, with the same flags on a port of its own.

The entries must already be what benchflow's SandboxConfig makes of a task's `blocked_urls` / `blocked_hosts`
(task/config.py normalizes URLs to `https://host/path` without a trailing slash and hosts to lowercase names).

egress_denylist.py imports two other benchflow modules: `_egress_denylist_proxy` is the one beside it;
from `lockdown` it takes three names used only to talk to a real sandbox, stubbed here.
"""
import argparse
import asyncio
import importlib.util
import os
import shutil
import sys
import types

# Where benchflow's own files were unpacked from its wheel (benchflow.sh fetch); nothing of benchflow is kept in
# this repository.
HERE = os.environ.get("BENCHFLOW_SRC") or os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_benchflow():
    for pkg in ("benchflow", "benchflow.sandbox"):
        m = types.ModuleType(pkg)
        m.__path__ = []
        sys.modules[pkg] = m
    lockdown = types.ModuleType("benchflow.sandbox.lockdown")
    lockdown.EGRESS_DENYLIST_ENV = "BENCHFLOW_EGRESS_DENYLIST"   # benchflow/sandbox/lockdown.py
    lockdown._exec_return_code = lambda result: getattr(result, "return_code", 0)
    lockdown._exec_failure_detail = lambda result: ""
    sys.modules["benchflow.sandbox.lockdown"] = lockdown
    _load("benchflow.sandbox._egress_denylist_proxy", os.path.join(HERE, "_egress_denylist_proxy.py"))
    return _load("benchflow.sandbox.egress_denylist", os.path.join(HERE, "egress_denylist.py"))


class _Result:
    return_code = 0
    stdout = ""
    stderr = ""


class FakeSandbox:
    """Just enough of benchflow's sandbox environment for start_egress_denylist: uploads are stored under `out`,
    commands are recorded and reported as successful."""

    def __init__(self, out, runtime_dir):
        self.out = out
        self.runtime_dir = runtime_dir.rstrip("/") + "/"
        self.commands = []

    async def exec(self, command, user=None, timeout_sec=None):
        self.commands.append(command)
        return _Result()

    async def upload_file(self, local, remote, mode=None):
        remote = str(remote)
        if not remote.startswith(self.runtime_dir):
            raise ValueError(f"unexpected upload target {remote}")
        dest = os.path.join(self.out, remote[len(self.runtime_dir):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(local, dest)
        os.chmod(dest, int(mode or "600", 8))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--blocked-url", action="append", default=[])
    ap.add_argument("--blocked-host", action="append", default=[])
    a = ap.parse_args(argv)
    bf = load_benchflow()
    os.makedirs(os.path.join(a.out, "certs"), exist_ok=True)
    os.chmod(a.out, 0o700)
    box = FakeSandbox(a.out, bf.RUNTIME_DIR)
    deny = bf.EgressDenylist(tuple(a.blocked_url), tuple(a.blocked_host))
    asyncio.run(bf.start_egress_denylist(box, "agent", deny, timeout_sec=5))
    # the command that installs the CA and starts the proxy (the third one it sends)
    setup = [c for c in box.commands if "nohup" in c]
    with open(os.path.join(a.out, "setup.sh"), "w") as f:
        f.write((setup[0] if setup else "") + "\n")
    missing = [n for n in ("policy.json", "proxy.py", "ca.crt", "ca.key") if not os.path.exists(os.path.join(a.out, n))]
    if missing:
        sys.exit(f"benchflow uploaded no {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
