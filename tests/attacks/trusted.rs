//! What leash trusts during a run, the command cannot change (issue 41, its first two classes): every path leash reads
//! or writes after the command starts, and every directory above it, and the host files that decide where leash
//! connects and whom it trusts. The command tries to move each of those directories away and put its own file in
//! place, to rewrite, `chown` and `chmod` each file leash hides, and, as root, to change the hosts file and the trust
//! roots; afterwards, from outside, nothing leash uses is changed and nothing planted was read or written.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::doors::{as_nobody, is_root, leash, sandbox, text, PYTHON};

/// Inside: for every directory above each path given, up to the first argument (the test's own directory, so that a
/// build without the fix moves none of the host's), a rename away (and, where that worked, a new
/// directory in its place with a planted file); then, for each file given, a write, `chown`, `chmod` and a file
/// renamed over it. Each attempt prints one line: what, where, and `done` or the errno's name.
const MOVE_AND_PLANT: &str = r#"
import errno, os, sys
def attempt(what, path, act):
    try:
        act()
        print(what, path, "done", flush=True)
        return True
    except OSError as e:
        print(what, path, errno.errorcode[e.errno], flush=True)
        return False
top, files = sys.argv[1], sys.argv[2:]
seen = set()
for f in files:
    d = os.path.dirname(f)
    while d.startswith(top) and d not in seen:
        seen.add(d)
        if attempt("rename", d, lambda: os.rename(d, d + ".moved")):
            os.mkdir(d)
            with open(os.path.join(d, os.path.basename(f)), "w") as out:
                out.write("planted")
        d = os.path.dirname(d)
def replace(f):
    with open(f + ".new", "w") as out:
        out.write("planted")
    try:
        os.rename(f + ".new", f)
    finally:
        if os.path.exists(f + ".new"):
            os.unlink(f + ".new")
for f in files:
    attempt("write", f, lambda: open(f, "a").write("planted"))
    attempt("chown", f, lambda: os.chown(f, 65534, 65534))
    attempt("chmod", f, lambda: os.chmod(f, 0o666))
    attempt("replace", f, lambda: replace(f))
"#;

/// A run's own files, each in a directory of its own under a fresh directory of the caller's: the policy (with a
/// credential read from a file), the audit log, the secret, the control socket's directory (ask mode), and earlier
/// runs' kept logs. Returns the paths the command is given to attack, and the files' contents to compare after.
struct RunFiles {
    _root: tempfile::TempDir,
    policy: PathBuf,
    log: PathBuf,
    secret: PathBuf,
    socket: PathBuf,
    state: PathBuf,
    kept: PathBuf,
    /// A trust bundle of the caller's, named by `SSL_CERT_FILE` in leash's environment.
    bundle: PathBuf,
}

