"""leash started inside a sandbox through the harness's callbacks: ``leash proxy`` beside the agent
(:func:`start_proxy`), or the agent's command under ``leash run`` (:func:`run`).

Both upload the static ``leash`` binary and the policy into a directory only root may list (``workdir``, mode
711: the agent's uid may run the binary, as ``leash run`` runs its containment self-test as that uid), every other
file there mode 600, so the agent's uid reads neither the policy nor the audit log nor leash's output.

Both fail closed: when leash refuses to start (an invalid policy, a containment the sandbox cannot give, a port
taken), they raise :class:`LeashError` with leash's exit code and message, and nothing is left running unfiltered.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from .errors import LeashError, find_leash
from .policy import Policy
from .sandbox import CONTROL_TIMEOUT_SECONDS, ExecResult, Sandbox

WORKDIR = "/opt/leash"
PUBLIC_DIR = "/opt/leash-public"
# The audit logs in the workdir: the proxy's (appended to by every start there), and the last run's.
PROXY_LOG = "audit.jsonl"
RUN_LOG = "run-audit.jsonl"
# leash binds and prints its ready line within a second; a loaded sandbox's exec round trips take most of this.
READY_TIMEOUT_SECONDS = 30.0
# leash lets in-flight requests finish for 10 s after SIGTERM (docs/commands.md); a little more for the log's flush.
STOP_TIMEOUT_SECONDS = 15.0
# Between two looks into the sandbox while waiting: each look is one exec round trip.
POLL_SECONDS = 0.1
# The readiness probe's exit status when the sandbox has no HTTP client: the ready line is then the only signal.
NO_HTTP_CLIENT = 64
# `leash proxy --control`'s socket, in a directory of leash's own (mode 0700) inside the workdir.
CONTROL_SOCKET = "control/ctl.sock"
# What `leash policy switch` prints once the new policy is in force.
SWITCHED = re.compile(r"\(generation (\d+)\): (\d+) open connection")
# The line the wrapper of `run` writes on stderr just before the command: its absence means the command never ran.
STARTED_MARK = "leash-egress: command started"


class RunResult(NamedTuple):
    """What ``leash run`` returned: the command's exit status and output, and the audit log of its requests."""

    exit_code: int
    stdout: str
    stderr: str
    audit: List[Dict[str, Any]]


class Proxy:
    """A ``leash proxy`` running in a sandbox. Point the agent at it with :attr:`env`; :meth:`stop` it to end it and
    collect the audit log. Also a context manager that stops it on leaving."""

    def __init__(self, sandbox: Sandbox, workdir: str, public_dir: str, address: str, env: Dict[str, str]) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.address = address
        """``127.0.0.1:PORT`` inside the sandbox: where the agent's proxy variables point."""
        self.port = int(address.rsplit(":", 1)[1])
        self.env = env
        """The variables ``leash run`` would give its command (``HTTP_PROXY`` and the rest, every CA variable), as
        ``leash proxy --env-file`` wrote them: merge them into the agent's environment."""
        self.ca_cert = f"{public_dir}/ca.pem"
        """The run's inspection CA certificate inside the sandbox (readable by every uid)."""
        self.ca_bundle = f"{public_dir}/ca-bundle.pem"
        """The system roots plus that CA, inside the sandbox."""
        self.exit_code: Optional[int] = None
        """leash's exit status once it has ended (after :meth:`stop`)."""
        self.control = f"{workdir}/{CONTROL_SOCKET}"
        """leash's control socket inside the sandbox (``--control``), in a directory only root may enter."""
        self._switches = 0

    def switch_policy(self, policy: Policy) -> Dict[str, int]:
        """Puts ``policy`` in force while leash runs — set up online, then lock down (docs/run.md, "Phases"): leash
        validates it first (the policy in force stays if it is refused), then swaps it in for every request decided
        from then on and cuts every open tunnel and request in flight it refuses. Returns ``{"generation": N,
        "cut": K}``; raises :class:`LeashError` with leash's message when it refuses the policy.

        Takes a policy (:meth:`Policy.from_dict` or :meth:`Policy.from_file`), not a task file.
        """
        if policy.option != "--policy":
            raise ValueError("a switch takes a policy (Policy.from_dict or from_file), not a task file")
        self._switches += 1
        path = f"{self.workdir}/phase-{self._switches}-{policy.file_name}"
        self.sandbox.put_file(path, policy.content, 0o600)
        argv = [f"{self.workdir}/leash", "policy", "switch", "--control", self.control, path]
        done = self.sandbox.exec(argv, timeout=CONTROL_TIMEOUT_SECONDS)
        said = SWITCHED.search(done.stdout)
        if done.exit_code != 0 or said is None:
            raise LeashError("leash refused the policy switch", done.exit_code, done.stderr or done.stdout)
        return {"generation": int(said.group(1)), "cut": int(said.group(2))}

    def audit_log(self) -> List[Dict[str, Any]]:
        """The audit log so far, one dict per line (docs/audit-log.md has every field)."""
        return read_audit_log(self.sandbox, self.workdir)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> List[Dict[str, Any]]:
        """Ends leash (SIGTERM: in-flight requests finish, the log is flushed) and returns the whole audit log.

        Raises :class:`LeashError` if leash had already failed on its own, or would not end (then it is killed).
        """
        if self.exit_code is None:
            self.exit_code = _stop(self.sandbox, self.workdir, timeout)
        entries = self.audit_log()
        # 0 is a clean stop; leash ends on SIGTERM with 0, and 143 means the signal came before its handler.
        if self.exit_code not in (0, 143):
            raise LeashError("leash proxy had failed", self.exit_code, _read_text(self.sandbox, self.workdir, "stderr"))
        return entries

    def __enter__(self) -> "Proxy":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            self.stop()
        else:  # an exception is already on its way: stop without hiding it
            try:
                self.stop()
            except LeashError:
                pass

    def __repr__(self) -> str:
        return f"Proxy({self.address}, workdir={self.workdir})"


