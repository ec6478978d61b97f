//! `leash docker` against the real Docker engine: containers of the locally built `leash-test` image
//! (tests/docker/build-image.sh: busybox, curl, python3) reach an origin on the host's loopback only through
//! leash's proxy, and nothing else. Where Docker is absent the tests say so loudly and pass, unless
//! `LEASH_REQUIRE_DOCKER=1` (CI), which turns that into a failure. Every container carries a per-test label and each
//! test checks none is left behind. No address but loopback is ever targeted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;
#[path = "docker/credentials.rs"]
mod credentials;
#[path = "docker/reach.rs"]
mod reach;

use common::{decided, https_material, log_lines, lookups_and_decisions, origin, stderr, stdout, HttpsOrigin};

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
const IMAGE: &str = "leash-test:latest";
/// Longest any one leash or docker invocation in these tests may take before the test fails.
const BOUND: Duration = Duration::from_secs(120);

/// Docker answers and the test image is built (once per test binary); else skip loudly, or fail under CI.
fn docker_ready() -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| common::docker_image(IMAGE, ""));
    match ready {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("LEASH_REQUIRE_DOCKER").is_none(),
                "Docker unavailable ({why}) but LEASH_REQUIRE_DOCKER is set"
            );
            {
                // Written past the test harness's capture: a skip must show where the results are read.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: Docker is unavailable ({why}); `leash docker` tests did not run"
                );
            };
            false
        }
    }
}

/// A unique label value for this test's containers.
fn label(test: &str) -> String {
    format!("leash.test={test}-{}", std::process::id())
}

fn leftovers(label: &str) -> String {
    let o = Command::new("docker").args(["ps", "-aq", "--filter", &format!("label={label}")]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// Name prefix of the networks tests make on purpose (the neighbour test), which run alongside the others.
const TEST_NETWORK_PREFIX: &str = "leash-test-";

/// The IDs of the Docker networks there are now, less those tests make on purpose (none when Docker does not
/// answer).
fn networks() -> BTreeSet<String> {
    let o = Command::new("docker").args(["network", "ls", "--no-trunc", "--format", "{{.ID}} {{.Name}}"]).output();
    let listing = o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    listing
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, name)| !name.starts_with(TEST_NETWORK_PREFIX))
        .map(|(id, _)| id.to_owned())
        .collect()
}

/// Asserts that no network has appeared since `before` was taken: leash's containers have `--network none`, and a
/// run must leave no network behind either.
fn assert_no_new_network(before: &BTreeSet<String>) {
    // Docker always has its `bridge`, `host` and `none` networks: an empty listing means the check saw nothing.
    assert!(!before.is_empty(), "`docker network ls` listed no network");
    let new: Vec<_> = networks().difference(before).cloned().collect();
    assert!(new.is_empty(), "a network was left behind: {new:?}");
}

/// Runs a command to completion within `BOUND`, killing it (and failing) beyond.
fn bounded(cmd: &mut Command) -> Output {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_bounded(child, BOUND)
}

fn wait_bounded(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("did not finish within {limit:?}");
        }
    }
}

/// A policy allowing `docs.test` on the origin's port, with loopback exempt from the internal-destination check
/// (the origin lives on the host's loopback).
fn policy(dir: &Path, port: u16) -> PathBuf {
    let p = dir.join("policy.yaml");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// `leash docker run --policy P --resolve docs.test:127.0.0.1 --log L --label LABEL IMAGE sh -c SCRIPT(port)`.
fn docker_run(test: &str, script: impl Fn(u16) -> String) -> (Output, Vec<serde_json::Value>) {
    docker_run_with(test, &[], script)
}

/// `docker_run` with more leash options.
fn docker_run_with(test: &str, extra: &[&str], script: impl Fn(u16) -> String) -> (Output, Vec<serde_json::Value>) {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let label = label(test);
    let nets = networks();
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--policy"])
            .arg(policy(dir.path(), port))
            .args(["--resolve", "docs.test:127.0.0.1", "--log"])
            .arg(&log)
            .args(extra)
            .args(["--label", &label, IMAGE, "sh", "-c", &script(port)]),
    );
    assert_eq!(leftovers(&label), "", "a container was left behind");
    assert_no_new_network(&nets);
    (o, log_lines(&log))
}

