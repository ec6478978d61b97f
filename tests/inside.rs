//! `leash run` inside sandboxes leash does not own (docs/inside.md): the leash binary copied into a container of the
//! locally built `leash-inside-test` image (tests/docker/build-image.sh with nftables, iptables and iproute2) and
//! run there as a harness would, under Docker's default seccomp profile, with and without `NET_ADMIN`. Every
//! container is `--network none`; where a test needs a route out, it adds a veth pair whose both ends stay in the
//! container (its packets reach nothing), so a containment that failed would show without anything leaving. Where
//! Docker is absent the tests skip loudly, unless `LEASH_REQUIRE_DOCKER=1` (CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
const IMAGE: &str = "leash-inside-test:latest";
const PACKAGES: &str = "nftables iptables iproute2";

/// A route out that reaches nothing: a veth pair whose both ends are the container's, IPv4 and IPv6 default routes
/// through it (a packet sent there is seen by no host).
const ROUTE_NOWHERE: &str = "ip link add v0 type veth && ip link set v0 up && ip link set veth0 up && \
    ip addr add 198.18.0.1/24 dev v0 && ip route add default dev v0 && \
    ip -6 addr add 2001:db8:1::1/64 dev v0 && ip -6 route add default dev v0 || exit 99";

/// A root daemon on the container's loopback (what hosted sandboxes run: an agent, a file server).
const ROOT_DAEMON: &str = "python3 -c 'import socket,time; s=socket.socket(); \
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", 9999)); s.listen(); \
    time.sleep(60)' & sleep 0.3";

/// Docker answers and the image is built (once per test binary); else skip loudly, or fail under CI.
fn docker_ready() -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| common::docker_image(IMAGE, PACKAGES));
    match ready {
        Ok(()) => true,
        Err(why) => {
            assert!(std::env::var_os("LEASH_REQUIRE_DOCKER").is_none(), "Docker unavailable ({why})");
            use std::io::Write as _;
            let _ =
                writeln!(std::io::stderr(), "SKIPPED: Docker is unavailable ({why}); containment tests did not run");
            false
        }
    }
}

/// `docker run --rm --network none [docker_args] IMAGE sh -c script`, leash at /leash (read-only), the container
/// labelled for this test, bounded in time.
fn container(docker_args: &[&str], script: &str) -> Output {
    let mount = format!("{LEASH}:/leash:ro");
    let label = format!("leash.test=inside-{}", std::process::id());
    Command::new("timeout")
        .args(["120", "docker", "run", "--rm", "--network", "none", "--label", &label, "-v", &mount])
        .args(["--sysctl", "net.ipv6.conf.all.disable_ipv6=0", "--sysctl", "net.ipv6.conf.default.accept_dad=0"])
        .args(docker_args)
        .args([IMAGE, "sh", "-c", script])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What the command does inside (as uid 1000): through the proxy to an allowed and a refused host, then every
/// direct way it could try, then against leash itself. One line each.
const AGENT: &str = r#"
get() { curl -s -m 10 -o /dev/null -w "$1 %{http_code}\n" "$2"; }
get allowed http://ok.test:8080/
get refused http://evil.test:8080/
curl -s -m 3 --noproxy '*' -o /dev/null http://127.0.0.1:8080/ && echo "direct-loopback open" || echo "direct-loopback shut"
curl -s -m 3 --noproxy '*' -o /dev/null http://192.0.2.1/ && echo "direct-v4 open" || echo "direct-v4 shut"
curl -s -m 3 --noproxy '*' -o /dev/null 'http://[2001:db8::1]/' && echo "direct-v6 open" || echo "direct-v6 shut"
python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 53)); print('udp open')" 2>/dev/null || echo "udp shut"
python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9999)); print('udp-loopback open')" 2>/dev/null || echo "udp-loopback shut"
(nft flush ruleset || iptables -F) >/dev/null 2>&1 && echo "flush done" || echo "flush refused"
cat /tmp/leash-files/audit.jsonl >/dev/null 2>&1 && echo "log readable" || echo "log unreadable"
kill -9 "$PPID" 2>/dev/null && echo "kill done" || echo "kill refused"
id -u
"#;