def start_proxy(
    sandbox: Sandbox,
    policy: Policy,
    *,
    listen: str = "127.0.0.1:0",
    args: Sequence[str] = (),
    workdir: str = WORKDIR,
    public_dir: str = PUBLIC_DIR,
    leash: Optional[str] = None,
    timeout: float = READY_TIMEOUT_SECONDS,
) -> Proxy:
    """Starts ``leash proxy`` in ``sandbox`` and returns once it serves.

    ``listen`` is its address inside the sandbox (port 0: any free one; :attr:`Proxy.address` says which).
    ``args`` are more ``leash proxy`` options (``["--resolve", "NAME:ADDR"]``, ``["--upstream-ca", PATH]``).
    leash listens on a control socket in the workdir (:meth:`Proxy.switch_policy`).
    ``workdir`` (mode 711: the binary; mode 600: the policy, the audit log, leash's output) and ``public_dir``
    (mode 755: the CA and the env file the agent reads) are made if missing. ``leash`` is the local binary to upload
    (:func:`find_leash` by default).

    Ready means leash printed its ``listening on`` line and answered ``GET /healthz`` from inside the sandbox
    (through ``curl``, ``wget`` or ``python3``, when the sandbox has one). Raises :class:`LeashError` with leash's
    exit code and message when it ends instead, and when it is not ready within ``timeout`` seconds (it is then
    stopped).
    """
    _prepare(sandbox, policy, workdir, leash, extra_dirs=(public_dir,))
    argv = [f"{workdir}/leash", "proxy"] + policy.args(workdir) + ["--listen", listen]
    argv += ["--log", f"{workdir}/{PROXY_LOG}", "--env-file", f"{public_dir}/leash.env"]
    argv += ["--ca-cert-out", f"{public_dir}/ca.pem", "--ca-bundle-out", f"{public_dir}/ca-bundle.pem"]
    argv += ["--control", f"{workdir}/{CONTROL_SOCKET}"]
    argv += list(args)
    started = sandbox.exec(["sh", "-c", _background(workdir, argv)], detach=True, timeout=CONTROL_TIMEOUT_SECONDS)
    _check(started, "cannot start leash in the sandbox")
    try:
        address = _wait_ready(sandbox, workdir, timeout)
        env = parse_env_file(sandbox.get_file(f"{public_dir}/leash.env").decode())
    except BaseException:
        _stop(sandbox, workdir, STOP_TIMEOUT_SECONDS)
        raise
    return Proxy(sandbox, workdir, public_dir, address, env)


