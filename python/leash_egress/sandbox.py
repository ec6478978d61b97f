"""How leash reaches into a sandbox: three callbacks a harness supplies, and two ready-made sets of them.

A harness already has a way to run a command in its sandbox and to move files in and out (``docker exec``/``docker
cp``, a provider SDK's process and file APIs). :class:`Sandbox` names the three calls this package needs from it;
nothing else about the sandbox is assumed but a POSIX ``sh`` and ``kill`` inside (and, for the readiness check,
``curl``, ``wget`` or ``python3`` when there is one). :class:`LocalSandbox` runs on this machine (tests, or a
harness whose sandbox is ``leash run`` itself); :class:`DockerSandbox` drives a running container through the
``docker`` command line.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from typing import List, Mapping, NamedTuple, Optional, Protocol, Sequence

# How long one of this package's own calls into the sandbox (a `cat`, a `kill`, a look at leash's output) may take
# before it counts as failed: a busy container answers in seconds.
CONTROL_TIMEOUT_SECONDS = 60
# A file moved in or out: the binary is 10 MB (a debug build 200 MB), seconds through `docker exec`.
TRANSFER_TIMEOUT_SECONDS = 300


class ExecResult(NamedTuple):
    """What a command run in the sandbox returned (for a detached start: 0 and empty output once started)."""

    exit_code: int
    stdout: str
    stderr: str


class Sandbox(Protocol):
    """The calls a harness supplies; every path is inside the sandbox, every command runs as the sandbox's root
    (or whoever may start leash there: docs/inside.md says what each containment needs)."""

    def exec(
        self,
        argv: Sequence[str],
        *,
        detach: bool = False,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs ``argv`` and waits for it, or with ``detach`` starts it to keep running after this call returns
        (``docker exec -d``, a provider's background process) and returns at once. ``env`` is added to the
        command's environment. ``timeout``: seconds the call may take before it raises (None: no limit; this
        package passes one for each of its own short calls, and :func:`~leash_egress.run` passes its own)."""
        ...

    def put_file(self, path: str, data: bytes, mode: int) -> None:
        """Writes ``data`` to ``path`` with permission bits ``mode``, replacing what was there; never readable by
        anyone ``mode`` does not let read, not even while it is written (the policy is uploaded with 0o600)."""
        ...

    def get_file(self, path: str) -> bytes:
        """The content of ``path``; raises (any exception) when it cannot be read."""
        ...


class LocalSandbox:
    """This machine as the sandbox: commands run with :mod:`subprocess`, files are local files."""

    def __init__(self) -> None:
        self._detached: List[subprocess.Popen[bytes]] = []

    def exec(
        self,
        argv: Sequence[str],
        *,
        detach: bool = False,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        # Reap detached commands that have ended (leash once stopped), so none is left a zombie.
        self._detached = [process for process in self._detached if process.poll() is None]
        full_env = None
        if env is not None:
            full_env = {**os.environ, **env}
        if detach:
            # A session of its own: a signal to the harness's terminal does not reach leash.
            process = subprocess.Popen(
                list(argv),
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._detached.append(process)
            return ExecResult(0, "", "")
        done = subprocess.run(list(argv), env=full_env, capture_output=True, timeout=timeout)
        return ExecResult(done.returncode, _text(done.stdout), _text(done.stderr))

    def put_file(self, path: str, data: bytes, mode: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)  # an existing file keeps its old mode through O_CREAT
            out.write(data)

    def get_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()


class DockerSandbox:
    """A running container, through the ``docker`` command line (no SDK needed): ``docker exec`` for commands,
    ``docker exec -i ... cat`` to write a file (so it belongs to the exec's user, not to the caller's uid as with
    ``docker cp``), ``docker cp`` to read one back."""

    def __init__(self, container: str, *, user: str = "root", docker: str = "docker") -> None:
        self.container = container
        self.user = user
        self.docker = docker

    def exec(
        self,
        argv: Sequence[str],
        *,
        detach: bool = False,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        cmd = [self.docker, "exec", "-u", self.user]
        if detach:
            cmd.append("-d")
        for name, value in (env or {}).items():
            cmd += ["-e", f"{name}={value}"]
        done = subprocess.run(cmd + [self.container] + list(argv), capture_output=True, timeout=timeout)
        return ExecResult(done.returncode, _text(done.stdout), _text(done.stderr))

    def put_file(self, path: str, data: bytes, mode: int) -> None:
        # umask 077: the file is never readable by others on its way to `mode` (the policy is 600 in a 711 dir).
        script = 'umask 077 && cat > "$1" && chmod "$2" "$1"'
        cmd = [self.docker, "exec", "-i", "-u", self.user, self.container, "sh", "-c", script, "sh", path]
        done = subprocess.run(
            cmd + [format(mode, "o")], input=data, capture_output=True, timeout=TRANSFER_TIMEOUT_SECONDS
        )
        if done.returncode != 0:
            raise OSError(f"cannot write `{path}` in container {self.container}: {_text(done.stderr).strip()}")

    def get_file(self, path: str) -> bytes:
        # `docker cp` to stdout gives a tar stream of the one file.
        done = subprocess.run(
            [self.docker, "cp", f"{self.container}:{path}", "-"], capture_output=True, timeout=TRANSFER_TIMEOUT_SECONDS
        )
        if done.returncode != 0:
            raise OSError(f"cannot read `{path}` in container {self.container}: {_text(done.stderr).strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is None:
                raise OSError(f"`{path}` in container {self.container} is not a regular file")
            return extracted.read()


def _text(data: Optional[bytes]) -> str:
    return (data or b"").decode("utf-8", "replace")