/// The script around `leash run --user 1000` in a container with a route that reaches nothing: an origin on the
/// loopback (root's, reached only by leash), leash's files in a root-only directory, the agent, then what is left.
fn firewall_scene(extra_env: &str) -> String {
    format!(
        "{ROUTE_NOWHERE}
mkdir -m 700 /tmp/leash-files
printf 'network:\\n  mode: allowlist\\n  allowed_hosts: [ok.test]\\n  ports: [8080]\\n  allow_destinations: [127.0.0.1/32]\\n' > /tmp/leash-files/policy.yaml
python3 -m http.server -b 127.0.0.1 8080 >/dev/null 2>&1 & sleep 0.5
cat > /tmp/agent.sh <<'AGENT'
{AGENT}
AGENT
{extra_env} /leash run --user 1000 --policy /tmp/leash-files/policy.yaml --log /tmp/leash-files/audit.jsonl \
  --resolve ok.test:127.0.0.1 --resolve evil.test:127.0.0.1 -- sh /tmp/agent.sh
echo \"exit $?\"
echo \"rules after: $(nft list ruleset 2>/dev/null | grep -c leash) $(iptables -S 2>/dev/null | grep -c leash)\"
echo \"left of 1000: $(ps -o user= 2>/dev/null | grep -c agent)\"
cat /tmp/leash-files/audit.jsonl"
    )
}

fn assert_contained(said: &str, err: &str, backend: &str) {
    for line in [
        "allowed 200",
        "refused 403",
        "direct-loopback shut",
        "direct-v4 shut",
        "direct-v6 shut",
        "udp shut",
        "udp-loopback shut",
        "flush refused",
        "log unreadable",
        "kill refused",
        "1000",
        "exit 0",
        "rules after: 0 0",
        "left of 1000: 0",
    ] {
        assert!(said.lines().any(|l| l == line), "{backend}: `{line}` missing:\n{said}\n{err}");
    }
    assert!(err.contains("using uid-firewall"), "{backend}: auto says which containment it took: {err}");
    let lines: Vec<serde_json::Value> =
        said.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() >= 2, "{said}");
    assert!(lines.iter().all(|l| l["containment"] == "uid-firewall"), "every line names the containment: {said}");
}

#[test]
fn with_net_admin_the_command_runs_as_another_uid_whose_only_way_out_is_leash() {
    if !docker_ready() {
        return;
    }
    let out = container(&["--cap-add", "NET_ADMIN"], &firewall_scene(""));
    assert_contained(&text(&out.stdout), &text(&out.stderr), "nft");
    // The same with iptables and ip6tables, where nft is missing (gVisor's case).
    let out = container(&["--cap-add", "NET_ADMIN", "-v", "/dev/null:/usr/sbin/nft:ro"], &firewall_scene(""));
    assert_contained(&text(&out.stdout), &text(&out.stderr), "iptables");
}

#[test]
fn under_dockers_defaults_leash_refuses_naming_what_to_grant_and_advisory_runs_saying_so() {
    if !docker_ready() {
        return;
    }
    let out = container(&[], "/leash run --allow ok.test -- echo ran");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!text(&out.stdout).contains("ran"), "the command did not run");
    for needed in ["userns:", "uid-firewall: needs", "CAP_NET_ADMIN", "--user", "advisory:"] {
        assert!(err.contains(needed), "`{needed}` named: {err}");
    }
    let forced =
        container(&["--cap-add", "NET_ADMIN"], "/leash run --containment uid-firewall --allow ok.test -- echo ran");
    assert_eq!(forced.status.code(), Some(125), "uid-firewall without --user: {}", text(&forced.stderr));
    assert!(text(&forced.stderr).contains("--user"), "{}", text(&forced.stderr));
    let script = "/leash run --advisory --log /tmp/audit.jsonl --allow ok.test -- \
        curl -s -o /dev/null -w '%{http_code}\\n' http://evil.test/; cat /tmp/audit.jsonl";
    let advisory = container(&[], script);
    let (said, err) = (text(&advisory.stdout), text(&advisory.stderr));
    assert!(said.starts_with("403\n"), "{said}{err}");
    let line: serde_json::Value = serde_json::from_str(said.lines().nth(1).unwrap()).unwrap();
    assert_eq!((line["containment"].as_str(), line["host"].as_str()), (Some("advisory"), Some("evil.test")));
    assert!(err.contains("nothing is enforced") && err.contains("advisory run"), "{err}");
}

