"""What leash enforces: a policy built from a dict, a policy file, or a harness's task file, checked on this machine
before it is sent anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, List, Mapping, Optional, Tuple

from .errors import LeashError, find_leash

# `leash check` reads a file and decides at once; a minute means something is wrong with the machine.
CHECK_TIMEOUT_SECONDS = 60


class Policy:
    """A policy as leash reads it: one file, and the option that names it (``--policy`` or ``--task``).

    Build one with :meth:`from_dict` (the policy format of docs/policy.md, written as JSON), :meth:`from_file` (a
    ``.yaml``/``.yml``/``.toml``/``.json`` policy file) or :meth:`from_task` (a harness's task file, passed through
    to ``leash --task`` as it is: benchflow's ``task.toml`` or ``task.md``, a sandbox runtime's settings ``.json``).
    Nothing is interpreted in Python: leash reads the file, so a policy means here what it means to ``leash``.
    """

    def __init__(self, option: str, file_name: str, content: bytes) -> None:
        if option not in ("--policy", "--task"):
            raise ValueError(f"a policy is passed as --policy or --task, not `{option}`")
        self.option = option
        self.file_name = file_name
        self.content = content

    @classmethod
    def from_dict(cls, policy: Mapping[str, Any]) -> "Policy":
        """A policy given as data: ``{"network": {"mode": "allowlist", "allowed_hosts": [...]}}``."""
        return cls("--policy", "policy.json", json.dumps(policy, indent=2).encode())

    @classmethod
    def from_file(cls, path: "os.PathLike[str] | str") -> "Policy":
        """A policy file; its extension tells leash its format."""
        return cls("--policy", "policy" + _extension(path, (".yaml", ".yml", ".toml", ".json")), _read(path))

    @classmethod
    def from_task(cls, path: "os.PathLike[str] | str") -> "Policy":
        """A harness's task file, read by ``leash --task`` as it is (``leash check --task`` says what each field
        became)."""
        name = os.path.basename(os.fspath(path))
        if name.endswith(".md"):
            return cls("--task", "task.md", _read(path))
        return cls("--task", "task" + _extension(path, (".toml", ".json")), _read(path))

    def args(self, directory: str) -> List[str]:
        """leash's options for this policy once it is written to ``directory`` (in whatever machine)."""
        return [self.option, f"{directory.rstrip('/')}/{self.file_name}"]

    def check(self, leash: Optional[str] = None) -> str:
        """Runs ``leash check`` on this policy here; returns what it printed (with ``--task``: what each field
        became), or raises :class:`LeashError` with leash's message when the policy is invalid."""
        with tempfile.TemporaryDirectory(prefix="leash-check-") as directory:
            path = os.path.join(directory, self.file_name)
            with open(path, "wb") as out:
                out.write(self.content)
            argv = [leash or find_leash(), "check"] + (["--task", path] if self.option == "--task" else [path])
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS)
        if done.returncode != 0:
            raise LeashError("leash check refused the policy", done.returncode, done.stderr or done.stdout)
        return done.stdout + done.stderr

    def __repr__(self) -> str:
        return f"Policy({self.option} {self.file_name}, {len(self.content)} bytes)"


def _extension(path: "os.PathLike[str] | str", allowed: Tuple[str, ...]) -> str:
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in allowed:
        raise ValueError(f"`{os.fspath(path)}`: expected a file ending in {', '.join(allowed)}")
    return ext


def _read(path: "os.PathLike[str] | str") -> bytes:
    with open(path, "rb") as f:
        return f.read()
