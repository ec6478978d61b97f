//! `leash run` with a real `apt-get` inside. As root the sandbox maps the ids 0..65536 onto themselves and allows
//! `setgroups`, so apt's drop to its `_apt` user works; root without `CAP_SETUID`/`CAP_SETGID`, and any other user,
//! keep one id and `setgroups` denied. apt fetches from a flat repository this test builds with `dpkg-deb` and serves
//! on the host's loopback, through the proxy, under an allowlist naming the repository's host. The same repository,
//! served as deb.debian.org to apt through `leash proxy`, tests the `+debian` preset.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{decided, log_lines, lookups_and_decisions, sandbox_available, stderr, stdout};

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
/// The repository's host, pinned to the host's loopback with `--resolve`.
const REPO_HOST: &str = "apt.test";
const PACKAGE: &str = "leash-apt-test";
const DEB: &str = "leash-apt-test_1.0_all.deb";
/// What apt prints when dropping to `_apt` fails, or when it gives up on the drop for a file `_apt` cannot reach.
const DROP_FAILURES: [&str; 4] = ["setgroups", "seteuid", "setegid", "unsandboxed"];

#[test]
fn apt_get_update_and_download_work_inside_leash_run_as_root() {
    if !sandbox_available() || !as_root("apt inside `leash run`") || !have_tools(&["apt-get", "dpkg-deb", "sha256sum"])
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `_apt` must reach the lists and archives below it, or apt would not drop to it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = serve(build_repository(dir.path()));
    let apt = apt_config(dir.path(), REPO_HOST, port);
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        "set -e; apt-get {apt} update; apt-get {apt} -y install --download-only {PACKAGE}; \
         stat -c %u {}",
        dir.path().join("cache/archives/partial").display()
    );
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [{REPO_HOST}]\n  ports: [{port}]\n  \
             allow_destinations: [127.0.0.1/32]\n"
        ),
    )
    .unwrap();
    let o = leash_run(&[LEASH], &["--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()], &script);
    let output = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{output}");
    for failure in DROP_FAILURES {
        assert!(!output.contains(failure), "apt could not drop to `_apt` ({failure}):\n{output}");
    }
    // apt made its download directory `_apt`'s from inside: a chown only the wide map allows.
    let apt_uid = uid_of("_apt");
    assert_eq!(stdout(&o).lines().last(), Some(apt_uid.to_string().as_str()), "{output}");
    assert_eq!(std::fs::metadata(dir.path().join("cache/archives/partial")).unwrap().uid(), apt_uid);
    assert!(dir.path().join("cache/archives").join(DEB).is_file(), "the package was not downloaded:\n{output}");
    let lines = log_lines(&log);
    let (_, decisions) = lookups_and_decisions(&lines);
    assert!(decided(&decisions).iter().all(|d| *d == ("allow".into(), REPO_HOST.into())), "{lines:?}");
    let paths: Vec<&str> = decisions.iter().filter_map(|d| d["path"].as_str()).collect();
    for wanted in ["Packages", DEB] {
        assert!(paths.iter().any(|p| p.ends_with(wanted)), "no allowed request for {wanted}: {paths:?}");
    }
}

#[test]
fn only_root_with_setuid_and_setgid_gets_the_wide_map_and_setgroups() {
    if !sandbox_available() || !as_root("the id maps of a root and a non-root `leash run`") {
        return;
    }
    let show = "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups";
    let maps = |o: &Output| {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
        stdout(o).split_whitespace().map(str::to_owned).collect::<Vec<_>>()
    };
    let root = leash_run(&[LEASH], &[], show);
    assert_eq!(maps(&root), ["0", "0", "65536", "0", "0", "65536", "allow"]);
    // A drop inside works: `_apt`'s uid, `nogroup`, no other group.
    let drop = leash_run(&[LEASH], &[], "setpriv --reuid=_apt --regid=nogroup --clear-groups id -u");
    assert_eq!(stdout(&drop).trim(), uid_of("_apt").to_string(), "{}", stderr(&drop));
    // Root without the capabilities to map more ids: one id, as before.
    let bounded = leash_run(&["setpriv", "--bounding-set=-setuid,-setgid", "--", LEASH], &[], show);
    assert_eq!(maps(&bounded), ["0", "0", "1", "0", "0", "1", "deny"]);
    // Root of a user namespace of its own, not the host's (whose ids it cannot map): one id.
    let nested = leash_run(&["unshare", "--user", "--map-root-user", "--", LEASH], &[], show);
    assert_eq!(maps(&nested), ["0", "0", "1", "0", "0", "1", "deny"]);
    // An unprivileged caller: inside, its own id is the only one, and groups cannot be set. It runs a copy of leash
    // that it may execute wherever the build directory is.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let leash = dir.path().join("leash");
    // Copied by `cp`: a write descriptor of this process, inherited by a concurrent fork, would make the exec fail
    // with ETXTBSY.
    assert!(Command::new("cp").arg(LEASH).arg(&leash).status().unwrap().success());
    let nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", leash.to_str().unwrap()];
    let o = leash_run(&nobody, &[], show);
    if o.status.code() == Some(125) {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "{}", stderr(&o));
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: `nobody` cannot make namespaces here: {}", stderr(&o));
        }
        return;
    }
    let (uid, gid) = (uid_of("nobody").to_string(), gid_of("nogroup").to_string());
    assert_eq!(maps(&o), [uid.as_str(), "0", "1", gid.as_str(), "0", "1", "deny"]);
}