def run(
    sandbox: Sandbox,
    policy: Policy,
    argv: Sequence[str],
    *,
    user: Optional[str] = None,
    containment: Optional[str] = None,
    args: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    workdir: str = WORKDIR,
    leash: Optional[str] = None,
    timeout: Optional[float] = None,
) -> RunResult:
    """Runs ``argv`` in ``sandbox`` under ``leash run`` and waits for it; returns its status, output and the audit
    log.

    ``user`` (``--user``, the agent's uid) and ``containment`` (``--containment``) are as docs/inside.md says;
    ``args`` are more ``leash run`` options; ``env`` is added to the environment ``leash`` is started with;
    ``timeout`` is handed to the sandbox's ``exec`` (None: no limit). Returns only this run's audit lines. Raises
    :class:`LeashError` when the command never ran: leash could not set up containment (125), or refused its
    options or policy (2) — told apart from the command's own status by a line the command's wrapper prints first.
    """
    _prepare(sandbox, policy, workdir, leash)
    log = f"{workdir}/{RUN_LOG}"
    _check(_sh(sandbox, f"rm -f {shlex.quote(log)}"), f"cannot remove the log of an earlier run in {workdir}")
    cmd = [f"{workdir}/leash", "run"] + policy.args(workdir) + ["--log", log]
    if user is not None:
        cmd += ["--user", user]
    if containment is not None:
        cmd += ["--containment", containment]
    # The command, behind a wrapper that says it started (on stderr, removed from what is returned).
    cmd += list(args) + ["--", "sh", "-c", f'echo "{STARTED_MARK}" >&2; exec "$@"', "sh"] + list(argv)
    result = sandbox.exec(cmd, env=env, timeout=timeout)
    before, mark, after = result.stderr.partition(STARTED_MARK + "\n")
    if not mark:
        raise LeashError("leash run did not start the command", result.exit_code, result.stderr)
    return RunResult(result.exit_code, result.stdout, before + after, read_audit_log(sandbox, workdir, RUN_LOG))


def stop_leftover(sandbox: Sandbox, workdir: str = WORKDIR, timeout: float = STOP_TIMEOUT_SECONDS) -> bool:
    """Ends a leash an earlier start left running in ``workdir`` (a harness restarted, the :class:`Proxy` object
    lost); True if there was one. A start refuses a workdir whose leash still runs, so a restart calls this first.
    """
    w = shlex.quote(workdir)
    running = (
        f'p=$(cat {w}/pid 2>/dev/null); [ -n "$p" ] && [ ! -s {w}/exit ] && '
        f'[ "$(readlink /proc/$p/exe 2>/dev/null)" = {shlex.quote(workdir + "/leash")} ]'
    )
    if _sh(sandbox, running).exit_code != 0:
        return False
    _stop(sandbox, workdir, timeout)
    return True


def parse_audit_log(text: str) -> List[Dict[str, Any]]:
    """leash's JSON-lines audit log as dicts; a last line still being written (no newline yet) is left out."""
    lines = text.split("\n")
    complete = lines[:-1] if not text.endswith("\n") else lines
    return [json.loads(line) for line in complete if line.strip()]


def parse_env_file(text: str) -> Dict[str, str]:
    """The variables of a ``leash proxy --env-file`` file (``export NAME='VALUE'`` lines) as a dict."""
    env = {}
    for line in text.splitlines():
        if not line.startswith("export "):
            continue
        name, _, quoted = line[len("export ") :].partition("=")
        words = shlex.split(quoted)  # one single-quoted word, with `'\''` for a quote
        env[name] = words[0] if words else ""
    return env


def _prepare(
    sandbox: Sandbox, policy: Policy, workdir: str, leash: Optional[str], extra_dirs: Sequence[str] = ()
) -> None:
    """The workdir (711) and other directories (755) made, a leash still running there refused, binary and policy
    uploaded."""
    q = shlex.quote
    script = f"mkdir -p {q(workdir)} && chmod 711 {q(workdir)}"
    for directory in extra_dirs:
        script += f" && mkdir -p {q(directory)} && chmod 755 {q(directory)}"
    # A leash started earlier in this workdir and still running (its pid is running this workdir's binary).
    script += (
        f"; p=$(cat {q(workdir)}/pid 2>/dev/null); "
        f'if [ -n "$p" ] && [ "$(readlink /proc/$p/exe 2>/dev/null)" = {q(workdir + "/leash")} ]; then '
        f'echo "a leash started earlier in {workdir} is still running (pid $p): stop it first" >&2; exit 3; fi; '
        f"rm -f {q(workdir)}/pid {q(workdir)}/exit {q(workdir)}/stdout {q(workdir)}/stderr"
    )
    _check(_sh(sandbox, script), f"cannot prepare {workdir} in the sandbox")
    with open(leash or find_leash(), "rb") as binary:
        sandbox.put_file(f"{workdir}/leash", binary.read(), 0o755)
    sandbox.put_file(f"{workdir}/{policy.file_name}", policy.content, 0o600)


