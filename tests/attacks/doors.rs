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

pub(crate) const PYTHON: &str = "/usr/bin/python3";

pub(crate) fn leash() -> String {
    std::env::var("LEASH_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_leash").to_owned())
}

/// Whether `leash run` can make its namespaces here (a loud skip, or a failure under `LEASH_REQUIRE_SANDBOX=1`).
pub(crate) fn sandbox() -> Option<()> {
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
        .env("XDG_STATE_HOME", state_home())
        .output()
        .unwrap()
}

/// Where runs without `--log` keep their audit logs here: the tests' scratch directory, not the caller's home.
fn state_home() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("attacks-state-{}", std::process::id()))
}

pub(crate) fn text(bytes: &[u8]) -> String {
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

/// leash on a pseudo-terminal that is its controlling terminal; the command reads a line, then switches its terminal's
/// echo and canonical mode off and its line discipline to N_NULL (`TIOCSETD`). Afterwards: the caller's terminal's
/// line discipline and settings.
const TERMINAL_SETTINGS: &str = r#"
import fcntl, os, select, struct, subprocess, sys, termios, time
leash = sys.argv[1]
master, slave = os.openpty()
before = termios.tcgetattr(slave)
inner = '''
import fcntl, struct, sys, termios
print("ready", flush=True)
line = sys.stdin.readline()
print("got", line.strip(), flush=True)
t = termios.tcgetattr(0)
t[3] &= ~(termios.ECHO | termios.ICANON)
termios.tcsetattr(0, termios.TCSANOW, t)
print("changing", flush=True)
fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))
'''
def take_terminal():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen([leash, "run", "--", "/usr/bin/python3", "-c", inner], stdin=slave, stdout=slave, stderr=slave,
                     start_new_session=True, preexec_fn=take_terminal)
seen, deadline = b"", time.monotonic() + 30
def read_until(word):
    global seen
    while word not in seen and time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            seen += os.read(master, 4096)
read_until(b"ready")
os.write(master, b"hello\r")
read_until(b"changing")
rc = p.wait(timeout=30)
ldisc = struct.unpack("i", fcntl.ioctl(slave, termios.TIOCGETD, b"\0" * 4))[0]
print("exit", rc, "got hello" if b"got hello" in seen else repr(seen))
try:
    now = "same" if termios.tcgetattr(slave) == before else "changed"
except termios.error as e:
    now = "unreadable"
print("ldisc", ldisc, "termios", now)
fcntl.ioctl(slave, termios.TIOCSETD, struct.pack("i", 0))
# Raw while the command runs, put back when leash ends on SIGTERM.
before = termios.tcgetattr(slave)
p = subprocess.Popen([leash, "run", "--", "/usr/bin/python3", "-c", "print('ready', flush=True); input()"],
                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=take_terminal)
seen, deadline = b"", time.monotonic() + 30
read_until(b"ready")
raw = termios.tcgetattr(slave) != before
p.send_signal(15)
rc = p.wait(timeout=30)
print("raw", raw, "exit", rc, "restored", termios.tcgetattr(slave) == before)
"#;

#[test]
fn what_the_command_does_to_its_terminal_never_reaches_the_callers() {
    let Some(()) = sandbox() else { return };
    let out = driver(TERMINAL_SETTINGS, &[]);
    assert_eq!(
        out, "exit 0 got hello\nldisc 0 termios same\nraw True exit 143 restored True\n",
        "the caller's terminal still works; input and output pass"
    );
}

/// Outside: another terminal of the caller's (a pseudo-terminal the test holds open, owned by the uid leash runs as,
/// never `/dev/pts/0`), given to leash by its path; leash runs with no terminal (`plain`), with none and the host's
/// devpts mounted at a second place as well, whose path it is given (`elsewhere`), or on a pseudo-terminal that is its
/// controlling terminal (`terminal`). Inside, the command opens that path and writes to it, lists /dev/pts,
/// names its own terminal (`terminal`) or makes a pseudo-terminal (`plain`). Afterwards: what the caller's other
/// terminal received.
const OTHER_TERMINAL: &str = r#"
import fcntl, os, select, subprocess, sys, tempfile, termios, time
mode, owner, leash = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
held = [os.openpty()]
while os.ttyname(held[-1][1]) == "/dev/pts/0":
    held.append(os.openpty())
other_master, other = held[-1]
os.chown(os.ttyname(other), owner, -1)
inner = '''
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY)
    os.write(fd, b"from-inside")
    print("open done", flush=True)
except OSError as e:
    print("open", e.errno, flush=True)
if sys.argv[2] == "terminal":
    print("tty", os.ttyname(0), os.path.exists(os.ttyname(0)), "pts", sorted(os.listdir("/dev/pts")), flush=True)
else:
    print("pts", sorted(os.listdir("/dev/pts")), flush=True)
    m, s = os.openpty()
    print("made", os.ttyname(s), "pts", sorted(os.listdir("/dev/pts")), flush=True)
'''
path, prefix = os.ttyname(other), []
if mode == "elsewhere":
    d = tempfile.mkdtemp()
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind /dev/pts "$0" && exec "$@"', d]
    path = d + "/" + os.path.basename(path)
cmd = prefix + leash + ["run", "--allow", "none.test", "--", "/usr/bin/python3", "-c", inner, path, mode]
if mode == "terminal":
    master, slave = os.openpty()
    os.chown(os.ttyname(slave), owner, -1)
    def take_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=take_terminal)
    seen, deadline = b"", time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            seen += os.read(master, 4096)
    os.set_blocking(master, False)
    try:
        seen += os.read(master, 4096)
    except BlockingIOError:
        pass
    print(seen.decode().replace("\r\n", "\n"), end="")
    p.wait(timeout=5)
else:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    print(out.stdout, end="")
    print(out.stderr, end="", file=sys.stderr)
    if mode == "elsewhere":
        os.rmdir(d)
os.set_blocking(other_master, False)
try:
    got = os.read(other_master, 100)
except BlockingIOError:
    got = b""
print("other terminal got", got)
"#;

/// `OTHER_TERMINAL` in `mode`, run as root (the uid leash runs as owns the other terminal).
fn other_terminal(prefix: &[String], mode: &str, owner: u32) -> String {
    // The run keeps its audit log under XDG_STATE_HOME: one the user (nobody too) can write, so that only the
    // terminal's own lines reach it.
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = Command::new("timeout")
        .args(["120", PYTHON, "-c", OTHER_TERMINAL, mode, &owner.to_string()])
        .args(prefix)
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "driver failed: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn the_callers_other_terminals_are_out_of_reach_and_the_command_has_a_devpts_of_its_own() {
    let Some(()) = sandbox() else { return };
    let noent = libc::ENOENT;
    let plain = format!("open {noent}\npts ['ptmx']\nmade /dev/pts/0 pts ['0', 'ptmx']\nother terminal got b''\n");
    let terminal = format!("open {noent}\ntty /dev/pts/0 True pts ['0', 'ptmx']\nother terminal got b''\n");
    if is_root() {
        assert_eq!(other_terminal(&[leash()], "plain", 0), plain, "as root, no terminal");
        assert_eq!(other_terminal(&[leash()], "elsewhere", 0), plain, "as root, the host's devpts mounted elsewhere");
        assert_eq!(other_terminal(&[leash()], "terminal", 0), terminal, "as root, on a terminal");
    }
    if let Some((_dir, nobody)) = as_nobody() {
        assert_eq!(other_terminal(&nobody, "plain", 65534), plain, "as nobody, no terminal");
        assert_eq!(other_terminal(&nobody, "elsewhere", 65534), plain, "as nobody, the host's devpts elsewhere");
        assert_eq!(other_terminal(&nobody, "terminal", 65534), terminal, "as nobody, on a terminal");
    }
}

/// A virtual console of the host's, the highest-numbered (the least likely in use): a console caller's terminal.
fn a_virtual_console() -> Option<PathBuf> {
    let found = (1..64).rev().map(|n| PathBuf::from(format!("/dev/tty{n}"))).find(|p| p.exists());
    if found.is_none() {
        // Not a missing namespace: a machine without consoles (a container) has nothing here to hide.
        eprintln!("SKIPPED: this host has no virtual console; the console caller's test did not run");
    }
    found
}

/// `path` owned by `uid` until dropped, as login makes a console its user's.
struct OwnedBy {
    path: PathBuf,
    was: u32,
}

impl OwnedBy {
    fn new(path: &Path, uid: u32) -> OwnedBy {
        let was = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(path).unwrap());
        std::os::unix::fs::chown(path, Some(uid), None).unwrap();
        OwnedBy { path: path.to_owned(), was }
    }
}