/// Runs the firewall scene with a deliberate flaw in leash's rules (a debug build's test hook) and a root daemon on
/// the loopback: the self-test must refuse the run, naming what got through, before the command starts.
fn refused_with(flaw: &str, nft: bool, named: &str) {
    let env = format!("LEASH_DANGER_TEST_FIREWALL_FLAW={flaw}");
    let mut args = vec!["--cap-add", "NET_ADMIN"];
    if !nft {
        args.extend(["-v", "/dev/null:/usr/sbin/nft:ro"]);
    }
    let out = container(&args, &format!("{ROOT_DAEMON}\n{}", firewall_scene(&env)));
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert!(said.contains("exit 125"), "{flaw}: refused: {said}{err}");
    assert!(!said.contains("allowed 200"), "{flaw}: the command never ran: {said}");
    assert!(err.contains("self-test") && err.contains(named), "{flaw}: `{named}` named: {err}");
    assert!(said.contains("rules after: 0 0"), "{flaw}: the rules were removed: {said}");
}

#[test]
fn the_self_test_refuses_an_extra_accept() {
    if docker_ready() {
        refused_with("extra-accept", true, "OPEN udp 192.0.2.1:80");
        refused_with("extra-accept", false, "OPEN udp 192.0.2.1:80");
    }
}

#[test]
fn the_self_test_refuses_rules_for_ipv4_only_while_ipv6_is_up() {
    if docker_ready() {
        refused_with("ipv4-only", true, "OPEN udp [2001:db8::1]:80");
        refused_with("ipv4-only", false, "OPEN udp [2001:db8::1]:80");
    }
}

#[test]
fn the_self_test_refuses_all_of_the_loopback_admitted_with_a_root_daemon_on_it() {
    if docker_ready() {
        refused_with("all-loopback", true, "OPEN tcp listener 127.0.0.1:9999");
        refused_with("all-loopback", false, "OPEN tcp listener 127.0.0.1:9999");
    }
}

