"""The one exception the package raises, and where the `leash` binary is found."""

from __future__ import annotations

import os
import shutil
import sysconfig
from typing import Optional


class LeashError(RuntimeError):
    """leash refused or failed: nothing runs unfiltered after this is raised.

    ``exit_code`` is leash's (1 invalid policy or could not serve, 2 usage or unreadable file, 125 no sandbox could
    be set up; ``None`` when leash never answered, such as a start that timed out) and ``message`` is what leash
    said on stderr, as it said it.
    """

    def __init__(self, what: str, exit_code: Optional[int], message: str) -> None:
        self.exit_code = exit_code
        self.message = message.strip()
        detail = f" (exit {exit_code})" if exit_code is not None else ""
        super().__init__(f"{what}{detail}: {self.message}" if self.message else f"{what}{detail}")


def find_leash() -> str:
    """The path of the `leash` binary on this machine.

    In order: ``$LEASH_BIN``; the one this wheel installed (the scripts directory of the running Python, which is
    the venv's ``bin/`` when a venv is active or not); ``leash`` on ``PATH``. The wheel's binary is static, so it
    is also the one uploaded into sandboxes of the same architecture.
    """
    explicit = os.environ.get("LEASH_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise LeashError(f"$LEASH_BIN `{explicit}` is not an executable file", None, "")
        return explicit
    for scheme in (None, f"{os.name}_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:  # no such install scheme on this platform
            continue
        path = os.path.join(scripts, "leash")
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
    found = shutil.which("leash")
    if found:
        return found
    raise LeashError("no `leash` binary: install the leash-egress wheel or set $LEASH_BIN", None, "")