#[test]
fn docker_run_fetches_through_the_proxy_refuses_the_rest_and_propagates_the_exit_status() {
    if !docker_ready() {
        return;
    }
    let (o, lines) = docker_run("fetch", |port| {
        format!(
            "curl -s http://docs.test:{port}/ok; echo; \
             curl -s -o /dev/null -w '%{{http_code}}\\n' http://evil.test:{port}/x; \
             python3 -c 'import urllib.request as u; \
               print(u.urlopen(\"http://docs.test:{port}/py\").read().decode())'; \
             echo \"mode: $LEASH_NETWORK_MODE\"; exit 7"
        )
    });
    assert_eq!(o.status.code(), Some(7), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "origin\n403\norigin\nmode: allowlist\n", "the container knows it is filtered, and how");
    let decisions: Vec<_> = lines.iter().filter(|l| l.get("decision").is_some()).collect();
    assert_eq!(decisions.len(), 3, "{lines:?}");
    assert_eq!((&decisions[0]["decision"], &decisions[0]["path"]), (&"allow".into(), &"/ok".into()));
    assert_eq!(decisions[1]["reason"], "not-allowed");
    assert_eq!(decisions[2]["path"], "/py");
    let container = lines[0]["container"].as_str().unwrap_or_default();
    assert_eq!(container.len(), 64, "every line names the container: {lines:?}");
    assert!(lines.iter().all(|l| l["container"] == container), "{lines:?}");
}

#[test]
fn docker_run_inspects_https_with_the_run_ca_trusted_through_the_environment() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let port = origin.port;
    let policy = dir.path().join("inspect.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: [docs.test/secret]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&policy, text).unwrap();
    // curl trusts the run's CA through CURL_CA_BUNDLE, Python through SSL_CERT_FILE: nothing on the command line.
    let script = format!(
        "curl -s https://docs.test:{port}/ok; echo; curl -s https://docs.test:{port}/secret/x | head -1; \
         python3 -c 'import urllib.request as u; print(u.urlopen(\"https://docs.test:{port}/py\").read().decode())'"
    );
    let label = label("https");
    let nets = networks();
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--policy"])
            .arg(&policy)
            .args(["--resolve", "docs.test:127.0.0.1", "--upstream-ca"])
            .arg(&upstream_ca)
            .args(["--label", &label, IMAGE, "sh", "-c", &script]),
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "origin-tls /ok\nleash: docs.test/secret/x refused by the egress policy (rule)\norigin-tls /py\n",
        "stderr: {}",
        stderr(&o)
    );
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_run_splices_a_connect_tunnel_to_an_allowed_host_end_to_end() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let port = origin.port;
    // The policy and the log beside the CA would be refused: the CA's directory is mounted in.
    let conf = tempfile::tempdir().unwrap();
    let policy = conf.path().join("splice.yaml");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&policy, text).unwrap();
    // No path rule on docs.test: the tunnel is spliced, so the client sees the origin's own certificate (signed by
    // the test CA, mounted in) rather than one from leash's CA.
    let script = format!(
        "curl -s --cacert /certs/ca.pem https://docs.test:{port}/spliced; echo; \
         curl -s --cacert /certs/ca.pem -o /dev/null -w '%{{http_connect}}\\n' https://evil.test:{port}/ || echo refused"
    );
    let label = label("splice");
    let nets = networks();
    let log = conf.path().join("audit.jsonl");
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--policy"])
            .arg(&policy)
            .args(["--resolve", "docs.test:127.0.0.1", "--log"])
            .arg(&log)
            .args(["--label", &label, "-v", &format!("{}:/certs:ro", dir.path().display())])
            .args([IMAGE, "sh", "-c", &script]),
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    // The proxy answers the CONNECT to a host the policy refuses with its own 403, before any TLS.
    assert_eq!(stdout(&o), "origin-tls /spliced\n403\nrefused\n", "stderr: {}", stderr(&o));
    let lines = log_lines(&log);
    assert_eq!((&lines[0]["method"], &lines[0]["decision"]), (&"CONNECT".into(), &"allow".into()), "{lines:?}");
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_run_leaves_no_direct_way_out() {
    if !docker_ready() {
        return;
    }
    // The origin listens on the host's loopback; inside, 127.0.0.1 is the container's own, where only the proxy
    // and the DNS stub listen. A direct fetch by address, a lookup of a refused name, another resolver, raw sockets,
    // IPv6 and any interface or route but `lo` must all fail. (A fetch by an allowed name reaches leash's transparent
    // listener at the container-local 127.0.0.2 and is decided there: the next test.)
    let (o, _) = docker_run("no-way-out", |port| {
        format!(
            "curl -s --noproxy '*' --max-time 5 http://127.0.0.1:{port}/ && echo DIRECT-REACHED; \
             python3 -c 'import socket; socket.getaddrinfo(\"evil.test\", 80)' 2>/dev/null && echo DNS-ANSWERED; \
             python3 -c 'import socket; print(sorted({{a[4][0] for a in socket.getaddrinfo(\"docs.test\", 80)}}))'; \
             grep nameserver /etc/resolv.conf | grep -vx 'nameserver 127.0.0.1' && echo OTHER-RESOLVER; \
             python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' \
               2>/dev/null && echo RAW-SOCKET; \
             python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>/dev/null \
               && echo PACKET-SOCKET; \
             ls /sys/class/net | grep -vx lo && echo OTHER-INTERFACE; \
             ip route | grep . && echo ROUTE; \
             grep . /proc/net/if_inet6 && echo IPV6; \
             python3 -c 'import socket; socket.socket(socket.AF_INET6).bind((\"::1\", 0))' 2>/dev/null \
               && echo IPV6-LOOPBACK; \
             echo checked"
        )
    });
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    for escape in
        ["DIRECT", "origin", "DNS-ANSWERED", "OTHER-RESOLVER", "RAW-SOCKET", "PACKET", "INTERFACE", "ROUTE", "IPV6"]
    {
        assert!(!out.contains(escape), "{escape}: {out}");
    }
    assert_eq!(out, "['127.0.0.2']\nchecked\n", "an allowed name resolves to the container-local address only");
}

