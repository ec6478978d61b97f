//! Doors out of `leash run` that are not the network: the caller's terminal, its process group, host
//! Unix sockets however they are named, AF_VSOCK, IPC objects and keyrings, the audit log, the kernel's writable
//! files, and the environment. Each test runs the real `leash run` with a hostile command and asserts, from
//! outside, that the door stayed shut. `LEASH_UNDER_TEST=/path/to/leash` runs them against another build (each
//! failed against the build before its fix).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use super::scene::skip;

const PYTHON: &str = "/usr/bin/python3";

fn leash() -> String {
    std::env::var("LEASH_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_leash").to_owned())
}

/// Whether `leash run` can make its namespaces here (a loud skip, or a failure under `LEASH_REQUIRE_SANDBOX=1`).
fn sandbox() -> Option<()> {
    let ok = Command::new("unshare").args(["-rn", "true"]).status().is_ok_and(|s| s.success());
    if ok {
        Some(())
    } else {
        skip(&"unshare -rn refused")
    }
}

/// `leash run [args] -- python3 -c code`, with a time-out.
fn run_python(args: &[&str], code: &str) -> Output {
    Command::new("timeout")
        .args(["60", &leash(), "run"])
        .args(args)
        .args(["--", PYTHON, "-c", code])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a Python driver script outside with `leash` as its first argument, and returns its standard output.
fn driver(script: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["90", PYTHON, "-c", script, &leash()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "driver failed: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

// ---- the terminal and signals ----------------------------------------------------------------------------------

/// Runs leash on a pseudo-terminal that is its controlling terminal (as under an interactive shell); the command
/// tries to push a byte into it. Afterwards the terminal's input is read: whatever is there, the caller's shell would
/// have read as typed.
const TERMINAL: &str = r#"
import fcntl, os, subprocess, sys, termios, tty
leash = sys.argv[1]
master, slave = os.openpty()
tty.setraw(slave)
inner = '''
import fcntl, termios
for name, req, arg in [("TIOCSTI", termios.TIOCSTI, b"X"), ("TIOCLINUX", 0x541C, b"\\x06")]:
    try:
        fcntl.ioctl(0, req, arg)
        print(name, "done", flush=True)
    except OSError as e:
        print(name, "refused", e.errno, flush=True)
'''
def take_terminal():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen([leash, "run", "--", "/usr/bin/python3", "-c", inner], stdin=slave, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, start_new_session=True, preexec_fn=take_terminal)
out, err = p.communicate(timeout=60)
os.set_blocking(slave, False)
try:
    pending = os.read(slave, 100)
except BlockingIOError:
    pending = b""
print("exit", p.returncode)
print(out.decode(), end="")
print("pending", pending)
"#;

#[test]
fn terminal_injection_from_inside_never_reaches_the_callers_terminal() {
    let Some(()) = sandbox() else { return };
    let out = driver(TERMINAL, &[]);
    assert!(out.contains("exit 0"), "{out}");
    assert!(out.contains(&format!("TIOCSTI refused {}", libc::EPERM)), "{out}");
    assert!(out.contains(&format!("TIOCLINUX refused {}", libc::EPERM)), "{out}");
    assert!(out.contains("pending b''"), "nothing was pushed into the caller's terminal: {out}");
}

/// leash and a sibling in one process group, as a shell's job; the command signals its process group.
const SIGNALS: &str = r#"
import subprocess, sys
leash = sys.argv[1]
sibling = subprocess.Popen(["sleep", "60"], process_group=0)
p = subprocess.Popen([leash, "run", "--", "sh", "-c", "kill -KILL 0; echo survived"], process_group=sibling.pid)
rc = p.wait(timeout=60)
print("leash", rc, "sibling", "alive" if sibling.poll() is None else "dead")
sibling.kill()
sibling.wait()
"#;

#[test]
fn a_signal_to_the_commands_process_group_reaches_nothing_of_the_callers() {
    let Some(()) = sandbox() else { return };
    let out = driver(SIGNALS, &[]);
    // The command killed its own group (itself): leash reports that, and the caller's job lives on.
    assert_eq!(out.trim(), "leash 137 sibling alive", "{out}");
}

// ---- host Unix sockets -----------------------------------------------------------------------------------------

/// A host server on a Unix socket in `dir`, bound the way `mode` says; prints `ready`, then `accepted` or `none`.
const UNIX_SERVER: &str = r#"
import os, select, socket, sys
mode, d, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_UNIX)
if mode == "relative":
    os.chdir(d)
    s.bind("target.sock")
elif mode == "linked":
    s.bind(d + "/tmp-name.sock")
    os.link(d + "/tmp-name.sock", d + "/target.sock")
    os.unlink(d + "/tmp-name.sock")
else:
    s.bind(d + "/target.sock")
s.listen()
print("ready", flush=True)
r, _, _ = select.select([s], [], [], wait)
print("accepted" if r else "none", flush=True)
"#;

/// A server started by `prefix` (e.g. `unshare -m ...`), waiting for its `ready`.
struct HostServer {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
}

impl HostServer {
    fn start(prefix: &[&str], mode: &str, dir: &Path) -> HostServer {
        let mut cmd = Command::new(prefix.first().copied().unwrap_or(PYTHON));
        cmd.args(prefix.iter().skip(1));
        if !prefix.is_empty() {
            cmd.arg(PYTHON);
        }
        let mut child =
            cmd.args(["-c", UNIX_SERVER, mode, dir.to_str().unwrap(), "20"]).stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        lines.read_line(&mut ready).unwrap();
        assert_eq!(ready, "ready\n", "the host server did not start");
        HostServer { child, lines }
    }

    /// Whether a connection arrived (kills the server if still waiting).
    fn accepted(mut self) -> bool {
        let _ = self.child.kill();
        let mut verdict = String::new();
        let _ = self.lines.read_line(&mut verdict);
        let _ = self.child.wait();
        verdict == "accepted\n"
    }
}

/// From inside: connect to `path`; prints `connected` or `refused ERRNO`.
fn connect_from_inside(path: &Path) -> String {
    let code = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\n    print('connected')\n\
         except OSError as e:\n    print('refused', e.errno)",
        path.to_str().unwrap()
    );
    let out = run_python(&[], &code);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// A directory outside the places the old walk looked (/run, /tmp, /var/tmp, /dev/shm).
fn unwalked_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("leash-door").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn assert_refused_and_unseen(server: HostServer, verdict: &str) {
    assert_eq!(verdict, format!("refused {}", libc::ECONNREFUSED), "the sandbox reached the host's socket");
    assert!(!server.accepted(), "the host server saw a connection");
}

/// A host server bound in an unwalked directory as `mode` says; the command connects by the socket's full path.
fn assert_host_socket_refused(mode: &str) {
    let Some(()) = sandbox() else { return };
    let dir = unwalked_dir();
    let server = HostServer::start(&[], mode, dir.path());
    let verdict = connect_from_inside(&dir.path().join("target.sock"));
    assert_refused_and_unseen(server, &verdict);
}

#[test]
fn a_host_unix_socket_bound_by_a_relative_path_is_refused() {
    assert_host_socket_refused("relative");
}

#[test]
fn a_host_unix_socket_linked_into_place_is_refused() {
    // OpenSSH's ControlMaster binds a temporary name, links the socket into place and removes the temporary name.
    assert_host_socket_refused("linked");
}

#[test]
fn a_host_unix_socket_bound_in_another_mount_namespace_is_refused() {
    let Some(()) = sandbox() else { return };
    let dir = unwalked_dir();
    let (real, view) = (dir.path().join("real"), dir.path().join("view"));
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(&view).unwrap();
    // The server sees `real` at `view`: the kernel lists the socket as `view/target.sock`, a path that does not
    // exist in leash's view, where the socket is `real/target.sock`.
    let bind = format!("mount --bind {} {} && exec \"$@\"", real.display(), view.display());
    let prefix = ["unshare", "-rm", "sh", "-c", &bind, "server"];
    let server = HostServer::start(&prefix, "plain", &view);
    let verdict = connect_from_inside(&real.join("target.sock"));
    assert_refused_and_unseen(server, &verdict);
}

/// Files removed on drop.
struct Flood(Vec<PathBuf>);

impl Drop for Flood {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn a_host_unix_socket_behind_thousands_of_files_is_refused() {
    // The old walk visited at most 4096 entries: a previous run that left 5000 files in /tmp made every socket
    // below it (bound in another network namespace, so absent from leash's /proc/net/unix) reachable.
    let Some(()) = sandbox() else { return };
    let tag = std::process::id();
    let flood = Flood((0..5000).map(|i| PathBuf::from(format!("/tmp/leash-flood-{tag}-{i:05}"))).collect());
    for p in &flood.0 {
        std::fs::write(p, b"").unwrap();
    }
    let dir = tempfile::Builder::new().prefix("leash-door").tempdir_in("/tmp").unwrap();
    let server = HostServer::start(&["unshare", "-rn"], "plain", dir.path());
    let verdict = connect_from_inside(&dir.path().join("target.sock"));
    drop(flood);
    assert_refused_and_unseen(server, &verdict);
}

#[test]
fn the_commands_own_unix_sockets_and_allowed_host_ones_still_connect() {
    let Some(()) = sandbox() else { return };
    let dir = unwalked_dir();
    let server = HostServer::start(&[], "plain", dir.path());
    let host = dir.path().join("target.sock");
    let code = format!(
        "import os, socket, tempfile\nd = tempfile.mkdtemp()\nl = socket.socket(socket.AF_UNIX)\n\
         l.bind(d + '/own.sock')\nl.listen()\nc = socket.socket(socket.AF_UNIX)\nc.connect(d + '/own.sock')\n\
         os.chdir(d)\nsocket.socket(socket.AF_UNIX).connect('own.sock')\nprint('own connected')\n\
         import threading\nt = threading.Thread(target=lambda: socket.socket(socket.AF_UNIX).connect('own.sock'))\n\
         t.start()\nt.join()\nprint('from a thread')\n\
         socket.socket(socket.AF_UNIX).connect({:?})\nprint('allowed connected')",
        host.to_str().unwrap()
    );
    let out = run_python(&["--allow-unix-socket", host.to_str().unwrap()], &code);
    assert_eq!(text(&out.stdout), "own connected\nfrom a thread\nallowed connected\n", "{}", text(&out.stderr));
    assert!(server.accepted(), "the allowed socket's server saw the connection");
}

// ---- other address families ------------------------------------------------------------------------------------

#[test]
fn af_vsock_and_other_families_that_leave_the_namespace_are_refused() {
    let Some(()) = sandbox() else { return };
    // Only sockets are made; nothing is connected (CID 2 would be the hypervisor).
    let code = "import socket
for name, family, kind in [('vsock', socket.AF_VSOCK, socket.SOCK_STREAM), ('vsock-dgram', socket.AF_VSOCK, socket.SOCK_DGRAM),
                           ('packet', socket.AF_PACKET, socket.SOCK_RAW), ('tipc', 30, socket.SOCK_RDM),
                           ('unix-dgram', socket.AF_UNIX, socket.SOCK_DGRAM)]:
    try:
        socket.socket(family, kind)
        print(name, 'opened')
    except OSError as e:
        print(name, e.errno)";
    let out = run_python(&[], code);
    let stdout = text(&out.stdout);
    let want = format!(
        "vsock {a}\nvsock-dgram {a}\npacket {a}\ntipc {a}\nunix-dgram {p}\n",
        a = libc::EAFNOSUPPORT,
        p = libc::EPERM
    );
    assert_eq!(stdout, want, "{}", text(&out.stderr));
}

// ---- IPC and keyrings ------------------------------------------------------------------------------------------

/// Outside: a SysV shared memory segment, a POSIX message queue and a key in the session keyring, then leash runs a
/// command that looks for each, and makes a segment of its own; afterwards, whether that one outlived the run.
const IPC: &str = r#"
import ctypes, os, subprocess, sys
leash, tag = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEY_SPEC_SESSION_KEYRING = -3
shm_key, inside_key, queue, desc = 0x1ea50000 + tag % 0xffff, 0x1ea60000 + tag % 0xffff, f"/leash-{tag}", f"leash-{tag}"
shm = libc.shmget(shm_key, 4096, 0o1600)
q = libc.mq_open(queue.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
key = libc.syscall(248, b"user", desc.encode(), b"secret", 6, KEY_SPEC_SESSION_KEYRING)
assert shm >= 0 and q >= 0 and key >= 0, (shm, q, key, ctypes.get_errno())
inner = f'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def show(name, ret):
    print(name, "found" if ret >= 0 else ctypes.get_errno(), flush=True)
show("shm", libc.shmget({shm_key}, 0, 0))
show("mqueue", libc.mq_open(b"{queue}", os.O_RDONLY))
show("key", libc.syscall(250, 10, {KEY_SPEC_SESSION_KEYRING}, b"user", b"{desc}", 0))
show("made", libc.shmget({inside_key}, 4096, 0o1600))
'''
out = subprocess.run([leash, "run", "--", "/usr/bin/python3", "-c", inner], capture_output=True, text=True, timeout=60)
print(out.stdout, end="")
print("outlived", "yes" if libc.shmget(inside_key, 0, 0) >= 0 else "no")
libc.shmctl(shm, 0, None)  # IPC_RMID
libc.mq_unlink(queue.encode())
libc.syscall(250, 21, key)  # KEYCTL_INVALIDATE
leftover = libc.shmget(inside_key, 0, 0)
if leftover >= 0:
    libc.shmctl(leftover, 0, None)
"#;

#[test]
fn sysv_ipc_posix_queues_and_the_session_keyring_are_not_shared_with_the_host() {
    let Some(()) = sandbox() else { return };
    let out = driver(IPC, &[&std::process::id().to_string()]);
    let want =
        format!("shm {}\nmqueue {}\nkey {}\nmade found\noutlived no\n", libc::ENOENT, libc::ENOENT, libc::ENOKEY);
    assert_eq!(out, want);
}

// ---- the audit log ---------------------------------------------------------------------------------------------

#[test]
fn the_audit_log_file_cannot_be_read_or_rewritten_from_inside() {
    let Some(()) = sandbox() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let forge = format!(
        "import os, urllib.request\nlog = {:?}\ntry:\n    print('read', len(open(log).read()))\n    \
         open(log, 'w').write('{{\"decision\": \"allow\", \"forged\": true}}\\n')\n    print('written')\n\
         except OSError as e:\n    print('refused', e.errno)\ntry:\n    urllib.request.urlopen('http://refused.test/', timeout=10)\n\
         except Exception as e:\n    print('fetch', e)",
        log.to_str().unwrap()
    );
    let out = run_python(&["--log", log.to_str().unwrap()], &forge);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "only leash's own line: {lines:?}\n{}", text(&out.stdout));
    assert_eq!((lines[0]["host"].as_str(), lines[0]["decision"].as_str()), (Some("refused.test"), Some("block")));
    assert!(text(&out.stdout).starts_with("read 0\n"), "the log's contents are hidden: {}", text(&out.stdout));
}

#[test]
fn without_a_log_file_leashs_records_follow_everything_the_command_wrote() {
    let Some(()) = sandbox() else { return };
    // The command makes a refused request, then writes a forged record to the standard error it shares.
    let forge = "import sys, urllib.request
try:
    urllib.request.urlopen('http://refused.test/', timeout=10)
except Exception:
    pass
sys.stderr.write('{\"decision\": \"allow\", \"host\": \"refused.test\", \"forged\": true}\\n')";
    let out = run_python(&[], forge);
    let stderr = text(&out.stderr);
    let records: Vec<(usize, Value)> =
        stderr.lines().enumerate().filter_map(|(i, l)| serde_json::from_str::<Value>(l).ok().map(|v| (i, v))).collect();
    let forged = records.iter().find(|(_, v)| v["forged"] == true).map(|(i, _)| *i);
    let real = records.iter().find(|(_, v)| v["decision"] == "block").map(|(i, _)| *i);
    assert!(forged.is_some() && real.is_some(), "{stderr}");
    assert!(real > forged, "leash's record comes after all the command wrote: {stderr}");
}

/// The command (which owns the log's directory) makes a refused request, renames the directory, puts its own file,
/// symlink or FIFO at the log's path, waits past the half second after which leash used to look at the path again,
/// and makes two more refused requests; then reads what reached its planted file (or FIFO).
const REDIRECT_LOG: &str = r#"
import os, sys, time, urllib.request
mode, logs, theirs = sys.argv[1], sys.argv[2], sys.argv[3]
def refused(n):
    try:
        urllib.request.urlopen("http://refused%d.test/" % n, timeout=10)
    except Exception:
        pass
refused(1)
os.rename(logs, logs + ".moved")
os.mkdir(logs)
path = os.path.join(logs, "audit.jsonl")
reader = None
if mode == "file":
    open(path, "w").close()
    theirs = path
elif mode == "symlink":
    open(theirs, "w").close()
    os.symlink(theirs, path)
else:
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
time.sleep(0.7)
refused(2)
time.sleep(0.7)
refused(3)
if reader is not None:
    try:
        got = os.read(reader, 65536)
    except BlockingIOError:
        got = b""
else:
    got = open(theirs, "rb").read()
print("read", len(got))
"#;

#[test]
fn the_audit_log_cannot_be_redirected_by_renaming_its_directory() {
    let Some(()) = sandbox() else { return };
    for mode in ["file", "symlink", "fifo"] {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let log = logs.join("audit.jsonl");
        let theirs = dir.path().join("theirs.jsonl");
        let out = Command::new("timeout")
            .args(["60", &leash(), "run", "--log", log.to_str().unwrap(), "--", PYTHON, "-c", REDIRECT_LOG, mode])
            .args([logs.to_str().unwrap(), theirs.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode}: {}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(text(&out.stdout), "read 0\n", "{mode}: no line reached the command's {mode}");
        // Every line of the run is in the file leash opened, now under the directory's new name.
        let kept = std::fs::read_to_string(dir.path().join("logs.moved/audit.jsonl")).unwrap();
        let hosts: Vec<String> = kept
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["host"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(hosts, ["refused1.test", "refused2.test", "refused3.test"], "{mode}: {kept}");
        let planted = std::fs::symlink_metadata(&log).unwrap();
        if planted.file_type().is_file() {
            assert_eq!(planted.len(), 0, "{mode}: nothing at the planted path");
        }
    }
}

// ---- kernel files ----------------------------------------------------------------------------------------------

#[test]
fn root_inside_cannot_write_interrupt_routing_or_the_hosts_kernel_log() {
    let Some(()) = sandbox() else { return };
    let uid = Command::new("id").arg("-u").output().unwrap();
    if text(&uid.stdout).trim() != "0" {
        eprintln!("SKIPPED: the host's kernel files are root's; this test runs leash as root");
        return;
    }
    let marker = format!("leash-door-test-{}", std::process::id());
    // Opening for writing is enough to tell for the interrupt files, and changes nothing.
    let code = format!(
        "import errno, glob, os
for p in ['/proc/irq/default_smp_affinity'] + sorted(glob.glob('/proc/irq/*/smp_affinity'))[:1]:
    try:
        os.close(os.open(p, os.O_WRONLY))
        print(p, 'writable')
    except OSError as e: print(p, errno.errorcode[e.errno])
with open('/dev/kmsg', 'w') as f: f.write('{marker}\\n')"
    );
    let out = run_python(&[], &code);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("/proc/irq/default_smp_affinity EROFS"), "{stdout}");
    for line in stdout.lines() {
        assert!(line.ends_with(" EROFS"), "read-only: {line}");
    }
    let kernel_log = Command::new("dmesg").output().unwrap();
    assert!(!text(&kernel_log.stdout).contains(&marker), "the line reached the host's kernel log");
}

// ---- the environment -------------------------------------------------------------------------------------------

#[test]
fn clean_env_keeps_secrets_and_agent_sockets_out_of_the_command() {
    let Some(()) = sandbox() else { return };
    let secrets = [
        ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
        ("GITHUB_TOKEN", "gh-token"),
        ("OPENAI_API_KEY", "sk-secret"),
        ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
        ("KEPT_VAR", "kept"),
    ];
    let out = Command::new("timeout")
        .args(["60", &leash(), "run", "--clean-env", "--keep-env", "KEPT_VAR", "--", "env"])
        .envs(secrets)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let env = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (name, value) in &secrets[..4] {
        assert!(!env.contains(value), "{name} passed through: {env}");
    }
    for kept in ["KEPT_VAR=kept", "LC_ALL=C", "HTTPS_PROXY=http://127.0.0.1:3128"] {
        assert!(env.lines().any(|l| l == kept), "{kept} missing: {env}");
    }
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    // Without it, the environment passes through (the documented default).
    let out = Command::new("timeout").args(["60", &leash(), "run", "--", "env"]).envs(secrets).output().unwrap();
    assert!(text(&out.stdout).contains("GITHUB_TOKEN=gh-token"));
}
