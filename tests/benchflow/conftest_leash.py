"""pytest plugin (-p conftest_leash): benchflow's live egress-filter tests, run against `leash proxy`.

benchflow's fixtures (`stack`, `authority_stack`, `gateway_stack`) are left as written: they mint their certificates,
start their loopback origins, monkeypatch `_connect_upstream`/`_resolve` to say where each test name lives, then call
`proxy_mod.serve(port, Policy, CertStore, Log, upstream_ca=...)`. This plugin replaces only that `serve` with one that
starts `leash proxy` ($LEASH_BIN) on the same policy and hands back an object shaped like benchflow's server:

- policy: benchflow's `Policy` (blocked URL prefixes, blocked hosts) written as a leash blocklist with `inspect: all`
  (benchflow 0.7.11 inspects every external CONNECT);
- where names live: leash has no `_connect_upstream` to patch, so each test name a fixture routes gets a loopback
  address of its own (`--resolve NAME:127.0.0.2x`, in `allow_destinations`), where a relay on ports 80 and 443
  calls the fixture's (patched) `_connect_upstream(NAME, PORT)` at accept time and splices; a name the fixture's
  `_resolve` answers with a private address gets that address (`--resolve`), which leash must refuse;
- CA: leash's (`--ca-cert-out`) takes the place of benchflow's proxy CA in the fixture's `.crt` files, before the
  fixture builds its client context; `--upstream-ca` is the fixture's upstream CA;
- log: leash's JSONL audit log (`--log`), read back in benchflow's shape into the fixture's log path whenever a test
  reads that path: one line per `block` decision, `action: blocked`, `method`, `url`, and `rule` spelled as
  benchflow spells it (`url:HOST/PATH`, `host:HOST`, `private-address` for `internal-destination`, `ip-literal`);
- `process_request_thread` (wrapped by `authority_stack` to see the proxy let go of a connection) is called when
  leash closes a relayed upstream connection.

Tests that exercise benchflow's Python internals rather than the live filter are deselected and listed in
$LEASH_BF_NOTLIVE; every other test's outcome goes to $LEASH_BF_RESULTS as `PASS|FAIL|SKIP nodeid`.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

# The live tests: the ones that send requests through a running proxy. Everything else in these modules calls
# benchflow's functions directly (Policy.url_rule, certificate_material, the shell commands, mocked sandboxes).
LIVE = (
    "test_egress_denylist.py::TestProxy::",
    "test_egress_connect_authority.py::",
    "test_egress_model_gateway.py::test_only_controller_gateway_is_reachable",
)
# The names benchflow's fixtures route (their `_connect_upstream`/`_resolve` patches decide where each lives).
NAMES = ("paper.test", "other.test", "plain.test", "carrier.test", "internal.test", "mirror.test")
WAIT = 10.0  # seconds, every wait below


def _short(nodeid: str) -> str:
    return nodeid.split("tests/", 1)[-1]


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        (keep if any(_short(item.nodeid).startswith(p) for p in LIVE) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    path = os.environ.get("LEASH_BF_NOTLIVE")
    if path:
        with open(path, "w") as fh:
            fh.writelines(_short(i.nodeid) + "\n" for i in drop)


def pytest_runtest_logreport(report):
    path = os.environ.get("LEASH_BF_RESULTS")
    if not path:
        return
    word = None
    if report.when == "call" or (report.when == "setup" and not report.passed):
        word = "PASS" if report.passed else "SKIP" if report.skipped else "FAIL"
    elif report.when == "teardown" and report.failed:
        word = "FAIL"
    if word:
        with open(path, "a") as fh:
            fh.write(f"{word} {_short(report.nodeid)}\n")


# The log, read back in benchflow's shape whenever a test reads the fixture's log path.
_LOGS: dict[str, "LeashProxy"] = {}
_read_text, _exists = pathlib.Path.read_text, pathlib.Path.exists


def _synced(method):
    def wrapper(self, *args, **kwargs):
        proxy = _LOGS.get(str(self))
        if proxy is not None:
            proxy.sync_log()
        return method(self, *args, **kwargs)

    return wrapper


pathlib.Path.read_text = _synced(_read_text)
pathlib.Path.exists = _synced(_exists)


def _benchflow_rule(line: dict) -> str:
    reason, rule = line.get("reason"), line.get("rule")
    if reason == "rule" and rule:
        return ("url:" if "/" in rule else "host:") + rule
    return {"internal-destination": "private-address"}.get(reason, reason)


class _Relay:
    """A loopback listener at NAME's address: each connection goes where the fixture's _connect_upstream says."""

    def __init__(self, proxy_mod, name, addr, port, on_close):
        self.sock = socket.create_server((addr, port))
        self.sock.settimeout(0.2)
        self.proxy_mod, self.name, self.port, self.on_close = proxy_mod, name, port, on_close
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._splice, args=(client,), daemon=True).start()

    def _splice(self, client):
        try:
            upstream = self.proxy_mod._connect_upstream(self.name, self.port)
        except Exception:
            client.close()
            return
        open_ = {client: upstream, upstream: client}
        deadline = time.monotonic() + 60
        try:
            while open_ and time.monotonic() < deadline and not self.stop.is_set():
                ready, _, _ = select.select(list(open_), [], [], 0.1)
                for src in ready:
                    try:
                        data = src.recv(65536)
                    except OSError:
                        data = b""
                    dst = open_[src]
                    if data:
                        dst.sendall(data)
                    else:  # EOF one way: pass the half-close on
                        del open_[src]
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()
            self.on_close()

    def close(self):
        self.stop.set()
        self.sock.close()


class LeashProxy:
    """`leash proxy` started on benchflow's policy, with the attributes benchflow's fixtures use."""

    def __init__(self, proxy_mod, policy, certs, log, upstream_ca):
        self.stopped = threading.Event()
        self.relays = []
        self.bf_log = log.path
        cert_dir = pathlib.Path(certs.cert_dir)
        work = pathlib.Path(tempfile.mkdtemp(prefix="leash-bf-"))
        self.leash_log = work / "audit.jsonl"
        blocked = [h + ("" if p == "/" else p) for h, p in policy.prefixes] + sorted(policy.hosts)
        resolve, allowed = [], []
        patched = proxy_mod._connect_upstream is not _ORIGINAL["_connect_upstream"]
        for i, name in enumerate(NAMES):
            addresses = []
            if proxy_mod._resolve is not _ORIGINAL["_resolve"]:
                addresses = proxy_mod._resolve(name, 443)
            if addresses and not all(proxy_mod._upstream_allowed(a) for a in addresses):
                resolve.append(f"{name}:{addresses[0]}")  # private in the fixture: leash must refuse it
            elif patched:
                addr = f"127.0.0.{20 + i}"
                resolve.append(f"{name}:{addr}")
                allowed.append(f"{addr}/32")
                for port in (80, 443):
                    self.relays.append(_Relay(proxy_mod, name, addr, port, self._released))
        policy_file = work / "policy.yaml"
        policy_file.write_text(
            json.dumps(
                {
                    "network": {
                        "mode": "blocklist",
                        "blocked_urls": blocked,
                        "inspect": "all",
                        "allow_destinations": allowed,
                    }
                }
            )
        )
        ca = work / "leash-ca.pem"
        cmd = [os.environ["LEASH_BIN"], "proxy", "--policy", str(policy_file), "--listen", "127.0.0.1:0"]
        cmd += ["--log", str(self.leash_log), "--ca-cert-out", str(ca)]
        if upstream_ca:
            cmd += ["--upstream-ca", upstream_ca]
        for r in resolve:
            cmd += ["--resolve", r]
        self.stderr = open(work / "leash.stderr", "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], WAIT)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.shutdown()
            raise RuntimeError(f"leash proxy did not start: {line!r}, see {work / 'leash.stderr'}")
        host, port = line.split()[-1].rsplit(":", 1)
        self.server_address = (host, int(port))
        self.server_port = int(port)
        self._wait_healthz()
        # leash's CA in place of benchflow's proxy CA, in every certificate file of the fixture's directory.
        for d in {cert_dir, cert_dir.parent}:
            theirs = d / "proxy-ca.crt"
            if _exists(theirs):
                old = theirs.read_bytes()
                for crt in d.glob("*.crt"):
                    crt.write_bytes(crt.read_bytes().replace(old, ca.read_bytes()))
        if self.bf_log:
            _LOGS[str(pathlib.Path(self.bf_log))] = self

    def _wait_healthz(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + WAIT
        while True:
            try:
                with opener.open(f"http://127.0.0.1:{self.server_port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def _released(self):
        self.process_request_thread(None, None)

    def process_request_thread(self, request, client_address):
        pass

    def sync_log(self):
        lines = []
        if _exists(self.leash_log):
            for raw in _read_text(self.leash_log).splitlines():
                entry = json.loads(raw)
                if entry.get("decision") != "block":
                    continue
                if entry["method"] == "CONNECT":
                    url = f"{entry['host']}:{entry['port']}"
                else:
                    scheme = "https" if entry["port"] == 443 else "http"
                    url = f"{scheme}://{entry['host']}{entry.get('path') or ''}"
                out = {"action": "blocked", "method": entry["method"], "url": url, "rule": _benchflow_rule(entry)}
                lines.append(json.dumps(out, sort_keys=True) + "\n")
        path = pathlib.Path(self.bf_log)
        if lines:
            path.write_text("".join(lines))
        elif _exists(path):
            path.unlink()

    def serve_forever(self):
        self.stopped.wait()

    def shutdown(self):
        self.stopped.set()
        for relay in self.relays:
            relay.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)
        self.stderr.close()
        _LOGS.pop(str(pathlib.Path(self.bf_log or "")), None)

    def server_close(self):
        pass


_ORIGINAL: dict = {}


@pytest.fixture(autouse=True)
def _leash_serve(monkeypatch):
    from benchflow.sandbox import _egress_denylist_proxy as proxy_mod

    _ORIGINAL.setdefault("_connect_upstream", proxy_mod._connect_upstream)
    _ORIGINAL.setdefault("_resolve", proxy_mod._resolve)

    def serve(port, policy, certs, log, *, upstream_ca=None):
        return LeashProxy(proxy_mod, policy, certs, log, upstream_ca)

    monkeypatch.setattr(proxy_mod, "serve", serve)