/// A neighbour container on a Docker network this test makes: TCP on 8080 and UDP on 53, each hit printed.
const NEIGHBOUR: &str = r#"
import socket, threading, sys
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 53))
    while True:
        data, peer = u.recvfrom(512); print("UDP-HIT", peer[0], flush=True); u.sendto(data, peer)
threading.Thread(target=udp, daemon=True).start()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(("0.0.0.0", 8080)); t.listen()
print("ready", flush=True)
while True:
    c, peer = t.accept(); req = c.recv(200).split(b"\r\n")[0].decode(errors="replace")
    print("TCP-HIT", peer[0], req, flush=True); c.sendall(b"HTTP/1.0 200 OK\r\n\r\nneighbour"); c.close()
"#;

/// From inside: the neighbour by address over TCP (ignoring the proxy, and through it), and a DNS query to it.
const TO_NEIGHBOUR: &str = r#"
import socket, subprocess, sys
ip = sys.argv[1]
try:
    s = socket.create_connection((ip, 8080), timeout=3); s.sendall(b"GET /direct HTTP/1.0\r\n\r\n"); print("TCP", s.recv(100))
except OSError as e:
    print("tcp refused", type(e).__name__)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04evil\x04test\x00\x00\x01\x00\x01", (ip, 53))
    print("UDP", u.recvfrom(512))
except OSError as e:
    print("udp refused", type(e).__name__)
out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", f"http://{ip}:8080/proxied"], capture_output=True, text=True)
print("proxied", out.stdout)
"#;