/// `LEASH... run OPTIONS -- sh -c SCRIPT` (`leash` is the last word of `LEASH...`, which may wrap it), from `/`
/// (which any user may enter), with the repository's host pinned to the host's loopback.
#[test]
fn apt_fetches_through_the_debian_preset_and_hosts_outside_it_are_refused() {
    if !have_tools(&["apt-get", "dpkg-deb", "sha256sum", "curl"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The repository answers as deb.debian.org: `leash proxy` pins that name (and a neighbour) to the loopback.
    let port = serve(build_repository(dir.path()));
    let apt = apt_config(dir.path(), "deb.debian.org", port);
    let policy = dir.path().join("policy.yaml");
    let allowlist = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [+debian]\n  ports: [{port}]\n  \
         allow_destinations: [127.0.0.1/32]\n"
    );
    std::fs::write(&policy, allowlist).unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = Command::new(LEASH)
        .args(["proxy", "--listen", "127.0.0.1:0", "--policy", policy.to_str().unwrap(), "--log"])
        .arg(&log)
        .args(["--resolve", "deb.debian.org:127.0.0.1", "--resolve", "ftp.debian.org:127.0.0.1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(proxy.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let proxy_url = format!("http://{}", line.trim().strip_prefix("listening on ").expect("listening line"));
    // apt's privilege drop is `leash run`'s test above; here it stays root, in its own directories.
    let script = format!(
        "set -e; apt-get {apt} -o APT::Sandbox::User=root update; \
         apt-get {apt} -o APT::Sandbox::User=root -y install --download-only {PACKAGE}"
    );
    let o = Command::new("timeout").args(["120", "sh", "-c", &script]).env("http_proxy", &proxy_url).output().unwrap();
    let refused = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x", &proxy_url])
        .arg(format!("http://ftp.debian.org:{port}/Packages"))
        .output()
        .unwrap();
    // SIGTERM: leash ends its audit log's lines before it exits.
    Command::new("kill").args(["-s", "TERM", &proxy.id().to_string()]).status().unwrap();
    assert!(proxy.wait().unwrap().success());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(dir.path().join("cache/archives").join(DEB).is_file(), "the package was not downloaded");
    assert_eq!(stdout(&refused), "403", "ftp.debian.org is not in +debian");
    let lines = log_lines(&log);
    let (_, decisions) = lookups_and_decisions(&lines);
    let rule = |d: &&serde_json::Value| d["rule"].as_str().unwrap_or_default().to_owned();
    let allowed: Vec<String> = decisions.iter().filter(|d| d["decision"] == "allow").map(rule).collect();
    assert!(allowed.len() >= 2 && allowed.iter().all(|r| r == "deb.debian.org (+debian@1)"), "{lines:?}");
    assert!(decided(&decisions).contains(&("block".into(), "ftp.debian.org".into())), "{lines:?}");
}

fn leash_run(leash: &[&str], options: &[&str], script: &str) -> Output {
    let pin = format!("{REPO_HOST}:127.0.0.1");
    let mut argv: Vec<&str> = leash.to_vec();
    argv.extend(["run", "--resolve", &pin]);
    argv.extend(options);
    argv.extend(["--", "sh", "-c", script]);
    Command::new("timeout").arg("120").args(argv).current_dir("/").env("RUST_LOG", "warn").output().unwrap()
}

/// Whether this test runs as root; says so loudly when not.
fn as_root(what: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {what} needs leash to run as root");
        }
    }
    root
}

/// Whether the Debian tools are here; CI's machine (Debian, `LEASH_REQUIRE_SANDBOX`) must have them.
fn have_tools(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !Command::new("sh").args(["-c", &format!("command -v {t}")]).output().unwrap().status.success())
        .collect();
    if !missing.is_empty() {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "missing {missing:?}");
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: apt inside `leash run` needs {missing:?}");
        }
    }
    missing.is_empty()
}