impl Drop for OwnedBy {
    fn drop(&mut self) {
        let _ = std::os::unix::fs::chown(&self.path, Some(self.was), None);
    }
}

/// What the command finds at each of `paths`: `PATH KIND MAJOR:MINOR` (hex), or `PATH missing`.
fn devices_inside(prefix: &[String], stdin: Stdio, paths: &[&str]) -> String {
    let script = r#"for p in "$@"; do stat -L -c '%n %F %t:%T' "$p" 2>/dev/null || echo "$p missing"; done"#;
    let out = Command::new("timeout")
        .arg("60")
        .args(prefix)
        .args(["run", "--", "sh", "-c", script, "sh"])
        .args(paths)
        .stdin(stdin)
        .output()
        .unwrap();
    assert!(out.status.success(), "leash run: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn a_console_callers_own_terminal_is_out_of_reach() {
    let Some(()) = sandbox() else { return };
    let Some(console) = a_virtual_console() else { return };
    let tty = console.to_str().unwrap();
    // Each covered by the sandbox's own empty read-only file, no device at all: nothing written there reaches the
    // console, nothing typed there is read.
    let hidden = |paths: &[&str]| paths.iter().map(|p| format!("{p} regular empty file 0:0\n")).collect::<String>();
    if is_root() {
        // Root logged in on the console: leash's stdin is it (not made its controlling terminal here).
        let own = std::os::unix::fs::OpenOptionsExt::custom_flags(
            std::fs::OpenOptions::new().read(true).write(true),
            libc::O_NOCTTY,
        )
        .open(&console)
        .unwrap();
        let paths = [tty, "/dev/tty0", "/dev/console"];
        assert_eq!(devices_inside(&[leash()], Stdio::from(own), &paths), hidden(&paths), "as root, on {tty}");
    }
    if let Some((_dir, nobody)) = as_nobody() {
        // `nobody` logged in on the console (its owner now), running leash from elsewhere (no terminal at all).
        let _owned = OwnedBy::new(&console, 65534);
        assert_eq!(devices_inside(&nobody, Stdio::null(), &[tty]), hidden(&[tty]), "as nobody, owning {tty}");
    }
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

// ---- init's liveness ------------------------------------------------------------------------------------------

/// A command that connects to its own full listener while other threads of it change the socket's `SO_SNDTIMEO`
/// (`connect_race.c`); leash runs it, then is killed with SIGKILL. Prints what the command said, then how many of the
/// sandbox's processes (init included: its command line is leash's) outlived leash by 5 seconds.
const STALL: &str = r#"
import os, signal, subprocess, sys, time, uuid
leash, race = sys.argv[1], sys.argv[2]
mark = "leash-stall-" + uuid.uuid4().hex
p = subprocess.Popen([leash, "run", "--", race, "6", mark], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
os.set_blocking(p.stdout.fileno(), False)
out, deadline = b"", time.monotonic() + 40
while b"done" not in out and time.monotonic() < deadline:
    time.sleep(0.1)
    try:
        out += os.read(p.stdout.fileno(), 4096)
    except BlockingIOError:
        pass
print(out.decode().replace("\n", " ").strip())
os.kill(p.pid, signal.SIGKILL)
p.wait()
def left():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(int(pid))
        except OSError:
            pass
    return found
deadline = time.monotonic() + 5
while left() and time.monotonic() < deadline:
    time.sleep(0.05)
rest = left()
print("left", len(rest))
for pid in rest:
    os.kill(pid, signal.SIGKILL)
# Init busy (stopped here, as if blocked) when leash is killed: the kernel must end it all the same.
mark = "leash-busy-" + uuid.uuid4().hex
p = subprocess.Popen([leash, "run", "--", "/usr/bin/python3", "-c", "print('ready', flush=True); input()", mark],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
assert p.stdout.readline() == b"ready\n"
init = int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])
os.kill(init, signal.SIGSTOP)
os.kill(p.pid, signal.SIGKILL)
p.wait()
deadline = time.monotonic() + 5
while left() and time.monotonic() < deadline:
    time.sleep(0.05)
rest = left()
print("left busy", len(rest))
for pid in rest:
    os.kill(pid, signal.SIGKILL)
    os.kill(pid, signal.SIGCONT)
"#;

#[test]
fn init_is_never_stalled_by_the_commands_socket_and_dies_with_leash() {
    let Some(()) = sandbox() else { return };
    let dir = tempfile::tempdir().unwrap();
    let race = dir.path().join("connect_race");
    let source = dir.path().join("connect_race.c");
    std::fs::write(&source, include_str!("connect_race.c")).unwrap();
    let built = Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&race).arg(&source).status().unwrap();
    assert!(built.success(), "cc could not build the racing command");
    let out = driver(STALL, &[race.to_str().unwrap()]);
    // `touched 1`: init set the time-out on the command's socket (whose other threads can reset it in the window
    // before init's connect, leaving init blocked for good). No `done`: init was stalled, and leash with it.
    assert_eq!(out, "touched 0 done\nleft 0\nleft busy 0\n", "init waits on its own clock and ends with leash");
}

// ---- sockets on stdio ------------------------------------------------------------------------------------------

/// leash started with a Unix datagram socket, then a UDP socket, as stdout (one end of a pair, or connected to a
/// receiver of the caller's), then one Unix stream socket as stdin and stdout (inetd); the command writes its output
/// and tries `sendto` on its stdout to host datagram sockets by path, abstract name and UDP address.
const STDIO_SOCKETS: &str = r#"
import os, socket, subprocess, sys, tempfile
leash = sys.argv[1]
d = tempfile.mkdtemp()
path, abstract = d + "/host.sock", b"\0leash-door-" + os.urandom(6).hex().encode()
unix_targets = []
for addr in (path, abstract):
    t = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    t.bind(addr)
    t.settimeout(0.5)
    unix_targets.append(t)
udp_target = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp_target.bind(("127.0.0.1", 0))
udp_target.settimeout(0.5)
inner = f"""
import os, socket, sys
os.write(1, b"hello through stdout")
for addr in ({path!r}, {abstract!r}):
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=os.dup(1)).sendto(b"escaped", addr)
    except OSError as e:
        print("unix", e.errno, file=sys.stderr)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM, fileno=os.dup(1)).sendto(b"escaped", {udp_target.getsockname()!r})
except OSError as e:
    print("udp", e.errno, file=sys.stderr)
"""
def run(stdout):
    p = subprocess.run([leash, "run", "--", "/usr/bin/python3", "-c", inner], stdout=stdout, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode
def arrived(t):
    try:
        return t.recv(100)
    except socket.timeout:
        return None
# stdout a Unix datagram socket (one end of a pair; the other end is the caller's), then a UDP one.
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
mine.settimeout(2)
rc = run(theirs)
theirs.close()
print("unix-dgram stdout:", rc, "output", arrived(mine), "escaped", [arrived(t) for t in unix_targets + [udp_target]])
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
out.bind(("127.0.0.1", 0))
out.settimeout(2)
stdout = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
stdout.connect(out.getsockname())
rc = run(stdout)
print("udp stdout:", rc, "output", arrived(out), "escaped", [arrived(t) for t in unix_targets + [udp_target]])
# inetd-style: stdin and stdout one Unix stream socket.
mine, theirs = socket.socketpair()
mine.sendall(b"ping")
mine.shutdown(socket.SHUT_WR)
p = subprocess.run([leash, "run", "--", "/usr/bin/python3", "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"],
                   stdin=theirs, stdout=theirs, stderr=subprocess.PIPE, timeout=60)
theirs.close()
mine.settimeout(5)
print("inetd:", p.returncode, mine.recv(100))
"#;

#[test]
fn a_socket_on_stdio_is_relayed_never_handed_to_the_command() {
    let Some(()) = sandbox() else { return };
    let out = driver(STDIO_SOCKETS, &[]);
    let want = "unix-dgram stdout: 0 output b'hello through stdout' escaped [None, None, None]\n\
                udp stdout: 0 output b'hello through stdout' escaped [None, None, None]\n\
                inetd: 0 b'PING'\n";
    assert_eq!(out, want, "the host's datagram sockets got nothing; output and input still pass");
}

/// An allowed host socket removed during the run, and host sockets made until one gets its inode number; the
/// command then connects to that one. Prints the command's verdict and whether the host's server saw it.
const REUSED_INODE: &str = r#"
import os, select, socket, subprocess, sys
leash, d = sys.argv[1], sys.argv[2]
allowed, go = d + "/allowed.sock", d + "/go"
a = socket.socket(socket.AF_UNIX)
a.bind(allowed)
a.listen()
ino = os.stat(allowed).st_ino
inner = f"""
import os, socket, time
print("ready", flush=True)
for _ in range(600):
    if os.path.exists({go!r}):
        break
    time.sleep(0.05)
target = open({go!r}).read()
try:
    socket.socket(socket.AF_UNIX).connect(target)
    print("connected")
except OSError as e:
    print("refused", e.errno)
"""
p = subprocess.Popen([leash, "run", "--allow-unix-socket", allowed, "--", "/usr/bin/python3", "-c", inner],
                     stdout=subprocess.PIPE, text=True)
assert p.stdout.readline() == "ready\n"
# The allowed socket goes away; host sockets are made elsewhere until one gets its inode number (ext4 hands a
# freed one out again at once; a held inode is never freed).
a.close()
os.unlink(allowed)
for i in range(200):
    other = f"{d}/other-{i}.sock"
    b = socket.socket(socket.AF_UNIX)
    b.bind(other)
    if os.stat(other).st_ino == ino or i == 199:
        break
    b.close()
    os.unlink(other)
b.listen()
print("reused", os.stat(other).st_ino == ino, file=sys.stderr)
open(go + ".tmp", "w").write(other)
os.rename(go + ".tmp", go)
verdict = p.stdout.read().strip()
p.wait(timeout=60)
r, _, _ = select.select([b], [], [], 1)
print(verdict, "accepted" if r else "unseen")
"#;

#[test]
fn an_allowed_unix_socket_gone_during_the_run_lends_its_inode_to_nothing() {
    let Some(()) = sandbox() else { return };
    // On disk (ext4 hands a freed inode number to the next file at once; tmpfs counts up).
    let dir = unwalked_dir();
    let out = driver(REUSED_INODE, &[dir.path().to_str().unwrap()]);
    assert_eq!(out, format!("refused {} unseen\n", libc::ECONNREFUSED), "an unrelated socket was reached");
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
    // The keyring search is refused outright (`keyctl` is filtered), as no key could be found before.
    let want = format!("shm {}\nmqueue {}\nkey {}\nmade found\noutlived no\n", libc::ENOENT, libc::ENOENT, libc::EPERM);
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
fn without_a_log_file_leashs_records_never_share_the_commands_stderr() {
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
    // On the shared stderr, the only record is the command's forgery; leash's are in a file it names there, which
    // only leash wrote (the command had ended before it was made).
    let records: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
    assert!(records.iter().all(|v| v["forged"] == true), "{stderr}");
    let kept = stderr.lines().find_map(|l| l.strip_prefix("leash: the audit log of this run is in "));
    let kept = std::fs::read_to_string(kept.unwrap_or_else(|| panic!("no kept log named: {stderr}"))).unwrap();
    let kept: Vec<Value> = kept.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(kept.iter().any(|v| v["decision"] == "block" && v["host"] == "refused.test"), "{kept:?}");
    assert!(kept.iter().all(|v| v.get("forged").is_none()), "{kept:?}");
}

/// The command (which owns the log's directory) makes a refused request, renames the directory, puts its own file,
/// symlink or FIFO at the log's path, waits past the half second after which leash used to look at the path again,
/// and makes two more refused requests; then reads what reached its planted file (or FIFO).
const REDIRECT_LOG: &str = r#"
import errno, os, sys, time, urllib.request
mode, logs, theirs = sys.argv[1], sys.argv[2], sys.argv[3]
def refused(n):
    try:
        urllib.request.urlopen("http://refused%d.test/" % n, timeout=10)
    except Exception:
        pass
def attempt(what, act):
    try:
        act()
    except OSError as e:
        print(what, errno.errorcode[e.errno], flush=True)
refused(1)
def move():
    os.rename(logs, logs + ".moved")
    print("moved", flush=True)
    os.mkdir(logs)
attempt("rename", move)
path = os.path.join(logs, "audit.jsonl")
reader = None
if mode == "file":
    attempt("plant", lambda: open(path, "w").close())
    theirs = path
elif mode == "symlink":
    open(theirs, "w").close()
    attempt("plant", lambda: os.symlink(theirs, path))
else:
    attempt("plant", lambda: os.mkfifo(path))
    try:
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        pass
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
        let said = text(&out.stdout);
        assert!(out.status.success(), "{mode}: {said}{}", text(&out.stderr));
        assert!(said.ends_with("read 0\n"), "{mode}: no line reached the command's {mode}: {said}");
        // The directory is pinned: the command cannot move it (the build before pinning let it, and the lines went
        // on into the file leash opened, under the directory's new name; both are checked).
        let moved = said.contains("moved");
        let kept = std::fs::read_to_string(if moved { dir.path().join("logs.moved/audit.jsonl") } else { log.clone() });
        let kept = kept.unwrap();
        let hosts: Vec<String> = kept
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["host"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(hosts, ["refused1.test", "refused2.test", "refused3.test"], "{mode}: {kept}");
        assert!(said.starts_with("rename EBUSY\n"), "{mode}: the log's directory cannot be moved: {said}");
        if moved {
            let planted = std::fs::symlink_metadata(&log).unwrap();
            if planted.file_type().is_file() {
                assert_eq!(planted.len(), 0, "{mode}: nothing at the planted path");
            }
        }
    }
}

// ---- kernel files ----------------------------------------------------------------------------------------------

#[test]
fn root_inside_cannot_write_interrupt_routing_or_the_hosts_kernel_log() {
    let Some(()) = sandbox() else { return };
    let uid = Command::new("id").arg("-u").output().unwrap();
    if text(&uid.stdout).trim() != "0" {
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the host's kernel files are root's; this test runs leash as root"
            );
        };
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
try:
    with open('/dev/kmsg', 'w') as f: f.write('{marker}\\n')
    print('/dev/kmsg written')
except OSError as e: print('/dev/kmsg', errno.errorcode[e.errno])"
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

// ---- keyrings, capabilities and kernel filesystems -------------------------------------------------------------

/// `setpriv` to `nobody`, then a copy of leash that `nobody` may run (the build directory may be closed to it); `None`
/// (said loudly) where `nobody` cannot make namespaces.
pub(crate) fn as_nobody() -> Option<(tempfile::TempDir, Vec<String>)> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let copy = dir.path().join("leash");
    // By `cp`: a write descriptor of this process, inherited by a concurrent fork, would fail the exec (ETXTBSY).
    assert!(Command::new("cp").arg(leash()).arg(&copy).status().unwrap().success());
    let prefix: Vec<String> = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        .into_iter()
        .map(String::from)
        .chain([copy.to_str().unwrap().to_owned()])
        .collect();
    let probe = Command::new("timeout").arg("60").args(&prefix).args(["run", "--", "true"]).output().unwrap();
    if probe.status.success() {
        Some((dir, prefix))
    } else {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "nobody: {}", text(&probe.stderr));
        eprintln!("SKIPPED: `nobody` cannot run leash here: {}", text(&probe.stderr));
        None
    }
}