#[test]
fn docker_run_cannot_reach_a_neighbour_container_by_address_over_tcp_or_udp() {
    if !docker_ready() {
        return;
    }
    let id = std::process::id();
    let (net, label) = (format!("{TEST_NETWORK_PREFIX}neighbours-{id}"), label("neighbour"));
    let docker = |args: &[&str]| bounded(Command::new("docker").args(args));
    assert!(docker(&["network", "create", "--internal", "--label", &label, &net]).status.success());
    let started = docker(&["run", "-d", "--network", &net, "--label", &label, IMAGE, "python3", "-c", NEIGHBOUR]);
    let neighbour = stdout(&started).trim().to_owned();
    let cleanup = || {
        docker(&["rm", "-f", &neighbour]);
        docker(&["network", "rm", &net]);
    };
    let ip =
        stdout(&docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &neighbour]))
            .trim()
            .to_owned();
    // Control: a plain container on the same network reaches the neighbour, so a miss below means leash held.
    let control = docker(&[
        "run",
        "--rm",
        "--network",
        &net,
        "--label",
        &label,
        IMAGE,
        "curl",
        "-s",
        "--max-time",
        "10",
        "--retry",
        "5",
        "--retry-connrefused",
        &format!("http://{ip}:8080/control"),
    ]);
    let o = bounded(Command::new(LEASH).args([
        "docker",
        "run",
        "--allow",
        "docs.test",
        "--label",
        &label,
        IMAGE,
        "python3",
        "-c",
        TO_NEIGHBOUR,
        &ip,
    ]));
    let hits = stdout(&docker(&["logs", &neighbour]));
    cleanup();
    assert_eq!(stdout(&control), "neighbour", "the control did not reach the neighbour: {}", stderr(&control));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("tcp refused") && out.contains("udp refused"), "{out}");
    assert!(out.contains("proxied 403"), "an IP literal through the proxy is refused: {out}");
    let hit_lines: Vec<&str> = hits.lines().filter(|l| l.contains("HIT")).collect();
    assert_eq!(hit_lines.len(), 1, "only the control reached the neighbour: {hits}");
    assert!(hit_lines[0].contains("/control"), "{hits}");
    assert_eq!(leftovers(&label), "", "a container was left behind");
}

#[test]
fn docker_run_proxy_unaware_clients_are_decided_at_the_transparent_listener() {
    if !docker_ready() {
        return;
    }
    // curl ignoring the proxy variables: the DNS stub gives the allowed name 127.0.0.2, where leash listens on the
    // policy's port and decides on the Host header; another Host is refused, a refused name does not resolve.
    let (o, lines) = docker_run("transparent", |port| {
        format!(
            "curl -s --noproxy '*' --max-time 5 http://docs.test:{port}/t; echo; \
             curl -s --noproxy '*' -o /dev/null -w '%{{http_code}}\\n' -H 'Host: evil.test:{port}' http://docs.test:{port}/; \
             curl -s --noproxy '*' --max-time 5 http://evil.test:{port}/ >/dev/null; echo \"curl exit $?\""
        )
    });
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "origin\n403\ncurl exit 6\n", "stderr: {}", stderr(&o));
    let (lookups, decisions) = lookups_and_decisions(&lines);
    let looked_up = decided(&lookups);
    assert!(looked_up.contains(&("allow".to_owned(), "docs.test".to_owned())), "{looked_up:?}");
    assert!(looked_up.contains(&("block".to_owned(), "evil.test".to_owned())), "the refused lookup: {looked_up:?}");
    assert_eq!(decisions.len(), 2, "{lines:?}");
    assert_eq!(decisions[0]["decision"], "allow");
    assert_eq!(decisions[1]["reason"], "not-allowed");
}