fn uid_of(user: &str) -> u32 {
    id_in("passwd", user)
}

fn gid_of(group: &str) -> u32 {
    id_in("group", group)
}

/// The numeric id of `name` in the `passwd` or `group` database.
fn id_in(database: &str, name: &str) -> u32 {
    let o = Command::new("getent").args([database, name]).output().unwrap();
    stdout(&o).split(':').nth(2).and_then(|id| id.trim().parse().ok()).expect("a numeric id")
}

/// A flat repository in `dir/repo` holding one empty package, with the `Packages` index apt reads (no `Release`:
/// the source is `[trusted=yes]`). Returns the repository's directory.
fn build_repository(dir: &Path) -> PathBuf {
    let package = dir.join("package");
    std::fs::create_dir_all(package.join("DEBIAN")).unwrap();
    let control = format!(
        "Package: {PACKAGE}\nVersion: 1.0\nArchitecture: all\nMaintainer: leash tests <tests@leash.invalid>\n\
         Description: an empty package for leash's tests\n"
    );
    std::fs::write(package.join("DEBIAN/control"), &control).unwrap();
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let deb = repo.join(DEB);
    let o = Command::new("dpkg-deb").arg("--root-owner-group").arg("--build").arg(&package).arg(&deb).output().unwrap();
    assert!(o.status.success(), "dpkg-deb: {}", stderr(&o));
    let o = Command::new("sha256sum").arg(&deb).output().unwrap();
    let sha256 = stdout(&o).split_whitespace().next().expect("a digest").to_owned();
    let size = std::fs::metadata(&deb).unwrap().len();
    let entry = format!("{control}Filename: ./{DEB}\nSize: {size}\nSHA256: {sha256}\n");
    std::fs::write(repo.join("Packages"), entry).unwrap();
    repo
}

/// apt's options for a private set-up under `dir`: the repository (on `host`) as its only source, its own lists, cache and
/// (empty) dpkg status, and the proxy leash names in `http_proxy` (expanded inside the sandbox).
fn apt_config(dir: &Path, host: &str, port: u16) -> String {
    for sub in ["etc/parts", "state/lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let sources = dir.join("etc/sources.list");
    std::fs::write(&sources, format!("deb [trusted=yes] http://{host}:{port}/ ./\n")).unwrap();
    std::fs::write(dir.join("state/status"), "").unwrap();
    let d = dir.display();
    format!(
        "-o Dir::Etc::SourceList={} -o Dir::Etc::SourceParts={d}/etc/parts -o Dir::State={d}/state \
         -o Dir::State::status={d}/state/status -o Dir::Cache={d}/cache -o Acquire::http::Proxy=$http_proxy",
        sources.display()
    )
}

/// A static file server on the host's loopback: `GET .../NAME` answers the file `NAME` of `dir`, anything else 404.
/// Connections stay open between requests, as apt expects.
fn serve(dir: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let dir = dir.clone();
            std::thread::spawn(move || answer(stream, &dir));
        }
    });
    port
}

fn answer(mut stream: TcpStream, dir: &Path) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
        }
        // Only a file name of the repository's one directory: nothing else of the host is served.
        let name = request.split_whitespace().nth(1).and_then(|target| target.rsplit('/').next()).unwrap_or("");
        let file = (!name.is_empty() && !name.starts_with('.')).then(|| dir.join(name));
        let (status, body) = match file.and_then(|f| std::fs::read(f).ok()) {
            Some(body) => ("200 OK", body),
            None => ("404 Not Found", Vec::new()),
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n", body.len());
        if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body)).is_err() {
            return;
        }
    }
}
