"""benchflow's egress filter replaced by leash, with one import line.

benchflow (0.7.11) starts its denylist proxy from ``benchflow/rollout_planes.py``::

    from benchflow.sandbox.egress_denylist import EgressDenylist, start_egress_denylist, stop_egress_denylist

Replace that line with the one below and every ``network_mode = "denylist"`` task runs behind ``leash proxy``
instead: same function signatures, same port, same CA paths and agent environment, the refusals in the rollout's
``trajectory/egress_denylist.jsonl`` as benchflow writes them, and leash's whole audit log beside them.

This script plays the rollout's part against a running container, so it can be tried without benchflow:

    docker run -d --name box --network none leash-test:latest sleep 600   # any image with sh (and curl, here)
    python3 examples/python/benchflow_drop_in.py box

``DockerEnv`` stands in for benchflow's sandbox env (``await env.exec(cmd, user=, timeout_sec=)``,
``upload_file``, ``download_file``); in benchflow the env is its own. tests/python/test_leash_egress.py runs this.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from leash_egress.benchflow import EgressDenylist, denylist_agent_env, start_egress_denylist, stop_egress_denylist

# What examples/task.toml declares (`[sandbox] network_mode = "denylist"`); benchflow reads it with
# egress_denylist_for(task.config.sandbox).
DENYLIST = EgressDenylist(
    blocked_urls=("https://arxiv.org/abs/2401.01234/", "https://arxiv.org/pdf/2401.01234"),
    blocked_hosts=("api.semanticscholar.org",),
)
AGENT_UID = "1000"
# One docker call; a container answers in well under this.
DOCKER_TIMEOUT_SECONDS = 60


class DockerEnv:
    """The calls benchflow's egress module makes on its sandbox env, over the docker command line."""

    class Result:
        def __init__(self, done: subprocess.CompletedProcess) -> None:
            self.return_code, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr

    def __init__(self, container: str) -> None:
        self.container = container

    async def _docker(self, *argv: str) -> subprocess.CompletedProcess:
        def call() -> subprocess.CompletedProcess:
            return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_SECONDS)

        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def exec(self, command: str, *, user: str = "root", timeout_sec: int = 30) -> "DockerEnv.Result":
        return self.Result(await self._docker("exec", "-u", user, self.container, "sh", "-c", command))

    async def upload_file(self, source: Path, target: str, *, mode: "str | None" = None) -> None:
        await self._docker("exec", self.container, "mkdir", "-p", os.path.dirname(target))
        done = await self._docker("cp", str(source), f"{self.container}:{target}")
        if done.returncode != 0:
            raise OSError(f"docker cp to {target}: {done.stderr.strip()}")
        if mode:
            await self._docker("exec", self.container, "chmod", mode, target)

    async def download_file(self, source: str, target: Path) -> None:
        done = await self._docker("cp", f"{self.container}:{source}", str(target))
        if done.returncode != 0:
            raise OSError(f"docker cp from {source}: {done.stderr.strip()}")


async def rollout(container: str, rollout_dir: Path) -> None:
    """What benchflow's rollout does around an agent on a denylist task."""
    env = DockerEnv(container)
    await start_egress_denylist(env, sandbox_user="agent", denylist=DENYLIST)
    agent_env = denylist_agent_env({})
    exports = " ".join(f"{name}={value}" for name, value in agent_env.items())
    for url in ("https://arxiv.org/abs/2401.01234", "https://arxiv.org/abs/2401.01234v2"):
        # The agent: its uid, benchflow's environment (the proxy, leash's CA), a paper it must not read.
        said = await env.exec(f"env {exports} curl -s -o /dev/null -w '%{{http_code}}' {url}", user=AGENT_UID)
        print(f"refused by leash: {url}" if said.stdout == "403" else f"not refused ({said.stdout}): {url}")
    await stop_egress_denylist(env, rollout_dir)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: benchflow_drop_in.py CONTAINER", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rollout-") as rollout_dir:
        asyncio.run(rollout(sys.argv[1], Path(rollout_dir)))
        log = Path(rollout_dir, "trajectory", "egress_denylist.jsonl").read_text()
        print("trajectory/egress_denylist.jsonl:")
        for line in log.splitlines():
            print("  " + json.dumps(json.loads(line), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