#[test]
fn docker_run_refuses_each_option_that_defeats_the_policy() {
    let refused: &[&[&str]] = &[
        &["--network=host"],
        &["--network", "host"],
        &["--net=bridge"],
        &["--network", "container:other"],
        &["--privileged"],
        &["--privileged=true"],
        &["--cap-add=ALL"],
        &["--cap-add", "NET_ADMIN"],
        &["--cap-add", "net_raw"],
        &["--cap-add", "CAP_SYS_ADMIN"],
        &["--pid", "host"],
        &["--userns=host"],
        &["-v", "/var/run/docker.sock:/var/run/docker.sock"],
        &["--volume=/run:/r"],
        &["--mount", "type=bind,source=/var/run/docker.sock,target=/s"],
        &["--mount", "TYPE=BIND,source=/var/run/docker.sock,target=/s"],
        &["--mount=\"type=bind\",src=/run,dst=/r"],
        &[
            "--mount",
            "type=volume,dst=/x,volume-driver=local,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/var/run",
        ],
        &["--volumes-from", "other"],
        &["--volume-driver", "someplugin"],
    ];
    let label = label("refused");
    let nets = networks();
    for options in refused {
        let o = bounded(
            Command::new(LEASH)
                .args(["docker", "run", "--allow", "docs.test", "--label", &label])
                .args(*options)
                .args([IMAGE, "true"]),
        );
        assert_eq!(o.status.code(), Some(2), "{options:?}: {}", stderr(&o));
        let err = stderr(&o);
        let name = options[0].trim_start_matches('-').split('=').next().unwrap();
        assert!(err.contains("refusing") && err.contains(name), "{options:?} named in: {err}");
        assert!(err.contains("--danger-allow-unsafe-docker-options"), "{err}");
    }
    // A directory holding a socket a host process listens on (a relay, an agent, a tmux server) is refused too.
    let dir = tempfile::tempdir().unwrap();
    let _relay = std::os::unix::net::UnixListener::bind(dir.path().join("relay.sock")).unwrap();
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--allow", "docs.test", "--label", &label, "-v"])
            .arg(format!("{}:/mnt", dir.path().display()))
            .args([IMAGE, "true"]),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("relay.sock"), "the socket is named: {}", stderr(&o));
    let not_csv = "type=\"bind\",source=/var/run/docker.sock,target=/s";
    for usage in [&["-d"][..], &["--restart", "always"], &["--frobnicate"], &["--mount", not_csv]] {
        let o = bounded(Command::new(LEASH).args(["docker", "run"]).args(usage).args([IMAGE, "true"]));
        assert_eq!(o.status.code(), Some(2), "{usage:?}: {}", stderr(&o));
    }
    if docker_ready() {
        assert_eq!(leftovers(&label), "", "a refused run created a container");
        assert_no_new_network(&nets);
    }
}

#[test]
fn docker_run_refuses_an_existing_volume_made_to_bind_a_host_path() {
    if !docker_ready() {
        return;
    }
    // Created by the user beforehand, a local volume can be a bind of any host directory: here the one holding
    // the Docker socket. Mounting it by name (with -v or --mount) must be refused like the bind itself.
    let volume = format!("leash-test-bind-{}", std::process::id());
    let created = Command::new("docker")
        .args(["volume", "create", "--opt", "type=none", "--opt", "o=bind", "--opt", "device=/var/run", &volume])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", stderr(&created));
    let label = label("volume");
    let plain = format!("leash-test-plain-{}", std::process::id());
    let cases = [
        (vec!["-v".to_owned(), format!("{volume}:/x")], true),
        (vec!["--mount".to_owned(), format!("type=volume,src={volume},dst=/x")], true),
        // An ordinary named volume (new here, so Docker creates it empty) still runs.
        (vec!["-v".to_owned(), format!("{plain}:/x")], false),
    ];
    let mut outcomes = Vec::new();
    for (options, refused) in &cases {
        let o = bounded(
            Command::new(LEASH)
                .args(["docker", "run", "--allow", "docs.test", "--label", &label])
                .args(options)
                .args([IMAGE, "true"]),
        );
        outcomes.push((options.clone(), *refused, o));
    }
    let _ = Command::new("docker").args(["volume", "rm", "-f", &volume, &plain]).output();
    for (options, refused, o) in outcomes {
        if refused {
            assert_eq!(o.status.code(), Some(2), "{options:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("device=/var/run"), "{options:?}: the reason is given: {}", stderr(&o));
        } else {
            assert_eq!(o.status.code(), Some(0), "{options:?}: {}", stderr(&o));
        }
    }
    assert_eq!(leftovers(&label), "", "a container was left behind");
}

#[test]
fn docker_run_with_the_danger_override_runs_but_still_without_a_network() {
    if !docker_ready() {
        return;
    }
    let label = label("danger");
    let nets = networks();
    let o = bounded(Command::new(LEASH).args([
        "docker",
        "run",
        "--danger-allow-unsafe-docker-options",
        "--label",
        &label,
        "--cap-add",
        "SYS_ADMIN",
        IMAGE,
        "sh",
        "-c",
        "ls /sys/class/net; exit 3",
    ]));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning"), "{}", stderr(&o));
    assert_eq!(stdout(&o), "lo\n");
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_run_without_docker_refuses_with_125_and_runs_nothing() {
    let o = bounded(Command::new(LEASH).env("LEASH_DOCKER", "/nonexistent/docker").args([
        "docker",
        "run",
        "--allow",
        "docs.test",
        IMAGE,
        "true",
    ]));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot run `docker`"), "{}", stderr(&o));
    let o =
        bounded(Command::new(LEASH).env("LEASH_DOCKER", "false").args(["docker", "attach", "--allow", "x.test", "c"]));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
}

#[test]
fn docker_run_by_a_user_the_daemon_refuses_is_refused_with_125() {
    if !docker_ready() {
        return;
    }
    // nobody may not use the Docker socket here (root-owned, group docker).
    let o = bounded(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", LEASH, "docker", "run", "--allow", "x.test"])
            .args([IMAGE, "true"])
            .env("HOME", "/tmp"),
    );
    if stderr(&o).contains("setpriv:") {
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: cannot switch to nobody here: {}", stderr(&o));
        }
        return;
    }
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("may not use the Docker daemon"), "{}", stderr(&o));
}

