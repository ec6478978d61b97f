//! A microVM behind `leash attach`, end to end: `examples/vm/build.sh` builds a guest from Debian packages (the
//! kernel of `linux-image-amd64`, an initramfs with busybox, the virtio modules and curl), `examples/vm/run.sh` boots
//! it under QEMU (KVM where a guest boots with it, else TCG) with its only NIC a tap in a network namespace leash
//! serves, and the guest reports what it could reach. Needs root, QEMU, nftables and apt; skips loudly without them,
//! and `LEASH_REQUIRE_VM=1` (set by `.ci/run`) makes a skip a failure. The guest is cached in `<target>/vm`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::log_lines;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
/// The whole test's bound: a first build downloads about 70 MB with apt and packs the initramfs (about 15 s), a first
/// run probes KVM (at most 15 s), and a TCG boot to power-off takes 10–20 s on a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(120);
/// The guest's address on the tap, as every audit line must name it.
const GUEST: &str = "169.254.100.2";
/// What the scripts run, each looked up in PATH.
const TOOLS: [&str; 7] = ["qemu-system-x86_64", "nft", "ip", "cpio", "apt-get", "python3", "openssl"];

#[test]
fn a_guest_on_a_tap_reaches_only_what_the_policy_allows_and_never_the_host() {
    let Some(vm_dir) = vm_available() else { return };
    let deadline = Instant::now() + BOUND;
    let run = tempfile::tempdir().unwrap();
    let build = bounded(Command::new(script("build.sh")).arg(&vm_dir), run.path(), "build", deadline);
    if build.code() == Some(3) {
        skip(&format!("apt could not provide the guest's packages: {}", read(run.path(), "build.err")));
        return;
    }
    assert!(build.success(), "build.sh failed: {}", read(run.path(), "build.err"));
    let status = bounded(
        Command::new(script("run.sh")).arg(run.path()).env("LEASH", LEASH).env("LEASH_VM_DIR", &vm_dir),
        run.path(),
        "run",
        deadline,
    );
    let summary =
        format!("{}\n{}\n{}", read(run.path(), "run.out"), read(run.path(), "run.err"), read(run.path(), "serial.log"));
    assert!(status.success(), "run.sh: {status}\n{summary}");
    eprintln!(
        "{}",
        read(run.path(), "summary.txt").lines().filter(|l| l.starts_with("vm: ")).collect::<Vec<_>>().join("\n")
    );

    let guest = results(&read(run.path(), "serial.log"));
    let said = |check: &str| guest.get(check).map(|w| w.join(" ")).unwrap_or_default();
    assert!(said("nic").starts_with("eth0 169.254.100.2/30"), "{summary}");
    assert_eq!(said("route"), "none", "{summary}");
    assert_eq!(said("ipv6"), "link-local-only", "{summary}");
    assert!(said("allowed").starts_with("200 curl=0 body=origin_/vm"), "{summary}");
    assert!(said("refused").starts_with("403 curl=0"), "{summary}");
    assert!(said("https").starts_with("200 curl=0 body=origin-tls_/vm"), "{summary}");
    // Trusting only the origin's own CA, the guest refuses what it is shown: leash's certificate, checked.
    assert!(said("https-origin-ca").starts_with("000 curl=60"), "{summary}");
    let direct: Vec<_> = guest.iter().filter(|(k, _)| k.starts_with("direct ")).collect();
    assert!(direct.len() >= 3, "{summary}");
    for (target, words) in direct {
        assert_eq!(words.first().map(String::as_str), Some("failed"), "{target}: {summary}");
    }
    assert!(guest.contains_key("done"), "{summary}");
    assert!(
        !run.path().join("sentinel.log").exists(),
        "the guest reached the host: {}",
        read(run.path(), "sentinel.log")
    );

    for listing in ["nft.txt", "nft-after.txt"] {
        let nft = read(run.path(), listing);
        for part in ["table inet leash_vm", "hook forward", "policy drop", "iifname \"tap0\"", "oifname \"tap0\""] {
            assert!(nft.contains(part), "{listing} lacks {part}: {nft}");
        }
    }

    let audit = log_lines(&run.path().join("audit.jsonl"));
    let logged = |decision: &str, host: &str, path: Option<&str>| {
        audit.iter().any(|l| {
            l["decision"] == decision
                && l["host"] == host
                && path.is_none_or(|p| l["path"] == p)
                && l["client"].as_str().is_some_and(|c| c.starts_with(&format!("{GUEST}:")))
        })
    };
    assert!(logged("allow", "allowed.test", Some("/vm")), "{audit:?}");
    assert!(logged("block", "refused.test", None), "{audit:?}");
    assert!(logged("inspect", "docs.test", None) && logged("allow", "docs.test", Some("/vm")), "{audit:?}");
}

/// The guest cache, or `None` (after saying why) where the test cannot run here.
fn vm_available() -> Option<PathBuf> {
    if !rustix::process::geteuid().is_root() {
        skip("not root (a network namespace, a tap and nftables need it)");
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in TOOLS {
        if !std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
            skip(&format!("{tool} is missing (apt-get install qemu-system-x86 nftables cpio)"));
            return None;
        }
    }
    Some(target_dir().join("vm"))
}

/// Cargo's target directory: the outermost above the tests' scratch directory that cargo tagged (with a build
/// target set, `CARGO_TARGET_TMPDIR` is `<target>/<triple>/tmp`, and both carry the tag).
fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.ancestors().filter(|d| d.join("CACHEDIR.TAG").exists()).last().unwrap_or(tmp).to_path_buf()
}

fn skip(why: &str) {
    assert!(std::env::var_os("LEASH_REQUIRE_VM").is_none(), "{why}, but LEASH_REQUIRE_VM is set");
    {
        // Written past the test harness's capture: a skip must show where the results are read.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}; the microVM test did not run");
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/vm").join(name)
}

/// Runs `cmd` in a process group of its own, its output in `dir/NAME.out` and `dir/NAME.err`; past `deadline` the
/// whole group gets SIGTERM (the scripts' traps remove the namespace) and the test fails.
fn bounded(cmd: &mut Command, dir: &Path, name: &str, deadline: Instant) -> ExitStatus {
    let out = File::create(dir.join(format!("{name}.out"))).unwrap();
    let err = File::create(dir.join(format!("{name}.err"))).unwrap();
    let mut child = cmd.stdout(out).stderr(err).process_group(0).spawn().unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let group = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
            let _ = child.wait();
            panic!(
                "{name} took longer than {BOUND:?}: {}\n{}",
                read(dir, &format!("{name}.err")),
                read(dir, "serial.log")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The guest's result lines (`SECONDS LEASH-VM CHECK WORDS...` in serial.log), by check; `direct ADDR:PORT` for each
/// direct connection.
fn results(serial: &str) -> HashMap<String, Vec<String>> {
    let mut found = HashMap::new();
    for line in serial.lines() {
        let mut words = line.split_whitespace().skip(1);
        if words.next() != Some("LEASH-VM") {
            continue;
        }
        let Some(mut check) = words.next().map(str::to_owned) else { continue };
        if check == "direct" {
            check = format!("direct {}", words.next().unwrap_or_default());
        }
        found.insert(check, words.map(str::to_owned).collect());
    }
    found
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}
