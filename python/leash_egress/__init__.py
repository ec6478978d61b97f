"""leash from Python: start the egress filter inside a harness's sandbox and read what it decided.

The wheel that ships this package also ships the static ``leash`` binary; this package uploads it into a sandbox
through callbacks the harness supplies (:class:`Sandbox`: run a command, write a file, read a file), starts
``leash proxy`` beside the agent or ``leash run`` around it, waits until it serves, and collects the audit log::

    from leash_egress import DockerSandbox, Policy, start_proxy

    policy = Policy.from_task("task.toml")        # or Policy.from_dict({"network": {...}})
    policy.check()                                # leash check, here: raises LeashError with leash's message
    with start_proxy(DockerSandbox("agent-box"), policy) as proxy:
        ...  # start the agent with proxy.env merged into its environment
    print(proxy.audit_log())                      # every decision, one dict per line

It fails closed: whenever leash refuses or fails to start, a :class:`LeashError` carries its exit code and message.
A proxy the agent could go around protects nothing: give the agent's uid no other way out (``run`` with a
containment, or the sandbox's firewall; docs/inside.md). Python 3.8+, standard library only.
"""

from .errors import LeashError, find_leash
from .policy import Policy
from .proxy import Proxy, RunResult, parse_audit_log, parse_env_file, read_audit_log, run, start_proxy, stop_leftover
from .sandbox import DockerSandbox, ExecResult, LocalSandbox, Sandbox

__all__ = [
    "DockerSandbox",
    "ExecResult",
    "LeashError",
    "LocalSandbox",
    "Policy",
    "Proxy",
    "RunResult",
    "Sandbox",
    "find_leash",
    "parse_audit_log",
    "parse_env_file",
    "read_audit_log",
    "run",
    "start_proxy",
    "stop_leftover",
]