impl RunFiles {
    fn new(owner: Option<u32>) -> RunFiles {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let dir = |name: &str| {
            let d = root.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let (secret, socket) = (dir("secrets").join("token"), dir("control").join("ask.sock"));
        std::fs::write(&secret, "real-secret-value-0123456789\n").unwrap();
        let policy = dir("policy").join("policy.yaml");
        let text = format!(
            "network:\n  mode: ask\n  allowed_hosts: [pypi.org]\n  credentials:\n    - name: t\n      hosts: [api.example.org]\n      env: T_KEY\n      file: {}\n      header: authorization\n",
            secret.display()
        );
        std::fs::write(&policy, text).unwrap();
        let log = dir("logs").join("audit.jsonl");
        let bundle = dir("trust").join("bundle.pem");
        std::fs::copy("/etc/ssl/certs/ca-certificates.crt", &bundle)
            .or_else(|_| std::fs::write(&bundle, "").map(|()| 0))
            .unwrap();
        let state = dir("state");
        let kept = dir("state/leash/runs").join("2026-01-01T000000Z-1.jsonl");
        std::fs::write(&kept, "{\"decision\":\"block\",\"host\":\"the-hidden-paper.example\"}\n").unwrap();
        for private in ["state/leash/runs", "control"] {
            std::fs::set_permissions(root.path().join(private), PermissionsExt::from_mode(0o700)).unwrap();
        }
        if let Some(uid) = owner {
            let status = Command::new("chown").args(["-R", &format!("{uid}:{uid}")]).arg(root.path()).status();
            assert!(status.unwrap().success());
        }
        RunFiles { _root: root, policy, log, secret, socket, state, kept, bundle }
    }

    /// `leash run`'s arguments for these files, up to the command.
    fn args(&self) -> Vec<String> {
        let p = |p: &Path| p.to_str().unwrap().to_owned();
        vec![
            "run".into(),
            "--policy".into(),
            p(&self.policy),
            "--log".into(),
            p(&self.log),
            "--ask-socket".into(),
            p(&self.socket),
            "--".into(),
        ]
    }

    /// Every file leash uses after the command starts: what the command attacks.
    fn targets(&self) -> Vec<String> {
        let all = [&self.policy, &self.log, &self.secret, &self.socket, &self.kept, &self.bundle];
        all.iter().map(|p| p.display().to_string()).collect()
    }

    fn contents(&self) -> Vec<Option<Vec<u8>>> {
        [&self.policy, &self.secret, &self.kept, &self.bundle].iter().map(|p| std::fs::read(p).ok()).collect()
    }
}

/// The attempts' lines that succeeded.
fn succeeded(said: &str) -> Vec<&str> {
    said.lines().filter(|l| l.ends_with(" done")).collect()
}

/// Runs the attack as `prefix` (a user, or nobody's `setpriv`), and checks from outside that nothing moved, nothing
/// changed, and the run's audit log is whole at leash's path.
fn nothing_leash_uses_can_be_moved_or_replaced(prefix: &[String], owner: Option<u32>) {
    let files = RunFiles::new(owner);
    let before = files.contents();
    let dev_null = std::fs::metadata("/dev/null").unwrap();
    let out = Command::new("timeout")
        .arg("90")
        .args(prefix)
        .args(files.args())
        .args([PYTHON, "-c", MOVE_AND_PLANT])
        .arg(files._root.path())
        .args(files.targets())
        .env("RUST_LOG", "warn")
        .env("XDG_STATE_HOME", &files.state)
        .env("T_KEY", "unused")
        .env("SSL_CERT_FILE", &files.bundle)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", text(&out.stderr));
    assert!(said.lines().filter(|l| l.starts_with("rename ")).count() >= 6, "every directory was tried: {said}");
    assert_eq!(succeeded(&said), Vec::<&str>::new(), "moved or changed from inside:\n{said}");
    for line in said.lines().filter(|l| l.starts_with("rename ")) {
        assert!(line.ends_with(" EBUSY") || line.ends_with(" EACCES") || line.ends_with(" EPERM"), "{line}");
    }
    assert_eq!(files.contents(), before, "a file leash uses changed");
    for path in [&files.policy, &files.log, &files.secret] {
        assert!(!path.with_extension("moved").exists() && path.parent().unwrap().exists());
    }
    let after = std::fs::metadata("/dev/null").unwrap();
    assert_eq!((after.uid(), after.gid(), after.mode()), (dev_null.uid(), dev_null.gid(), dev_null.mode()));
    // The log is where leash opened it, and only leash wrote it.
    let log = std::fs::read_to_string(&files.log).unwrap_or_default();
    assert!(!log.contains("planted"), "{log}");
}

#[test]
fn nothing_leash_uses_after_the_command_starts_can_be_moved_or_replaced_from_inside() {
    let Some(()) = sandbox() else { return };
    nothing_leash_uses_can_be_moved_or_replaced(&[leash()], None);
    if is_root() {
        if let Some((_dir, prefix)) = as_nobody() {
            nothing_leash_uses_can_be_moved_or_replaced(&prefix, Some(65534));
        }
    }
}

/// Inside, as root: probes the host files that decide where leash connects and whom it trusts without changing any
/// (an open for appending that writes nothing; a rename away and straight back), and the host's shared memory.
const HOST_INPUTS: &str = r#"
import errno, glob, os, sys
def attempt(what, path, act):
    try:
        act()
        print(what, path, "done", flush=True)
    except OSError as e:
        print(what, path, errno.errorcode[e.errno], flush=True)
def away_and_back(d):
    os.rename(d, d + ".leash-test-moved")
    os.rename(d + ".leash-test-moved", d)
bundles = [p for p in ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"] if os.path.exists(p)]
for f in ["/etc/hosts", "/etc/nsswitch.conf"] + bundles:
    attempt("write", f, lambda: os.close(os.open(f, os.O_WRONLY | os.O_APPEND)))
for d in ["/etc", "/etc/ssl", "/etc/ssl/certs"]:
    if os.path.isdir(d):
        attempt("rename", d, lambda: away_and_back(d))
attempt("create", "/etc/ssl/certs", lambda: os.close(os.open("/etc/ssl/certs/leash-test-planted.pem", os.O_CREAT | os.O_WRONLY, 0o644)))
print("shm", sorted(os.listdir("/dev/shm")), flush=True)
print("host-segment", os.path.exists(sys.argv[1]))
"#;

#[test]
fn a_root_command_cannot_change_the_hosts_file_trust_roots_or_the_hosts_shared_memory() {
    let Some(()) = sandbox() else { return };
    if !is_root() {
        return;
    }
    // A segment of the host's POSIX shared memory, as another program's `shm_open` would leave it.
    let segment = PathBuf::from(format!("/dev/shm/leash-test-segment-{}", std::process::id()));
    std::fs::write(&segment, "the host's").unwrap();
    let out = Command::new("timeout")
        .args(["60", &leash(), "run", "--allow", "pypi.org", "--", PYTHON, "-c", HOST_INPUTS])
        .arg(&segment)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file("/etc/ssl/certs/leash-test-planted.pem");
    std::fs::remove_file(&segment).unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", text(&out.stderr));
    assert_eq!(succeeded(&said), Vec::<&str>::new(), "changeable from inside:\n{said}");
    assert!(said.contains("write /etc/hosts EROFS"), "{said}");
    assert!(said.contains("rename /etc EBUSY"), "{said}");
    assert!(said.contains("host-segment False"), "the host's shared memory is out of sight: {said}");
    assert!(said.contains("shm []"), "the command's /dev/shm is its own, empty: {said}");
}