#[test]
fn docker_run_stops_and_removes_the_container_on_sigint_sigterm_and_sighup() {
    if !docker_ready() {
        return;
    }
    let nets = networks();
    for signal in ["INT", "TERM", "HUP"] {
        let label = label(&format!("sig{signal}"));
        let mut child = Command::new(LEASH)
            .args(["docker", "run", "--label", &label, "--init", IMAGE, "sh", "-c", "echo started; exec sleep 300"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line, "started\n", "the command runs once the proxy is in place");
        let started = Instant::now();
        Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        let o = wait_bounded(child, Duration::from_secs(30));
        // leash stops the container (`docker stop`: SIGTERM to its init, which passes it on to `sleep`).
        assert_eq!(o.status.code(), Some(143), "SIG{signal}: {}", stderr(&o));
        assert!(started.elapsed() < Duration::from_secs(9), "SIG{signal}: stopped at once, not after the grace");
        assert_eq!(leftovers(&label), "", "SIG{signal}");
        assert_no_new_network(&nets);
    }
}

#[test]
fn docker_run_without_the_start_gate_still_serves_and_reports_a_quick_exit() {
    if !docker_ready() {
        return;
    }
    let label = label("no-gate");
    let nets = networks();
    let o = bounded(Command::new(LEASH).args(["docker", "run", "--no-start-gate", "--label", &label, IMAGE, "true"]));
    assert_eq!(o.status.code(), Some(0), "a command done before leash bound: {}", stderr(&o));
    let (o, _) = docker_run_with("no-gate-fetch", &["--no-start-gate"], |port| {
        format!(
            "i=0; until curl -sf http://docs.test:{port}/late; do i=$((i+1)); [ $i -gt 100 ] && exit 9; \
             sleep 0.1; done; exit 4"
        )
    });
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert_eq!(stdout(&o), "origin");
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_run_failures_leave_nothing_behind() {
    if !docker_ready() {
        return;
    }
    let label = label("failures");
    let nets = networks();
    // An image that is not there: refused before anything is created.
    let o = bounded(Command::new(LEASH).args(["docker", "run", "--label", &label, "leash-test-missing:nope", "true"]));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    // attach to a container that does not exist: refused, nothing served.
    let o =
        bounded(Command::new(LEASH).args(["docker", "attach", "--allow", "x.test", "leash-test-no-such-container"]));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("No such container"), "{}", stderr(&o));
    // A command that is not in the image: the container's own failure status, and the container removed.
    let o = bounded(Command::new(LEASH).args(["docker", "run", "--label", &label, IMAGE, "/nonexistent/cmd"]));
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_attach_serves_a_running_none_network_container_until_it_exits() {
    if !docker_ready() {
        return;
    }
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let label = label("attach");
    let nets = networks();
    // The harness's container: no network, curl's (lowercase) proxy variable; it polls until leash serves it.
    let script = format!(
        "i=0; until curl -sf -o /tmp/body http://docs.test:{port}/attached; do i=$((i+1)); \
         [ $i -gt 300 ] && exit 9; sleep 0.1; done; cat /tmp/body; exit 3"
    );
    let run = bounded(Command::new("docker").args([
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        &label,
        "-e",
        "http_proxy=http://127.0.0.1:3128",
        IMAGE,
        "sh",
        "-c",
        &script,
    ]));
    assert!(run.status.success(), "{}", stderr(&run));
    let id = stdout(&run).trim().to_owned();
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "attach", "--policy"])
            .arg(policy(dir.path(), port))
            .args(["--resolve", "docs.test:127.0.0.1", "--log"])
            .arg(&log)
            .arg(&id),
    );
    let logs = bounded(Command::new("docker").args(["logs", &id]));
    let _ = bounded(Command::new("docker").args(["rm", "-f", &id]));
    assert_eq!(o.status.code(), Some(3), "the container's status: {}", stderr(&o));
    assert!(stdout(&o).starts_with(&format!("listening inside {} on 127.0.0.1:3128", &id[..12])), "{}", stdout(&o));
    assert_eq!(stdout(&logs), "origin");
    let lines = log_lines(&log);
    assert_eq!(lines[0]["path"], "/attached", "{lines:?}");
    assert_eq!(lines[0]["container"], id.as_str());
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