def _background(workdir: str, argv: Sequence[str]) -> str:
    """A shell script that runs ``argv`` with its output in ``workdir``, records its pid, waits for it and records
    its exit status: what lets a detached start be watched and stopped through later exec calls."""
    w = shlex.quote(workdir)
    command = " ".join(shlex.quote(a) for a in argv)
    # leash's output files made root's alone first (a umask for leash itself would reach the CA and env file it
    # writes for the agent).
    private = f"(umask 077 && : >{w}/stdout && : >{w}/stderr) || exit 1"
    return f"{private}; {command} </dev/null >{w}/stdout 2>{w}/stderr & echo $! >{w}/pid; wait $!; echo $? >{w}/exit"


def _wait_ready(sandbox: Sandbox, workdir: str, timeout: float) -> str:
    """leash's address once it printed its ready line and answered /healthz; raises if it ended or timed out."""
    w = shlex.quote(workdir)
    look = (
        f"if [ -s {w}/exit ]; then echo exited $(cat {w}/exit); exit 0; fi; "
        f'while read -r line; do case "$line" in "listening on "*) echo "$line"; exit 0;; esac; done <{w}/stdout'
    )
    deadline = time.monotonic() + timeout
    address = None
    while time.monotonic() < deadline:
        said = _sh(sandbox, look).stdout.strip()
        if said.startswith("exited "):
            code = int(said.split()[1])
            raise LeashError("leash proxy did not start", code, _read_text(sandbox, workdir, "stderr"))
        if said.startswith("listening on "):
            address = said.split()[-1]
            if _healthz(sandbox, address):
                return address
        time.sleep(POLL_SECONDS)
    stage = "answer /healthz" if address else "print its ready line"
    raise LeashError(f"leash proxy did not {stage} within {timeout:g} s", None, _read_text(sandbox, workdir, "stderr"))


def _healthz(sandbox: Sandbox, address: str) -> bool:
    """``GET /healthz`` from inside the sandbox, with the first HTTP client there; with none, True (the ready line
    alone says leash is serving)."""
    url = shlex.quote(f"http://{address}/healthz")
    probe = (
        f"if command -v curl >/dev/null 2>&1; then exec curl -fsS -m 2 --noproxy '*' -o /dev/null {url}; fi; "
        f"if command -v wget >/dev/null 2>&1; then exec wget -q -T 2 -Y off -O /dev/null {url}; fi; "
        "for py in python3 python; do if command -v $py >/dev/null 2>&1; then exec $py -c "
        + shlex.quote(
            "import sys, urllib.request as u; u.build_opener(u.ProxyHandler({})).open(sys.argv[1], timeout=2).read()"
        )
        + f" {url}; fi; done; exit {NO_HTTP_CLIENT}"
    )
    code = _sh(sandbox, probe).exit_code
    return code in (0, NO_HTTP_CLIENT)


def _stop(sandbox: Sandbox, workdir: str, timeout: float) -> Optional[int]:
    """SIGTERM to the workdir's leash, then its exit status once recorded; SIGKILL after ``timeout`` (then raises)."""
    w = shlex.quote(workdir)
    _sh(sandbox, f"[ -s {w}/exit ] || kill -TERM $(cat {w}/pid) 2>/dev/null; true")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _sh(sandbox, f"cat {w}/exit 2>/dev/null").stdout.strip()
        if status:
            return int(status)
        time.sleep(POLL_SECONDS)
    _sh(sandbox, f"kill -KILL $(cat {w}/pid) 2>/dev/null; true")
    raise LeashError(f"leash did not stop within {timeout:g} s after SIGTERM: killed", None, "")


def read_audit_log(sandbox: Sandbox, workdir: str = WORKDIR, name: str = PROXY_LOG) -> List[Dict[str, Any]]:
    """The audit log ``leash proxy`` (or, with ``name=RUN_LOG``, the last ``leash run``) started in ``workdir``
    writes, one dict per line; empty before its first request. leash appends: a proxy's log keeps the lines of
    earlier proxies started in the same workdir."""
    path = f"{workdir}/{name}"
    if _sh(sandbox, f"test -e {shlex.quote(path)}").exit_code != 0:  # no request yet: leash wrote no file
        return []
    return parse_audit_log(sandbox.get_file(path).decode())


def _read_text(sandbox: Sandbox, workdir: str, name: str) -> str:
    try:
        return sandbox.get_file(f"{workdir}/{name}").decode("utf-8", "replace")
    except Exception:
        return ""


def _sh(sandbox: Sandbox, script: str) -> ExecResult:
    """One of this package's own short calls into the sandbox."""
    return sandbox.exec(["sh", "-c", script], timeout=CONTROL_TIMEOUT_SECONDS)


def _check(result: ExecResult, what: str) -> None:
    if result.exit_code != 0:
        raise LeashError(what, result.exit_code, result.stderr or result.stdout)