#[test]
fn a_root_daemon_on_the_loopback_is_out_of_the_commands_reach_with_the_right_rules() {
    if !docker_ready() {
        return;
    }
    let script = format!("{ROOT_DAEMON}\n{}", firewall_scene(""));
    let out = container(&["--cap-add", "NET_ADMIN"], &script);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert!(said.contains("exit 0") && said.contains("allowed 200"), "{said}{err}");
    assert!(said.lines().any(|l| l == "udp-loopback shut"), "{said}");
    let daemon = "python3 -c \"import socket; s=socket.socket(); s.settimeout(3); s.connect(('127.0.0.1', 9999)); print('daemon open')\" 2>/dev/null || echo 'daemon shut'";
    let probe =
        format!("{ROOT_DAEMON}\n/leash run --user 1000 --allow ok.test -- sh -c \"{}\"", daemon.replace('"', "\\\""));
    let out = container(&["--cap-add", "NET_ADMIN"], &probe);
    assert!(text(&out.stdout).contains("daemon shut"), "{}{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn where_the_container_allows_user_namespaces_the_sandbox_is_leashs_own_and_elsewhere_auto_falls_back() {
    if !docker_ready() {
        return;
    }
    // A seccomp profile that lets namespaces be made, and an unmasked /proc: today's sandbox, as on a host.
    let unconfined = ["--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined"];
    let script = "/leash run --allow ok.test -- sh -c 'ip -o link | wc -l; cat /proc/net/if_inet6 | wc -l; \
        curl -s -o /dev/null -w \"%{http_code}\\n\" http://evil.test/'";
    let out = container(&unconfined, script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n0\n403\n", "only lo, no IPv6, the proxy: {}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("uid-firewall"), "{}", text(&out.stderr));
    // NET_ADMIN alone: auto takes the per-uid firewall.
    let script = "/leash run --user 1000 --allow ok.test -- sh -c 'id -u; curl -s -o /dev/null -w \"%{http_code}\\n\" http://evil.test/'";
    let out = container(&["--cap-add", "NET_ADMIN"], script);
    assert_eq!(text(&out.stdout), "1000\n403\n", "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("using uid-firewall"), "{}", text(&out.stderr));
}

/// What the command does in the netns containment: where it is, what it resolves, through the proxy, around it.
const IN_NETNS: &str = r#"
id -u
ip -o link | wc -l
grep -c '^nameserver 127.0.0.1$' /etc/resolv.conf
python3 -c "import socket; print('ok.test', socket.gethostbyname('ok.test'))"
python3 -c "import socket; socket.gethostbyname('evil.test')" 2>/dev/null && echo "evil.test resolved" || echo "evil.test refused"
curl -s -m 10 -o /dev/null -w "proxied %{http_code}
" http://evil.test:8080/
curl -s -m 10 --noproxy '*' -o /dev/null -w "transparent %{http_code}
" http://ok.test:8080/
curl -s -m 3 --noproxy '*' -o /dev/null http://192.0.2.1/ && echo "direct open" || echo "direct shut"
curl -s -m 3 --noproxy '*' -o /dev/null http://127.0.0.1:8080/ && echo "origin open" || echo "origin shut"
"#;

#[test]
fn with_sys_admin_the_command_runs_as_another_uid_in_a_network_namespace_of_leashs() {
    if !docker_ready() {
        return;
    }
    let script = format!(
        "{ROUTE_NOWHERE}
mkdir -m 700 /tmp/leash-files
printf 'network:\\n  mode: allowlist\\n  allowed_hosts: [ok.test]\\n  ports: [8080]\\n  allow_destinations: [127.0.0.1/32]\\n' > /tmp/leash-files/policy.yaml
python3 -m http.server -b 127.0.0.1 8080 >/dev/null 2>&1 & sleep 0.5
cat > /tmp/agent.sh <<'AGENT'
{IN_NETNS}
AGENT
/leash run --user 1000 --policy /tmp/leash-files/policy.yaml --log /tmp/leash-files/audit.jsonl \
  --resolve ok.test:127.0.0.1 -- sh /tmp/agent.sh
echo \"exit $?\"
grep -c nameserver /etc/resolv.conf >/dev/null && echo \"host resolv.conf kept: $(grep -c '127.0.0.1' /etc/resolv.conf)\"
echo \"left of 1000: $(ps -o user= | grep -c agent)\"
grep -c '\"containment\":\"netns\"' /tmp/leash-files/audit.jsonl"
    );
    let out = container(&["--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN"], &script);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    for line in [
        "1000",
        "1",
        "ok.test 127.0.0.2",
        "evil.test refused",
        "proxied 403",
        "transparent 200",
        "direct shut",
        "origin shut",
        "exit 0",
        "host resolv.conf kept: 0",
        "left of 1000: 0",
    ] {
        assert!(said.lines().any(|l| l == line), "`{line}` missing:\n{said}\n{err}");
    }
    assert!(err.contains("using netns"), "{err}");
    let tagged: u32 = said.lines().last().unwrap().parse().unwrap();
    assert!(tagged >= 3, "every line names the containment: {said}");
}

#[test]
fn the_command_cannot_run_as_root_or_as_leashs_uid() {
    if !docker_ready() {
        return;
    }
    for user in ["0", "root"] {
        let out = container(
            &["--cap-add", "NET_ADMIN"],
            &format!("/leash run --user {user} --containment uid-firewall --allow ok.test -- echo ran"),
        );
        assert_eq!(out.status.code(), Some(125), "{user}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("root") && !text(&out.stdout).contains("ran"), "{}", text(&out.stderr));
    }
    let readable = "mkdir -p /tmp/p && printf 'network:\\n  mode: allowlist\\n  allowed_hosts: [ok.test]\\n' > /tmp/p/policy.yaml && chmod 644 /tmp/p/policy.yaml && \
        /leash run --user 1000 --containment uid-firewall --policy /tmp/p/policy.yaml -- echo ran";
    let out = container(&["--cap-add", "NET_ADMIN"], readable);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("could read `/tmp/p/policy.yaml`"), "{}", text(&out.stderr));
}

#[test]
fn leash_probe_inside_leash_run_finds_every_way_shut_and_leashs_listeners_answering() {
    // On the host, in the user-namespace sandbox: nothing of its probes leaves (the sandbox has no route).
    let unshare = Command::new("unshare").args(["-rn", "true"]).status();
    if !unshare.is_ok_and(|s| s.success()) {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "namespaces refused");
        return;
    }
    let out = Command::new("timeout")
        .args(["60", LEASH, "run", "--allow", "ok.test", "--", LEASH, "probe"])
        .args(["--expect", "127.0.0.1:3128", "--expect", "127.0.0.2:80", "--expect", "127.0.0.2:443"])
        .args(["--expect-udp", "127.0.0.1:53"])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("ok   leash's listener 127.0.0.1:3128: answers"), "{said}");
    assert!(said.lines().all(|l| l.starts_with("ok ")), "{said}");
    // A listener nobody expected inside is a way out it names (the transparent ones, left unexpected).
    let out = Command::new("timeout")
        .args(["60", LEASH, "run", "--allow", "ok.test", "--", LEASH, "probe", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("OPEN tcp listener 127.0.0.2:80"), "{}", text(&out.stdout));
}

#[test]
fn under_user_namespaces_user_runs_the_command_as_that_uid_without_capabilities() {
    let unshare = Command::new("unshare").args(["-rn", "true"]).status();
    if !unshare.is_ok_and(|s| s.success()) {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "namespaces refused");
        return;
    }
    let root = Command::new("id").arg("-u").output().unwrap();
    let script = "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status";
    let run = |user: &str| {
        Command::new("timeout")
            .args(["60", LEASH, "run", "--user", user, "--allow", "ok.test", "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    if text(&root.stdout).trim() == "0" {
        let out = run("65534:65534");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "65534\n65534\n65534\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n",
            "{}",
            text(&out.stderr)
        );
        for refused in ["0", "root"] {
            let out = run(refused);
            assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
            assert!(text(&out.stdout).is_empty(), "nothing ran");
        }
    } else {
        // An unprivileged leash maps one id: another user cannot be had, and that is said rather than ignored.
        let out = run("65534");
        assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("another user for the command needs leash as root"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// A bundle for Debian's `runsc` (gVisor) made from the test image: leash copied in as /leash, iptables the legacy
/// one (gVisor has no nftables), the process root with `NET_ADMIN`, `SETUID`, `SETGID` and the few a shell needs,
/// running `script` (`NET_RAW` too: iptables reaches gVisor's tables over a raw socket). `None` (a loud skip, or a failure under `LEASH_REQUIRE_GVISOR=1`) where runsc is missing.
fn gvisor_bundle(script: &str) -> Option<tempfile::TempDir> {
    if !Command::new("runsc").arg("--version").output().is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("LEASH_REQUIRE_GVISOR").is_none(), "runsc is missing");
        eprintln!("SKIPPED: no runsc here; the gVisor containment tests did not run");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let created = Command::new("docker").args(["create", IMAGE]).output().unwrap();
    let id = text(&created.stdout).trim().to_owned();
    let export = format!("docker export {id} | tar -C {} -x && docker rm {id} >/dev/null", rootfs.display());
    assert!(Command::new("sh").args(["-c", &export]).status().unwrap().success());
    std::fs::copy(LEASH, rootfs.join("leash")).unwrap();
    for tool in ["iptables", "ip6tables"] {
        let link = rootfs.join("usr/sbin").join(tool);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("xtables-legacy-multi", &link).unwrap();
    }
    let _ = std::fs::remove_file(rootfs.join("usr/sbin/nft"));
    assert!(Command::new("runsc").args(["spec"]).current_dir(dir.path()).status().unwrap().success());
    let config_path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    // iptables reads and writes gVisor's tables over a raw socket: NET_RAW too.
    let caps = [
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_SETUID",
        "CAP_SETGID",
    ];
    for set in ["bounding", "effective", "permitted"] {
        config["process"]["capabilities"][set] = serde_json::json!(caps);
    }
    config["process"]["args"] = serde_json::json!(["sh", "-c", script]);
    config["process"]["terminal"] = serde_json::json!(false);
    config["root"]["readonly"] = serde_json::json!(false);
    std::fs::write(&config_path, serde_json::to_string(&config).unwrap()).unwrap();
    Some(dir)
}

/// Runs a bundle under runsc with its network stack but no interface (`--network=none`), raw sockets allowed (what
/// gVisor's iptables needs), its state in the bundle's directory.
fn gvisor_run(bundle: &tempfile::TempDir) -> Output {
    let state = bundle.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let name = format!("leash-test-{}", std::process::id());
    // Standard input a pipe, not the default /dev/null: runsc hands the container its stdio files and changes
    // their owner (the host's /dev/null became nobody's).
    Command::new("timeout")
        .args(["120", "runsc", "--root"])
        .arg(&state)
        .args(["--net-raw", "--network=none", "run", "--bundle"])
        .arg(bundle.path())
        .arg(name)
        .stdin(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn under_gvisor_the_per_uid_firewall_is_iptables_and_its_self_test_still_refuses_a_wrong_rule() {
    if !docker_ready() {
        return;
    }
    let agent = "id -u; curl -s -o /dev/null -w '%{http_code}\\n' http://evil.test/; \
        curl -s -m 3 --noproxy '*' -o /dev/null http://127.0.0.1:9999/ && echo direct-open || echo direct-shut";
    let script =
        format!("{ROOT_DAEMON}\n/leash run --user 1000 --allow ok.test -- sh -c \"{agent}\"; echo \"exit $?\"");
    let Some(bundle) = gvisor_bundle(&script) else { return };
    let owner =
        |m: std::fs::Metadata| (std::os::unix::fs::MetadataExt::uid(&m), std::os::unix::fs::MetadataExt::gid(&m));
    let dev_null = owner(std::fs::metadata("/dev/null").unwrap());
    let out = gvisor_run(&bundle);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(said, "1000\n403\ndirect-shut\nexit 0\n", "{err}");
    assert_eq!(owner(std::fs::metadata("/dev/null").unwrap()), dev_null, "the host's /dev/null is left as it was");
    assert!(err.contains("using uid-firewall") && err.contains("no REJECT"), "{err}");
    // Every packet of the loopback admitted, with the root daemon listening there: refused before the command runs.
    let flawed = format!("{ROOT_DAEMON}\nLEASH_DANGER_TEST_FIREWALL_FLAW=all-loopback /leash run --user 1000 --allow ok.test -- echo ran; echo \"exit $?\"");
    let Some(bundle) = gvisor_bundle(&flawed) else { return };
    let out = gvisor_run(&bundle);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(said, "exit 125\n", "{err}");
    assert!(err.contains("OPEN tcp listener 127.0.0.1:9999"), "{err}");
}
