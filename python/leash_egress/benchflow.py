"""benchflow's egress filter, with leash doing the filtering: a drop-in for ``benchflow.sandbox.egress_denylist``
(benchflow 0.7.11).

The same names, signatures, sandbox paths and agent environment, so a harness switches with one import line::

    from leash_egress.benchflow import EgressDenylist, start_egress_denylist, stop_egress_denylist

``start_egress_denylist`` uploads the ``leash`` binary and the task's denylist (written as a benchflow
``[sandbox]`` table and read by ``leash proxy --task``, so ``blocked_urls`` mean what they mean to ``leash check
--task``) into benchflow's runtime directory, starts it as root on benchflow's port, puts its CA where benchflow
puts its own, and waits until ``/healthz`` answers. ``stop_egress_denylist`` writes the refusals into the
rollout's ``trajectory/egress_denylist.jsonl`` in benchflow's shape (``action``, ``method``, ``url``, ``rule``),
and leash's whole audit log beside it (``leash_audit.jsonl``). benchflow's uid firewall (``lockdown``), which keeps
the agent's uid to the loopback, is benchflow's and stays as it is.

The sandbox is benchflow's ``env`` (``await env.exec(cmd, user=, timeout_sec=)``, ``upload_file``,
``download_file``); the work runs in a worker thread whose calls go back to the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import shlex
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import LeashError
from .policy import Policy
from .proxy import Proxy, read_audit_log, start_proxy, stop_leftover
from .sandbox import CONTROL_TIMEOUT_SECONDS, ExecResult

__all__ = [
    "CA_BUNDLE_PATH",
    "CA_CERT_PATH",
    "EGRESS_DENYLIST_ENV",
    "EGRESS_PORT",
    "TRAJECTORY_LOG_NAME",
    "EgressDenylist",
    "benchflow_log_line",
    "denylist_agent_env",
    "egress_denylist_for",
    "start_egress_denylist",
    "stop_egress_denylist",
]

# benchflow's own values: its firewall, its agents and its tests know these.
EGRESS_PORT = 18628
EGRESS_DENYLIST_ENV = "BENCHFLOW_EGRESS_DENYLIST"
TRAJECTORY_LOG_NAME = "egress_denylist.jsonl"
LEASH_LOG_NAME = "leash_audit.jsonl"
RUNTIME_DIR = "/opt/benchflow-egress"
CA_DIR = "/etc/benchflow-egress"
CA_CERT_PATH = f"{CA_DIR}/ca.crt"
CA_BUNDLE_PATH = f"{CA_DIR}/ca-bundle.crt"
PROXY_URL = f"http://127.0.0.1:{EGRESS_PORT}"
NO_PROXY = "127.0.0.1,localhost,::1"

# The proxy of each sandbox this process started, for stop (benchflow passes only the env).
_RUNNING: Dict[int, Tuple[Any, Proxy]] = {}


@dataclass(frozen=True)
class EgressDenylist:
    """URL prefixes and hosts a denylist task keeps out of reach (benchflow's own instances work as well)."""

    blocked_urls: Tuple[str, ...]
    blocked_hosts: Tuple[str, ...]


def egress_denylist_for(sandbox_config: Any) -> Optional[EgressDenylist]:
    """The denylist a sandbox config declares, or None for every other network mode (as benchflow's)."""
    if getattr(sandbox_config, "network_mode", None) != "denylist":
        return None
    return EgressDenylist(
        tuple(getattr(sandbox_config, "blocked_urls", None) or ()),
        tuple(getattr(sandbox_config, "blocked_hosts", None) or ()),
    )


def denylist_agent_env(agent_env: Mapping[str, str]) -> Dict[str, str]:
    """A copy of ``agent_env`` routed through the proxy and trusting its CA: benchflow's variables, plus the CA
    variables leash gives its own commands (pip, Deno, AWS tools)."""
    return {
        **agent_env,
        EGRESS_DENYLIST_ENV: "1",
        "HTTP_PROXY": PROXY_URL,
        "HTTPS_PROXY": PROXY_URL,
        "http_proxy": PROXY_URL,
        "https_proxy": PROXY_URL,
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
        "SSL_CERT_FILE": CA_BUNDLE_PATH,
        "REQUESTS_CA_BUNDLE": CA_BUNDLE_PATH,
        "CURL_CA_BUNDLE": CA_BUNDLE_PATH,
        "GIT_SSL_CAINFO": CA_BUNDLE_PATH,
        "PIP_CERT": CA_BUNDLE_PATH,
        "AWS_CA_BUNDLE": CA_BUNDLE_PATH,
        "DENO_CERT": CA_BUNDLE_PATH,
        "NODE_EXTRA_CA_CERTS": CA_CERT_PATH,
        "NODE_USE_ENV_PROXY": "1",
    }


def denylist_policy(denylist: Any) -> Policy:
    """The denylist as the ``[sandbox]`` table of a benchflow task, for ``leash --task``."""
    lines = ["[sandbox]", 'network_mode = "denylist"']
    for key in ("blocked_urls", "blocked_hosts"):
        values = [str(v) for v in (getattr(denylist, key, None) or ())]
        # A JSON string is a valid TOML basic string (the same escapes).
        lines.append(f"{key} = [{', '.join(json.dumps(v) for v in values)}]")
    return Policy("--task", "task.toml", ("\n".join(lines) + "\n").encode())


async def start_egress_denylist(
    env: Any,
    sandbox_user: Optional[str],
    denylist: Any,
    *,
    model_gateway_url: Optional[str] = None,
    timeout_sec: int = 120,
) -> None:
    """Starts ``leash proxy`` as root in benchflow's sandbox on the denylist; returns once it serves. Raises
    (:class:`LeashError`, a RuntimeError) when leash refuses: the rollout must not go on unfiltered."""
    if not sandbox_user:
        raise RuntimeError("network_mode='denylist' requires a sandbox_user")
    if model_gateway_url is not None:
        _loopback_gateway_port(model_gateway_url)
    loop = asyncio.get_running_loop()
    sandbox = _EnvSandbox(env, loop)
    _, previous = _RUNNING.pop(id(env), (None, None))
    work = functools.partial(_start, sandbox, denylist_policy(denylist), previous, timeout_sec)
    proxy = await loop.run_in_executor(None, work)
    _RUNNING[id(env)] = (env, proxy)


async def stop_egress_denylist(env: Any, rollout_dir: Path) -> None:
    """Stops leash and writes its refusals to ``rollout_dir/trajectory/egress_denylist.jsonl`` (benchflow's shape)
    and its whole audit log beside it; never raises, as benchflow's."""
    _, proxy = _RUNNING.pop(id(env), (None, None))
    sandbox = _EnvSandbox(env, asyncio.get_running_loop())
    entries = await asyncio.get_running_loop().run_in_executor(None, _stop_collect, sandbox, proxy)
    try:
        trajectory = Path(rollout_dir) / "trajectory"
        trajectory.mkdir(parents=True, exist_ok=True)
        blocked = [benchflow_log_line(e) for e in entries if e.get("decision") == "block"]
        (trajectory / TRAJECTORY_LOG_NAME).write_text("".join(json.dumps(b, sort_keys=True) + "\n" for b in blocked))
        (trajectory / LEASH_LOG_NAME).write_text("".join(json.dumps(e) + "\n" for e in entries))
    except OSError:
        pass
    try:
        await env.exec(f"rm -rf {shlex.quote(RUNTIME_DIR)} {shlex.quote(CA_DIR)}", user="root", timeout_sec=30)
    except Exception:
        pass


def benchflow_log_line(entry: Mapping[str, Any]) -> Dict[str, str]:
    """One refusal of leash's audit log as benchflow's block log writes it."""
    if entry.get("method") == "CONNECT":
        url = f"{entry.get('host')}:{entry.get('port')}"
    else:
        scheme = "https" if entry.get("port") == 443 else "http"
        url = f"{scheme}://{entry.get('host')}{entry.get('path') or ''}"
    reason, rule = entry.get("reason"), entry.get("rule")
    if reason == "rule" and rule:
        rule_text = ("url:" if "/" in str(rule) else "host:") + str(rule)
    else:
        rule_text = {"internal-destination": "private-address"}.get(str(reason), str(reason))
    return {"action": "blocked", "method": str(entry.get("method")), "url": url, "rule": rule_text}


def _start(sandbox: "_EnvSandbox", policy: Policy, previous: Optional[Proxy], timeout: float) -> Proxy:
    """In the worker thread: the earlier proxy ended (benchflow restarts it on each connection), leash started, its
    CA where benchflow's agents look for it."""
    if previous is not None:
        _stop_quietly(previous)
    stop_leftover(sandbox, RUNTIME_DIR)
    proxy = start_proxy(
        sandbox, policy, listen=f"127.0.0.1:{EGRESS_PORT}", workdir=RUNTIME_DIR, public_dir=CA_DIR, timeout=timeout
    )
    q = shlex.quote
    install = (
        f"cp {q(proxy.ca_cert)} {q(CA_CERT_PATH)} && cp {q(proxy.ca_bundle)} {q(CA_BUNDLE_PATH)} && "
        f"chmod 644 {q(CA_CERT_PATH)} {q(CA_BUNDLE_PATH)}; status=$?; "
        # Also the system store where the image has one (best effort, as benchflow does).
        "if command -v update-ca-certificates >/dev/null 2>&1; then mkdir -p /usr/local/share/ca-certificates && "
        f"cp {q(CA_CERT_PATH)} /usr/local/share/ca-certificates/benchflow-egress.crt && "
        "update-ca-certificates >/dev/null 2>&1; fi; exit $status"
    )
    result = sandbox.exec(["sh", "-c", install], timeout=CONTROL_TIMEOUT_SECONDS)
    if result.exit_code != 0:
        _stop_quietly(proxy)
        raise LeashError("cannot install leash's CA where benchflow's agents read it", result.exit_code, result.stderr)
    return proxy


def _stop_quietly(proxy: Proxy) -> None:
    try:
        proxy.stop()
    except LeashError:
        pass


def _stop_collect(sandbox: "_EnvSandbox", proxy: Optional[Proxy]) -> List[Dict[str, Any]]:
    """In the worker thread: the proxy stopped (or whatever leash runs in the runtime dir) and its log read."""
    try:
        if proxy is not None:
            try:
                return proxy.stop()
            except LeashError:
                return proxy.audit_log()
        stop_leftover(sandbox, RUNTIME_DIR)
        return read_audit_log(sandbox, RUNTIME_DIR)
    except Exception:
        return []


def _loopback_gateway_port(url: str) -> int:
    """benchflow's check of a model gateway URL: a loopback HTTP endpoint of the controller's."""
    gateway = urllib.parse.urlsplit(url)
    if (
        gateway.scheme != "http"
        or gateway.hostname != "127.0.0.1"
        or gateway.username is not None
        or gateway.path not in ("", "/")
        or gateway.query
        or gateway.fragment
        or gateway.port is None
        or not 1024 <= gateway.port <= 65535
    ):
        raise ValueError("denylist model gateway must be a controller-owned loopback HTTP endpoint")
    return gateway.port


class _EnvSandbox:
    """benchflow's async ``env`` as a :class:`~leash_egress.Sandbox` for a worker thread: each call is run on the
    event loop and waited for."""

    def __init__(self, env: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.env = env
        self.loop = loop

    def _wait(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def exec(
        self,
        argv: Sequence[str],
        *,
        detach: bool = False,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        command = " ".join(shlex.quote(a) for a in argv)
        if env:
            command = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + command
        if detach:
            # In the background of the exec's shell, which returns at once (no `nohup`: not every image has it, and
            # an exec without a terminal sends no SIGHUP).
            command = f"{command} </dev/null >/dev/null 2>&1 &"
        # benchflow's exec takes whole seconds.
        limit = None if timeout is None else max(1, math.ceil(timeout))
        result = self._wait(self.env.exec(command, user="root", timeout_sec=limit))
        code = getattr(result, "return_code", getattr(result, "exit_code", 0))
        return ExecResult(code, getattr(result, "stdout", "") or "", getattr(result, "stderr", "") or "")

    def put_file(self, path: str, data: bytes, mode: int) -> None:
        with tempfile.TemporaryDirectory(prefix="leash-up-") as directory:
            local = Path(directory) / "file"
            local.write_bytes(data)
            self._wait(self.env.upload_file(local, path, mode=format(mode, "o")))

    def get_file(self, path: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="leash-down-") as directory:
            local = Path(directory) / "file"
            self._wait(self.env.download_file(path, local))
            return local.read_bytes()
