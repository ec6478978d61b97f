"""The leash_egress Python package against a real `leash` binary: policies checked by leash, `leash proxy` and
`leash run` started through the local adapter (an in-process origin on loopback, one request allowed and one refused,
both on record), and through the Docker adapter in a container of the locally built test image (the container's
curl through leash, the benchflow drop-in, nothing left running after stop).

The binary is leash_egress.find_leash()'s: $LEASH_BIN, else the one the wheel installed. Run by tests/wheel/check.sh
in the wheel's venv; by hand: `LEASH_BIN=target/x86_64-unknown-linux-gnu/debug/leash PYTHONPATH=python
python3 -m unittest discover -s tests/python -v`. Docker tests skip loudly where Docker or the image is missing,
unless LEASH_REQUIRE_DOCKER=1 (CI). Standard library only.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

import leash_egress
from leash_egress import DockerSandbox, LeashError, LocalSandbox, Policy, run, start_proxy
from leash_egress import benchflow as bf

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "python"))
from benchflow_drop_in import DockerEnv  # noqa: E402 (the example's stand-in for benchflow's sandbox env)

IMAGE = os.environ.get("LEASH_TEST_IMAGE", "leash-test:latest")
# The origin inside the Docker tests' containers.
ORIGIN_PORT = 8000
# Every wait on a container or a request is bounded: a minute means something is broken.
TIMEOUT = 60


def allow_loopback_policy(host: str, port: int = 80) -> Policy:
    """`host` allowed on `port`, and the loopback origin it is resolved to reachable (an internal destination
    otherwise)."""
    network = {"mode": "allowlist", "allowed_hosts": [host], "allow_destinations": ["127.0.0.1/32"]}
    return Policy.from_dict({"network": {**network, "ports": [80, port]}})


class Origin:
    """An HTTP origin on 127.0.0.1 in this process, answering every GET with 200 and `hello from PATH`."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = f"hello from {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fetch(proxy_url: str, url: str) -> tuple:
    """(status, body) of GET `url` through the proxy at `proxy_url`."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}))
    try:
        with opener.open(url, timeout=TIMEOUT) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def decisions(entries: list) -> list:
    """The decision lines of an audit log (an allowed request's outcome line repeats its id without one)."""
    return [e for e in entries if "decision" in e]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class PolicyTests(unittest.TestCase):
    def test_a_dict_is_checked_by_leash_and_an_invalid_one_raises_with_its_message(self) -> None:
        self.assertIsInstance(allow_loopback_policy("allowed.test").check(), str)
        bad = Policy.from_dict({"network": {"mode": "allowlist", "allowed_host": ["x.test"]}})
        with self.assertRaises(LeashError) as raised:
            bad.check()
        self.assertEqual(raised.exception.exit_code, 1)
        self.assertIn("allowed_host", raised.exception.message)
        self.assertIn("allowed_host", str(raised.exception))

    def test_a_benchflow_task_is_passed_to_leash_as_it_is(self) -> None:
        policy = Policy.from_task(ROOT / "examples" / "task.toml")
        self.assertEqual(policy.args("/w"), ["--task", "/w/task.toml"])
        said = policy.check()
        self.assertIn("blocked_urls", said)
        self.assertIn("arxiv.org/abs/2401.01234", said)
        with tempfile.TemporaryDirectory() as d:
            task = pathlib.Path(d, "task.toml")
            task.write_text('[sandbox]\nnetwork_mode = "denylist"\nblocked_urls = ["ftp://x.test/a"]\n')
            with self.assertRaises(LeashError) as raised:
                Policy.from_task(task).check()
            self.assertIn("ftp://x.test/a", raised.exception.message)

    def test_a_file_of_an_unknown_kind_is_refused_before_leash_sees_it(self) -> None:
        with self.assertRaises(ValueError):
            Policy.from_file("policy.txt")


class LocalProxyTests(unittest.TestCase):
    """`leash proxy` started through the local adapter, as a harness would start it in its sandbox."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="leash-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.origin = Origin()
        self.addCleanup(self.origin.close)
        self.dirs = {"workdir": f"{self.dir}/work", "public_dir": f"{self.dir}/public"}

    def test_a_request_allowed_and_one_refused_both_on_record_and_nothing_left_running(self) -> None:
        proxy = start_proxy(
            LocalSandbox(),
            allow_loopback_policy("allowed.test", self.origin.port),
            args=["--resolve", "allowed.test:127.0.0.1"],
            **self.dirs,
        )
        pid = int(pathlib.Path(self.dir, "work", "pid").read_text())
        self.assertTrue(alive(pid))
        self.assertEqual(proxy.env["HTTP_PROXY"], f"http://{proxy.address}")
        self.assertTrue(os.path.isfile(proxy.env["SSL_CERT_FILE"]), proxy.env)
        allowed = fetch(proxy.env["HTTP_PROXY"], f"http://allowed.test:{self.origin.port}/paper")
        self.assertEqual(allowed, (200, "hello from /paper"))
        self.assertEqual(fetch(proxy.env["HTTP_PROXY"], "http://refused.test/x")[0], 403)
        entries = proxy.stop()
        self.assertEqual(proxy.exit_code, 0)
        self.assertFalse(alive(pid))
        decided = [(e["decision"], e["host"], e.get("path")) for e in decisions(entries)]
        self.assertEqual(decided, [("allow", "allowed.test", "/paper"), ("block", "refused.test", "/x")])
        self.assertEqual(decisions(entries)[1]["reason"], "not-allowed")

    def test_a_switch_locks_the_proxy_down_and_a_refused_one_keeps_the_policy_in_force(self) -> None:
        proxy = start_proxy(
            LocalSandbox(),
            allow_loopback_policy("allowed.test", self.origin.port),
            args=["--resolve", "allowed.test:127.0.0.1"],
            **self.dirs,
        )
        self.addCleanup(proxy.stop)
        url = f"http://allowed.test:{self.origin.port}/setup"
        self.assertEqual(fetch(proxy.env["HTTP_PROXY"], url)[0], 200)
        with self.assertRaises(LeashError) as raised:
            proxy.switch_policy(Policy.from_dict({"network": {"mode": "allowlist", "alowed_hosts": []}}))
        self.assertEqual(raised.exception.exit_code, 1)
        self.assertIn("alowed_hosts", raised.exception.message)
        self.assertEqual(fetch(proxy.env["HTTP_PROXY"], url)[0], 200, "a refused switch keeps the policy in force")
        locked = Policy.from_dict({"network": {"mode": "allowlist", "allowed_hosts": ["elsewhere.test"]}})
        self.assertEqual(proxy.switch_policy(locked)["generation"], 1)
        self.assertEqual(fetch(proxy.env["HTTP_PROXY"], url)[0], 403, "locked down")
        switches = [e for e in proxy.audit_log() if e.get("event") == "policy-switch"]
        self.assertEqual(len(switches), 1, switches)

    def test_leash_refusing_to_start_raises_with_its_exit_code_and_message(self) -> None:
        taken = Origin()  # a port something already listens on
        self.addCleanup(taken.close)
        with self.assertRaises(LeashError) as raised:
            start_proxy(LocalSandbox(), allow_loopback_policy("a.test"), listen=f"127.0.0.1:{taken.port}", **self.dirs)
        self.assertEqual(raised.exception.exit_code, 2)
        self.assertIn(str(taken.port), raised.exception.message)

    def test_an_invalid_policy_is_never_served(self) -> None:
        bad = Policy.from_dict({"network": {"mode": "allowlist", "allowed_hosts": ["https://x.test/?q"]}})
        with self.assertRaises(LeashError) as raised:
            start_proxy(LocalSandbox(), bad, **self.dirs)
        self.assertIn(raised.exception.exit_code, (1, 2))
        self.assertIn("allowed_hosts", raised.exception.message)

    def test_a_second_start_in_the_same_workdir_is_refused_while_the_first_runs(self) -> None:
        sandbox = LocalSandbox()
        with start_proxy(sandbox, allow_loopback_policy("a.test"), **self.dirs):
            with self.assertRaises(LeashError) as raised:
                start_proxy(sandbox, allow_loopback_policy("a.test"), **self.dirs)
            self.assertIn("still running", raised.exception.message)
        self.assertFalse(leash_egress.stop_leftover(sandbox, self.dirs["workdir"]))


class LocalRunTests(unittest.TestCase):
    """`leash run` through the local adapter: leash's own sandbox (user namespaces) on this machine; skipped loudly
    where the kernel refuses them, unless LEASH_REQUIRE_SANDBOX=1 (CI)."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="leash-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def run_sandboxed(self, policy: Policy, argv: list, **options) -> leash_egress.RunResult:
        try:
            return run(LocalSandbox(), policy, argv, workdir=f"{self.dir}/work", **options)
        except LeashError as refused:
            if refused.exit_code != 125 or os.environ.get("LEASH_REQUIRE_SANDBOX"):
                raise
            print(f"SKIPPED: no sandbox here ({refused.message})", file=sys.stderr)
            self.skipTest("no sandbox here")

    def test_the_command_runs_filtered_and_its_requests_are_returned(self) -> None:
        if not shutil.which("curl"):
            self.skipTest("no curl")
        origin = Origin()
        self.addCleanup(origin.close)
        script = (
            f"curl -s -w ' %{{http_code}}' http://allowed.test:{origin.port}/a; "
            "curl -s -o /dev/null -w ' %{http_code}' http://refused.test/b; exit 7"
        )
        policy = allow_loopback_policy("allowed.test", origin.port)
        result = self.run_sandboxed(policy, ["sh", "-c", script], args=["--resolve", "allowed.test:127.0.0.1"])
        self.assertEqual((result.exit_code, result.stdout), (7, "hello from /a 200 403"), result.stderr)
        self.assertNotIn(leash_egress.proxy.STARTED_MARK, result.stderr)
        self.assertEqual([e["decision"] for e in decisions(result.audit)], ["allow", "block"])

    def test_a_command_that_exits_125_itself_is_its_own_status_not_a_refusal(self) -> None:
        result = self.run_sandboxed(allow_loopback_policy("a.test"), ["sh", "-c", "echo ran; exit 125"])
        self.assertEqual((result.exit_code, result.stdout), (125, "ran\n"))

    def test_a_command_leash_will_not_start_raises_instead_of_running(self) -> None:
        marker = pathlib.Path(self.dir, "ran")
        with self.assertRaises(LeashError) as raised:
            # uid-firewall needs --user: leash refuses before the command.
            run(
                LocalSandbox(),
                allow_loopback_policy("a.test"),
                ["touch", str(marker)],
                containment="uid-firewall",
                workdir=f"{self.dir}/work",
            )
        self.assertIn(raised.exception.exit_code, (2, 125))
        self.assertIn("leash", raised.exception.message)
        self.assertFalse(marker.exists())


def docker_ready() -> str:
    """Why Docker tests cannot run here ('' when they can)."""
    if not shutil.which("docker"):
        return "no docker command"
    info = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=TIMEOUT)
    if info.returncode != 0:
        return f"no image {IMAGE} (tests/docker/build-image.sh builds it)"
    return ""


class Container:
    """A `--network none` container of the test image (with `docker_args`), removed on close."""

    def __init__(self, docker_args: tuple = ()) -> None:
        run_args = ["docker", "run", "-d", "--rm", "--network", "none", "--label", "leash.test=python", *docker_args]
        started = subprocess.run(
            [*run_args, IMAGE, "sleep", "600"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if started.returncode != 0:
            raise RuntimeError(f"docker run: {started.stderr}")
        self.id = started.stdout.strip()

    def sh(self, script: str, user: str = "root") -> subprocess.CompletedProcess:
        return subprocess.run(
            ["docker", "exec", "-u", user, self.id, "sh", "-c", script], capture_output=True, text=True, timeout=TIMEOUT
        )

    def leash_processes(self) -> list:
        """Every process in the container whose executable is a leash binary."""
        out = self.sh("for p in /proc/[0-9]*; do readlink $p/exe; done 2>/dev/null").stdout
        return [line for line in out.split() if line.endswith("/leash")]

    def close(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.id], capture_output=True, timeout=TIMEOUT)


class DockerTestCase(unittest.TestCase):
    DOCKER_ARGS: tuple = ()

    def setUp(self) -> None:
        why = docker_ready()
        if why:
            if os.environ.get("LEASH_REQUIRE_DOCKER"):
                self.fail(f"Docker unavailable ({why}) and LEASH_REQUIRE_DOCKER is set")
            print(f"SKIPPED: Docker is unavailable ({why}); Docker tests did not run", file=sys.stderr)
            self.skipTest(why)
        self.box = Container(self.DOCKER_ARGS)
        self.addCleanup(self.box.close)
        # An origin inside the container (its only network is loopback): python3's http.server.
        self.box.sh("mkdir -p /srv/www && echo paper > /srv/www/paper")
        serve = ["python3", "-m", "http.server", str(ORIGIN_PORT), "--bind", "127.0.0.1", "--directory", "/srv/www"]
        subprocess.run(["docker", "exec", "-d", self.box.id] + serve, check=True, timeout=TIMEOUT)
        up = f"curl -s -o /dev/null --noproxy '*' http://127.0.0.1:{ORIGIN_PORT}/paper"
        self.assertEqual(self.box.sh(f"for i in $(seq 100); do {up} && exit 0; sleep 0.1; done; exit 1").returncode, 0)


class DockerProxyTests(DockerTestCase):
    def test_leash_uploaded_into_a_container_filters_its_curl_and_leaves_nothing_running(self) -> None:
        proxy = start_proxy(
            DockerSandbox(self.box.id),
            allow_loopback_policy("allowed.test", ORIGIN_PORT),
            args=["--resolve", "allowed.test:127.0.0.1"],
        )
        self.assertEqual(len(self.box.leash_processes()), 1)
        curl = "curl -s -w ' %{http_code}' -x " + proxy.env["HTTP_PROXY"]
        # As the agent's uid: it reads the CA and the env file, not the policy or the log.
        said = self.box.sh(
            f"{curl} http://allowed.test:{ORIGIN_PORT}/paper; {curl} -o /dev/null http://refused.test/x", "1000"
        )
        self.assertEqual(said.stdout, "paper\n 200 403", said.stderr)
        for private in ("/opt/leash/policy.json", "/opt/leash/audit.jsonl", "/opt/leash/stdout", "/opt/leash/stderr"):
            self.assertNotEqual(self.box.sh(f"cat {private}", "1000").returncode, 0, private)
        for public in ("/opt/leash-public/leash.env", proxy.ca_cert, proxy.ca_bundle):
            self.assertEqual(self.box.sh(f"cat {public} >/dev/null", "1000").returncode, 0, public)
        entries = proxy.stop()
        self.assertEqual(
            [(e["decision"], e["host"]) for e in decisions(entries)],
            [("allow", "allowed.test"), ("block", "refused.test")],
        )
        self.assertEqual(self.box.leash_processes(), [])

    def test_a_policy_leash_refuses_in_the_container_raises_and_leaves_nothing_running(self) -> None:
        bad = Policy.from_dict({"network": {"mode": "allowlist", "allowed_hosts": ["*"]}})
        with self.assertRaises(LeashError) as raised:
            start_proxy(DockerSandbox(self.box.id), bad)
        self.assertIn("allowed_hosts", raised.exception.message)
        self.assertEqual(self.box.leash_processes(), [])


class DockerRunTests(DockerTestCase):
    """`leash run` uploaded into a container: the containment the container allows, or a refusal (docs/inside.md)."""

    # What `netns` needs, and nothing in the image (docs/inside.md's platform table).
    DOCKER_ARGS = ("--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN")

    def test_with_the_capabilities_netns_needs_the_agent_runs_as_its_uid_and_only_through_leash(self) -> None:
        curl = "curl -s -o /dev/null -w '%{http_code} '"
        script = f"{curl} http://allowed.test:{ORIGIN_PORT}/paper; {curl} http://refused.test/; id -u"
        result = run(
            DockerSandbox(self.box.id),
            allow_loopback_policy("allowed.test", ORIGIN_PORT),
            ["sh", "-c", script],
            user="1000",
            args=["--resolve", "allowed.test:127.0.0.1"],
        )
        self.assertEqual((result.exit_code, result.stdout), (0, "200 403 1000\n"), result.stderr)
        decided = [(e["decision"], e["host"], e.get("containment")) for e in decisions(result.audit)]
        self.assertEqual(decided, [("allow", "allowed.test", "netns"), ("block", "refused.test", "netns")])
        self.assertEqual(self.box.leash_processes(), [])

    def test_under_dockers_defaults_run_raises_naming_what_to_grant_and_the_command_never_runs(self) -> None:
        plain = Container()
        self.addCleanup(plain.close)
        with self.assertRaises(LeashError) as raised:
            run(DockerSandbox(plain.id), allow_loopback_policy("a.test"), ["touch", "/tmp/ran"], user="1000")
        self.assertEqual(raised.exception.exit_code, 125)
        self.assertIn("NET_ADMIN", raised.exception.message)
        self.assertNotEqual(plain.sh("test -e /tmp/ran").returncode, 0)


class DockerBenchflowTests(DockerTestCase):
    def test_the_drop_in_filters_benchflows_denylist_and_writes_its_trajectory_log(self) -> None:
        env = DockerEnv(self.box.id)  # the calls benchflow's egress module makes on its env, over docker
        denylist = bf.EgressDenylist(("https://paper.test/abs/2401.01234/",), ("blocked.test",))
        rollout = pathlib.Path(tempfile.mkdtemp(prefix="leash-rollout-"))
        self.addCleanup(shutil.rmtree, rollout, True)

        async def rollout_with_agent() -> dict:
            await bf.start_egress_denylist(env, "agent", denylist)
            # benchflow starts it again before each connection: the first one is ended, one leash runs.
            await bf.start_egress_denylist(env, "agent", denylist)
            self.assertEqual(len(self.box.leash_processes()), 1)
            agent = bf.denylist_agent_env({})
            curl = "curl -s -o /dev/null -w '%{http_code} '"
            curl += f" --cacert {agent['CURL_CA_BUNDLE']} -x {agent['HTTPS_PROXY']}"
            said = (
                await env.exec(
                    f"{curl} https://paper.test/abs/2401.01234; {curl} https://paper.test/abs/2401.01234v2; "
                    f"{curl} http://blocked.test/; {curl} https://paper.test/abs/9999.00001",
                    user="1000",
                )
            ).stdout
            await bf.stop_egress_denylist(env, rollout)
            return said

        said = asyncio.run(rollout_with_agent())
        # The paper and its v2 refused inside TLS (the CA where benchflow's agents look for it), the host refused,
        # another paper allowed (and not reached: the container has no network).
        codes = said.split()
        self.assertEqual(codes[:3], ["403", "403", "403"], said)
        self.assertNotEqual(codes[3], "403", said)
        blocked = [
            json.loads(line) for line in (rollout / "trajectory" / bf.TRAJECTORY_LOG_NAME).read_text().splitlines()
        ]
        self.assertEqual([b["action"] for b in blocked], ["blocked"] * 3)
        self.assertEqual(blocked[0]["url"], "https://paper.test/abs/2401.01234")
        self.assertTrue(blocked[0]["rule"].startswith("url:paper.test/abs/2401.01234"), blocked[0])
        self.assertEqual(blocked[2]["rule"], "host:blocked.test")
        leash_log = [json.loads(line) for line in (rollout / "trajectory" / bf.LEASH_LOG_NAME).read_text().splitlines()]
        # leash's own log beside it: every decision (the tunnels inspected, the paper allowed and not reachable).
        decided = [(e["decision"], e["host"], e.get("path")) for e in decisions(leash_log)]
        self.assertEqual(decided, [
            ("inspect", "paper.test", None), ("block", "paper.test", "/abs/2401.01234"),
            ("inspect", "paper.test", None), ("block", "paper.test", "/abs/2401.01234v2"),
            ("block", "blocked.test", "/"),
            ("inspect", "paper.test", None), ("allow", "paper.test", "/abs/9999.00001"),
        ])  # fmt: skip
        self.assertEqual(self.box.leash_processes(), [])
        self.assertNotEqual(self.box.sh(f"ls {bf.RUNTIME_DIR} {bf.CA_DIR}").returncode, 0)

    def test_the_example_harness_runs_against_a_container(self) -> None:
        example = ROOT / "examples" / "python" / "benchflow_drop_in.py"
        done = subprocess.run(
            [sys.executable, str(example), self.box.id], capture_output=True, text=True, timeout=TIMEOUT * 2
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("refused by leash: https://arxiv.org/abs/2401.01234", done.stdout)


if __name__ == "__main__":
    unittest.main()