#[test]
fn docker_attach_stops_serving_on_sigint_and_leaves_the_container_and_no_process_behind() {
    if !docker_ready() {
        return;
    }
    let label = label("attach-sigint");
    let run = bounded(Command::new("docker").args([
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        &label,
        IMAGE,
        "sleep",
        "60",
    ]));
    assert!(run.status.success(), "{}", stderr(&run));
    let id = stdout(&run).trim().to_owned();
    let mut child = Command::new(LEASH)
        .args(["docker", "attach", "--allow", "docs.test", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("listening inside"), "{line}");
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let o = wait_bounded(child, Duration::from_secs(30));
    let state = bounded(Command::new("docker").args(["inspect", "-f", "{{.State.Running}}", &id]));
    let waits = bounded(Command::new("pgrep").args(["-f", &format!("docker wait {id}")]));
    let _ = bounded(Command::new("docker").args(["rm", "-f", &id]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&state).trim(), "true", "the harness's container keeps running");
    assert_eq!(stdout(&waits), "", "no `docker wait` left running");
}

#[test]
fn docker_attach_refuses_a_container_with_a_network_and_says_why() {
    if !docker_ready() {
        return;
    }
    let label = label("attach-refused");
    let nets = networks();
    let run = bounded(Command::new("docker").args(["run", "-d", "--label", &label, IMAGE, "sleep", "60"]));
    if !run.status.success() {
        // A daemon without a default bridge still refuses nothing of leash's; say so rather than fail.
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ =
                writeln!(std::io::stderr(), "SKIPPED: cannot start a bridge-network container here: {}", stderr(&run));
        };
        return;
    }
    let id = stdout(&run).trim().to_owned();
    let o = bounded(Command::new(LEASH).args(["docker", "attach", "--allow", "docs.test", &id]));
    let _ = bounded(Command::new("docker").args(["rm", "-f", &id]));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("not isolated") && err.contains("eth0") && err.contains("--network none"), "{err}");
    assert_eq!(leftovers(&label), "");
    assert_no_new_network(&nets);
}

/// A python HTTP server on the host's loopback, serving `dir` and answering JSON-RPC POSTs on `/mcp` (an MCP tool
/// server's shape), listening on TCP `port` or, with `socket`, on that Unix socket; each request's path is appended
/// to `dir/served`.
fn mcp_server(dir: &Path, listen: &str) -> std::process::Child {
    let script = dir.join("mcp.py");
    std::fs::write(
        &script,
        r#"import http.server, json, os, socket, socketserver, sys
served = os.path.join(os.path.dirname(sys.argv[0]), "served")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def address_string(self): return "-"
    def answer(self, body):
        with open(served, "a") as f: f.write(self.path + "\n")
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self): self.answer(b"admin")
    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.answer(json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": {"tools": [{"name": "search"}]}}).encode())
listen = sys.argv[1]
if listen.startswith("/"):
    class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer): pass
    s = S(listen, H)
else:
    s = http.server.ThreadingHTTPServer(("127.0.0.1", int(listen)), H)
print("ready", flush=True)
s.serve_forever()
"#,
    )
    .unwrap();
    let mut child = Command::new("python3").arg(&script).arg(listen).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line, "ready\n");
    child
}

