"""leash_egress.benchflow against the benchflow installed beside it (tests/benchflow/run.sh's venv): the drop-in has
every name benchflow's rollout imports from benchflow.sandbox.egress_denylist, the same constants, the same
parameters (names, kinds, defaults), the same agent environment (plus leash's CA variables) and the same reading of
a sandbox config. Prints one line per check; exits 1 when any differs. Needs PYTHONPATH to hold the repository's
python/ directory.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import sys
import types

import benchflow
from benchflow.sandbox import egress_denylist as theirs
from leash_egress import benchflow as ours

CONSTANTS = ("CA_BUNDLE_PATH", "CA_CERT_PATH", "EGRESS_DENYLIST_ENV", "EGRESS_PORT", "TRAJECTORY_LOG_NAME")
FUNCTIONS = ("egress_denylist_for", "denylist_agent_env", "start_egress_denylist", "stop_egress_denylist")
failures = []


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok' if ok else 'DIFFERS'} {what}{': ' + detail if detail and not ok else ''}")
    if not ok:
        failures.append(what)


def imported_from_egress_module() -> set:
    """Every name a benchflow module imports from benchflow.sandbox.egress_denylist."""
    names = set()
    for path in pathlib.Path(benchflow.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchflow.sandbox.egress_denylist":
                names.update(alias.name for alias in node.names)
    return names


def shape(function) -> list:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def fields(denylist) -> object:
    return None if denylist is None else (tuple(denylist.blocked_urls), tuple(denylist.blocked_hosts))


used = imported_from_egress_module()
check("benchflow imports names from its egress module", bool(used), "none found")
for name in sorted(used):
    check(f"the drop-in has `{name}`", hasattr(ours, name))
for name in CONSTANTS:
    check(f"{name} is benchflow's", getattr(ours, name, None) == getattr(theirs, name))
for name in FUNCTIONS:
    check(f"{name} takes benchflow's parameters", shape(getattr(ours, name)) == shape(getattr(theirs, name)))
env_ours, env_theirs = ours.denylist_agent_env({"A": "1"}), theirs.denylist_agent_env({"A": "1"})
differ = {k: (env_ours.get(k), v) for k, v in env_theirs.items() if env_ours.get(k) != v}
check("denylist_agent_env gives benchflow's variables", not differ, repr(differ))
config = types.SimpleNamespace(network_mode="denylist", blocked_urls=["https://a.test/x/"], blocked_hosts=["b.test"])


read_ours, read_theirs = fields(ours.egress_denylist_for(config)), fields(theirs.egress_denylist_for(config))
check("egress_denylist_for reads a config as benchflow does", read_ours == read_theirs, f"{read_ours} != {read_theirs}")
other = types.SimpleNamespace(network_mode="public")
check(
    "and ignores other network modes",
    ours.egress_denylist_for(other) is None and theirs.egress_denylist_for(other) is None,
)
sys.exit(1 if failures else 0)