pub(crate) fn is_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("SKIPPED: this part runs leash as root");
    }
    root
}

/// Outside, as the caller: a session keyring of its own (as `pam_keyinit` makes at login) and the user keyring, each
/// holding a secret. Inside, the command links each into its own keyring, reads the secret and adds a key. Then,
/// outside again: each secret as it was, and whether a key was planted.
const KEYRINGS: &str = r#"
import ctypes, subprocess, sys
leash = sys.argv[1:]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ADD_KEY, KEYCTL, JOIN, GET_ID, LINK, SEARCH, READ, INVALIDATE = 248, 250, 1, 0, 8, 10, 11, 21
session = libc.syscall(KEYCTL, JOIN, b"leash-door-test")
user = libc.syscall(KEYCTL, GET_ID, -4, 1)
rings = {"session": session, "user": user}
assert libc.syscall(KEYCTL, LINK, user, session) == 0, ctypes.get_errno()
secrets = {n: libc.syscall(ADD_KEY, b"user", f"secret-{n}".encode(), b"caller-secret", 13, r) for n, r in rings.items()}
assert min(list(rings.values()) + list(secrets.values())) >= 0, ctypes.get_errno()
inner = f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(64)
print("listed", "yes" if "secret-session" in open("/proc/keys").read() else "no")
for name, ring, key in {[(n, rings[n], secrets[n]) for n in rings]}:
    ret = libc.syscall({KEYCTL}, {LINK}, ring, -3)
    print(name, "link", "done" if ret >= 0 else ctypes.get_errno())
    n = libc.syscall({KEYCTL}, {READ}, key, buf, 64)
    print(name, "read", buf.raw[:n].decode() if n >= 0 else ctypes.get_errno())
    ret = libc.syscall({ADD_KEY}, b"user", b"planted", b"x", 1, ring)
    print(name, "add", "done" if ret >= 0 else ctypes.get_errno(), flush=True)