#[test]
fn docker_run_reaches_the_operators_services_and_nothing_else_on_the_host() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (mcp_port, neighbour) = (free(), origin());
    let mut tcp = mcp_server(dir.path(), &mcp_port.to_string());
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("tools.sock");
    let mut unix = mcp_server(sock_dir.path(), sock.to_str().unwrap());
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  services:\n    \
             - {{name: mcp, listen: 8080, target: '127.0.0.1:{mcp_port}', kind: http, paths: [/mcp]}}\n    \
             - {{name: tools, listen: /run/tools.sock, target: '{}'}}\n",
            sock.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("audit.jsonl");
    let label = label("services");
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    let script = format!(
        "curl -s -d '{call}' http://127.0.0.1:8080/mcp; echo; \
         curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:8080/admin; \
         curl -s -d '{call}' --unix-socket /run/tools.sock http://tools/mcp; echo; \
         curl -s -m 5 -o /dev/null -w '%{{http_code}}\\n' --noproxy '*' http://127.0.0.1:{neighbour}/; \
         NO_PROXY= no_proxy= curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{neighbour}/"
    );
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--policy"])
            .arg(&policy)
            .arg("--log")
            .arg(&log)
            .args(["--label", &label, IMAGE, "sh", "-c", &script]),
    );
    let _ = (tcp.kill(), unix.kill(), tcp.wait(), unix.wait());
    assert_eq!(leftovers(&label), "", "a container was left behind");
    let result = r#"{"jsonrpc": "2.0", "id": 7, "result": {"tools": [{"name": "search"}]}}"#;
    assert_eq!(
        stdout(&o),
        format!("{result}\n403\n{result}\n000\n403\n"),
        "the services answer, a path outside the service's and the host's other port do not; stderr: {}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("served")).unwrap(), "/mcp\n", "/admin never reached it");
    assert_eq!(std::fs::read_to_string(sock_dir.path().join("served")).unwrap(), "/mcp\n");
    let lines = log_lines(&log);
    let service_lines: Vec<_> = lines.iter().filter(|l| l.get("service").is_some()).collect();
    let seen: Vec<(&str, &str, &str)> = service_lines
        .iter()
        .map(|l| (l["method"].as_str().unwrap(), l["host"].as_str().unwrap(), l["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, [("POST", "mcp", "allow"), ("GET", "mcp", "block"), ("SERVICE", "tools", "allow")]);
    let tools_id = &service_lines[2]["id"];
    let outcome = lines.iter().find(|l| l["id"] == *tools_id && l.get("bytes_down").is_some()).unwrap();
    assert!(outcome["bytes_down"].as_u64().unwrap() > 60, "the relayed answer is counted: {outcome}");
}

#[test]
fn docker_run_asks_over_the_control_socket_and_the_answer_lets_the_request_through() {
    if !docker_ready() {
        return;
    }
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let socket = private.path().join("s.sock");
    let answering = socket.clone();
    // The person: answers `run` to the first question about new.test, as `leash ask` does.
    let person = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + BOUND;
        while std::time::Instant::now() < deadline {
            let o = Command::new(LEASH).args(["ask", "list", "--json", "--socket"]).arg(&answering).output().unwrap();
            let pending: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
            if let Some(q) = pending.iter().find(|q| q["host"] == "new.test") {
                let id = q["id"].to_string();
                let o = Command::new(LEASH).args(["ask", "answer", &id, "run", "--socket"]).arg(&answering).output();
                return o.unwrap().status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    let extra = ["--ask", "--ask-socket", socket.to_str().unwrap(), "--resolve", "new.test:127.0.0.1"];
    let (o, lines) = docker_run_with("ask", &extra, |port| {
        format!("curl -s -o /dev/null -w '%{{http_code}}\\n' http://new.test:{port}/asked; echo \"mode: $LEASH_NETWORK_MODE\"")
    });
    assert!(person.join().unwrap(), "no question about new.test was answered; stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "200\nmode: ask\n", "stderr: {}", stderr(&o));
    let line = lines.iter().find(|l| l["path"] == "/asked").unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!((line["reason"].as_str(), line["decided_by"].as_str()), (Some("approved"), Some("socket")), "{line}");
    assert!(!socket.exists(), "the control socket is removed when leash ends");
}