'''
out = subprocess.run(leash + ["run", "--", "/usr/bin/python3", "-c", inner], capture_output=True, text=True, timeout=60)
print(out.stdout, end="")
buf = ctypes.create_string_buffer(64)
for name, ring in rings.items():
    n = libc.syscall(KEYCTL, READ, secrets[name], buf, 64)
    print(name, "after", buf.raw[:n].decode() if n >= 0 else ctypes.get_errno())
    planted = libc.syscall(KEYCTL, SEARCH, ring, b"user", b"planted", 0)
    print(name, "planted", "yes" if planted >= 0 else "no")
    for key in (secrets[name], planted):
        if key >= 0:
            libc.syscall(KEYCTL, INVALIDATE, key)
"#;

#[test]
fn the_callers_keyrings_cannot_be_linked_read_or_written_from_inside() {
    let Some(()) = sandbox() else { return };
    let e = libc::EPERM;
    let want = |ring: &str| format!("{ring} link {e}\n{ring} read {e}\n{ring} add {e}\n");
    let after = "session after caller-secret\nsession planted no\nuser after caller-secret\nuser planted no\n";
    let want = format!("listed no\n{}{}{after}", want("session"), want("user"));
    if is_root() {
        assert_eq!(driver(KEYRINGS, &[]), want, "as root");
    }
    if let Some((_dir, nobody)) = as_nobody() {
        let out = Command::new("timeout")
            .args(["90"])
            .args(&nobody[..nobody.len() - 1])
            .args([PYTHON, "-c", KEYRINGS])
            .arg(&nobody[nobody.len() - 1])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(text(&out.stdout), want, "as nobody: {}", text(&out.stderr));
    }
}

/// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb` and `NoNewPrivs` of the command, as /proc/self/status says.
fn capabilities_inside(leash: &[String]) -> String {
    let show = "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status";
    let out = Command::new("timeout").arg("60").args(leash).args(["run", "--", "sh", "-c", show]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).replace('\t', " ")
}

#[test]
fn the_command_keeps_dockers_default_capabilities_without_net_raw_and_gains_none() {
    let Some(()) = sandbox() else { return };
    // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE SYS_CHROOT MKNOD AUDIT_WRITE
    // SETFCAP; no SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, ...
    let kept = "00000000a80405fb";
    let sets = |prm: &str| {
        format!(
            "CapInh: {z}\nCapPrm: {prm}\nCapEff: {prm}\nCapBnd: {kept}\nCapAmb: {z}\nNoNewPrivs: 1\n",
            z = "0".repeat(16)
        )
    };
    if is_root() {
        assert_eq!(capabilities_inside(&[leash()]), sets(kept), "as root");
    }
    if let Some((_dir, nobody)) = as_nobody() {
        assert_eq!(capabilities_inside(&nobody), sets(&"0".repeat(16)), "as nobody");
    }
}

/// Inside, as root: a cgroup namespace with a cgroup2 mount of its own, directly and from a user namespace of its
/// own, each making a cgroup named after `TAG`; prints each attempt's exit status.
const CGROUP_INSIDE: &str = r#"
d=$(mktemp -d)
unshare -m -C sh -c "mount -t cgroup2 none $d && mkdir $d/leash-door-$TAG-direct" 2>/dev/null
echo direct $?
unshare -U -r -m -C sh -c "mount -t cgroup2 none $d && mkdir $d/leash-door-$TAG-nested" 2>/dev/null
echo nested $?
rmdir "$d"
"#;

#[test]
fn a_cgroup_namespace_cannot_make_host_cgroups_that_outlive_the_run() {
    let Some(()) = sandbox() else { return };
    if !is_root() {
        return;
    }
    let tag = std::process::id().to_string();
    let out = Command::new("timeout")
        .args(["60", &leash(), "run", "--", "sh", "-c", CGROUP_INSIDE])
        .env("TAG", &tag)
        .output()
        .unwrap();
    // Outside: the host's cgroup2 hierarchy, mounted in a mount namespace of this test's, at this process's cgroup
    // (the root of the command's cgroup namespace); whatever was made there is reported and removed.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let cgroup = own.lines().find_map(|l| l.strip_prefix("0::")).expect("a cgroup2 line").to_owned();
    let look = format!(
        "d=$(mktemp -d) && mount -t cgroup2 none $d && for n in direct nested; do \
         c=\"$d{cgroup}/leash-door-{tag}-$n\"; [ -d \"$c\" ] && echo left $n && rmdir \"$c\"; done; umount $d; rmdir $d"
    );
    let left = Command::new("unshare").args(["-m", "sh", "-c", &look]).output().unwrap();
    assert_eq!(text(&left.stdout), "", "cgroups outlived the run; inside: {}", text(&out.stdout));
    let statuses = text(&out.stdout);
    assert!(statuses.starts_with("direct ") && !statuses.contains(" 0\n"), "{statuses}{}", text(&out.stderr));
}

/// Outside, as root, in a mount namespace of the test's: the host's mqueue filesystem, cgroup2 hierarchy, a bpf
/// filesystem holding a pinned map, and proc mounted at more places, and a queue holding one message; leash runs
/// there. Inside, the command opens the queue through the mount, makes a cgroup, opens the pinned map and the host's
/// `kernel.core_pattern` for writing. Afterwards, outside: whether the message is still there and the cgroup left.
const ELSEWHERE: &str = r#"
import ctypes, os, subprocess, sys, tempfile
leash, tag = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
queue = f"leash-door-{tag}"
q = libc.mq_open(f"/{queue}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
assert q >= 0 and libc.mq_send(q, b"host-message", 12, 0) == 0, ctypes.get_errno()
mq, cg, bpf, proc = (tempfile.mkdtemp() for _ in range(4))
BPF = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
path = ctypes.create_string_buffer(sys.argv[2].encode())
if sys.argv[1] == "pin":
    fd = libc.syscall(321, 0, (ctypes.c_uint32 * 32)(2, 4, 4, 1), 128)  # BPF_MAP_CREATE, an array
    assert fd >= 0 and libc.syscall(321, 6, (ctypes.c_uint64 * 16)(ctypes.addressof(path), fd), 128) == 0
else:
    fd = libc.syscall(321, 7, (ctypes.c_uint64 * 16)(ctypes.addressof(path), 0), 128)  # BPF_OBJ_GET
    print("bpf", "opened" if fd >= 0 else ctypes.get_errno(), flush=True)
"""
inner = f"""
import os, subprocess
def attempt(name, what):
    try:
        print(name, what(), flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
attempt("queue", lambda: os.read(os.open("{mq}/{queue}", os.O_RDONLY), 200).decode().split()[0])
attempt("cgroup", lambda: os.mkdir("{cg}/leash-door-{tag}") or "made")
subprocess.run(["/usr/bin/python3", "-c", {BPF!r}, "get", "{bpf}/map"])
attempt("proc", lambda: os.close(os.open("{proc}/sys/kernel/core_pattern", os.O_WRONLY)) or "writable")
"""
script = (f"mount -t mqueue none {mq} && mount -t cgroup2 none {cg} && mount -t bpf bpf {bpf} && "
          f"mount -t proc proc {proc} && /usr/bin/python3 -c \"$BPF\" pin {bpf}/map && "
          f"{leash} run -- /usr/bin/python3 -c \"$INNER\"; "
          f"[ -d {cg}/leash-door-{tag} ] && echo cgroup left && rmdir {cg}/leash-door-{tag}; true")
env = dict(os.environ, BPF=BPF, INNER=inner)
out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)
print(out.stdout, end="")
print(out.stderr, end="", file=sys.stderr)
attr = (ctypes.c_long * 8)()
libc.mq_getattr(q, attr)
print("messages", attr[3])
libc.mq_unlink(f"/{queue}".encode())
for d in (mq, cg, bpf, proc):
    os.rmdir(d)
"#;

#[test]
fn host_kernel_objects_mounted_elsewhere_stay_out_of_reach() {
    let Some(()) = sandbox() else { return };
    if !is_root() {
        return;
    }
    let out = driver(ELSEWHERE, &[&std::process::id().to_string()]);
    let (noent, rofs, perm) = (libc::ENOENT, libc::EROFS, libc::EPERM);
    assert_eq!(out, format!("queue {noent}\ncgroup {rofs}\nbpf {perm}\nproc {noent}\nmessages 1\n"));
}
