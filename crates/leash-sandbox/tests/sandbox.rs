//! The sandbox with real processes and real sockets: what the command inside can and cannot reach, the sockets it
//! hands out, process life (exit status, signals, orphans, descriptors) and failing closed. Network tests build a
//! test host in namespaces of their own (`support::host`); nothing is sent anywhere else. Where the kernel refuses
//! namespaces the tests skip loudly, and fail instead under `LEASH_REQUIRE_SANDBOX=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leash_sandbox::{harden_self, ExitStatus, Sandbox, SandboxError, SandboxSpec, Step};
use support::host::{TestHost, HOST_V4, HOST_V6, OUTSIDE_V4};
use support::{python, sh};

// ---- the network: nothing but loopback ----

#[test]
fn direct_tcp_to_a_test_host_is_unreachable() {
    let Some(mut host) = TestHost::new() else { return };
    let mut events = host.tcp_server(8080);
    let Some(run) = host.spawn_from_outside(sh(&format!("exec 3<>/dev/tcp/{HOST_V4}/8080"))) else { return };
    let out = run.finish();
    assert_ne!(out.status, ExitStatus::Exited(0));
    assert!(out.stderr.contains("Network is unreachable"), "stderr: {}", out.stderr);
    // The test host is reachable from where leash runs, and saw no connection before this one.
    host.from_outside(&format!("import socket; socket.create_connection(('{HOST_V4}', 8080), timeout=5)"));
    assert_eq!(events.next(), format!("conn {OUTSIDE_V4}"));
}

#[test]
fn ipv6_connect_fails_even_to_loopback() {
    let Some(mut host) = TestHost::new() else { return };
    let mut events = host.tcp_server(8080);
    let code = format!(
        "import socket\nfor f in ['all', 'default', 'lo']:\n    print(f, open(f'/proc/sys/net/ipv6/conf/{{f}}/disable_ipv6').read().strip())\nfor addr in ['{HOST_V6}', '::1']:\n    try:\n        socket.create_connection((addr, 8080), timeout=5)\n        print('connected', addr)\n    except OSError as e:\n        print('refused', addr, e.errno)\ntry:\n    socket.socket(socket.AF_INET6).bind(('::1', 0))\n    print('bound ::1')\nexcept OSError as e:\n    print('no ::1', e.errno)"
    );
    let Some(run) = host.spawn_from_outside(python(&code)) else { return };
    let out = run.finish();
    assert!(out.stdout.starts_with("all 1\ndefault 1\nlo 1\n"), "IPv6 switched off everywhere: {}", out.stdout);
    assert!(!out.stdout.contains("connected"), "stdout: {}", out.stdout);
    assert_eq!(out.stdout.matches("refused").count(), 2, "stdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(out.stdout.ends_with(&format!("no ::1 {}\n", libc::EADDRNOTAVAIL)), "IPv6 is disabled: {}", out.stdout);
    host.from_outside(&format!("import socket; socket.create_connection(('{HOST_V6}', 8080), timeout=5)"));
    assert!(events.next().starts_with("conn fd00:1ea5::1"));
}

#[test]
fn the_command_cannot_turn_ipv6_back_on_or_any_other_kernel_knob() {
    // The command's uid owns the sandbox's network namespace (and is the host's root when leash runs as root):
    // without read-only mounts it could write these. Opening for writing is enough to tell, and writes nothing.
    let code = "import errno, os
try:
    with open('/proc/sys/net/ipv6/conf/all/disable_ipv6', 'w') as f: f.write('0')
    print('ipv6 switch written')
except OSError as e: print('ipv6 switch', errno.errorcode[e.errno])
print('disable_ipv6', open('/proc/sys/net/ipv6/conf/all/disable_ipv6').read().strip())
for p in ['/proc/sys/kernel/printk_ratelimit', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger',
          '/sys/kernel/mm/transparent_hugepage/enabled', '/sys/power/state', '/sys/fs/cgroup/cgroup.procs']:
    if not os.path.exists(p): continue
    try: os.close(os.open(p, os.O_WRONLY)); print(p, 'writable')
    except OSError as e: print(p, errno.errorcode[e.errno])";
    let Some(stdout) = python(code).success() else { return };
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("ipv6 switch EROFS"));
    assert_eq!(lines.next(), Some("disable_ipv6 1"));
    let rest: Vec<&str> = lines.collect();
    assert!(rest.len() >= 2, "the sysctls at least: {stdout}");
    for line in rest {
        assert!(line.ends_with(" EROFS"), "read-only, whatever the uid: {line}");
    }
}

#[test]
fn udp_to_a_resolver_on_a_test_host_never_arrives() {
    let Some(mut host) = TestHost::new() else { return };
    let mut events = host.udp_server(53);
    let script = format!(
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.sendto(b'from-sandbox', ('{HOST_V4}', 53))
except OSError as e: print('send failed', e.errno)\"
getent hosts leash-test.example; echo getent=$?"
    );
    let run = sh(&script).resolv_conf(&format!("nameserver {HOST_V4}\noptions timeout:1 attempts:1\n"));
    let Some(run) = host.spawn_from_outside(run) else { return };
    let out = run.finish();
    assert!(out.stdout.contains(&format!("send failed {}", libc::ENETUNREACH)), "stdout: {}", out.stdout);
    assert!(out.stdout.contains("getent=2"), "stdout: {}", out.stdout);
    // The first datagram the test host ever sees is this sanity one.
    host.from_outside(&format!(
        "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'sanity', ('{HOST_V4}', 53))"
    ));
    assert_eq!(events.next(), format!("got sanity {OUTSIDE_V4}"));
}

#[test]
fn raw_sockets_are_refused_and_no_private_netns_can_be_made() {
    let Some(host) = TestHost::new() else { return };
    let raw = format!(
        "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n    print('opened')\n    s.sendto(b'\\x08\\0\\0\\0\\0\\0\\0\\0', ('{HOST_V4}', 0))\n    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)"
    );
    // In the sandbox's own network namespace: no CAP_NET_RAW there. A network namespace of its own, where it would
    // hold the capability, the command cannot make: not directly (no CAP_SYS_ADMIN), nor in a user namespace of its
    // own (none beyond the command's).
    let script = "python3 -c \"$RAW\"; unshare -n true || echo no netns; unshare -rn python3 -c \"$RAW\" || \
                  echo no userns; ip link add lsbx-dummy type dummy"
        .to_string();
    let Some(run) = host.spawn_from_outside(sh(&script).env("RAW", &raw)) else { return };
    let out = run.finish();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, [format!("refused {}", libc::EPERM), "no netns".into(), "no userns".into()]);
    assert!(out.stderr.contains("No space left on device"), "the user namespace limit: {}", out.stderr);
    assert!(out.stderr.contains("Operation not permitted"), "no CAP_NET_ADMIN either: {}", out.stderr);
}

#[test]
fn the_handed_out_listener_serves_the_sandbox() {
    let Some(mut run) = sh("curl -s http://127.0.0.1:3128/hello; echo; exec 3<>/dev/tcp/127.0.0.1/3128; cat <&3")
        .tcp("127.0.0.1:3128")
        .start()
    else {
        return;
    };
    let listener: TcpListener = run.sandbox.tcp.remove(0);
    assert_eq!(listener.local_addr().unwrap().to_string(), "127.0.0.1:3128");
    let (mut conn, _) = listener.accept().unwrap();
    let mut head = [0u8; 16];
    conn.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"GET /hello HTTP/");
    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nproxy").unwrap();
    drop(conn);
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"second\n").unwrap();
    drop(conn);
    let out = run.finish();
    assert_eq!(out.stdout, "proxy\nsecond\n", "stderr: {}", out.stderr);
}

/// `bind_in_netns` on a namespace leash did not create (a sandbox's, standing in for a container's): the listener
/// lands inside it, where the command reaches it once bound, and nowhere else.
#[test]
fn bind_in_netns_binds_inside_another_process_namespace() {
    let script = "for i in $(seq 200); do exec 3<>/dev/tcp/127.0.0.1/4000 && { cat <&3; exit 0; }; sleep 0.05; done \
                  2>/dev/null; exit 1";
    let Some(run) = sh(script).start() else {
        return;
    };
    let mut sockets = match leash_sandbox::bind_in_netns(run.sandbox.pid(), &["127.0.0.1:4000".parse().unwrap()], &[]) {
        Ok(s) => s,
        Err(SandboxError::Setup { step: Step::EnterNetns(_), source }) if !is_root() => {
            let _ = run.sandbox.signal(libc::SIGKILL);
            {
                // Written past the test harness's capture: a skip must show where the results are read.
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "SKIPPED: entering another namespace needs root ({source})");
            }
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let listener = sockets.tcp.remove(0);
    assert!(TcpListener::bind("127.0.0.1:4000").is_ok(), "the port is free in leash's own namespace");
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"served from outside\n").unwrap();
    drop(conn);
    let out = run.finish();
    assert_eq!(out.stdout, "served from outside\n", "stderr: {}", out.stderr);
}

/// A namespace with any interface but `lo` is refused, and the error names the interface.
#[test]
fn bind_in_netns_refuses_a_namespace_with_another_interface() {
    let Some(host) = TestHost::new() else {
        return;
    };
    let mut sleeper = host.exec(&host.outside, "sleep", &["30"]).spawn().unwrap();
    // `ip netns exec` execs sleep once it has entered the namespace: wait until the pid's namespace is not ours.
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{}/ns/net", sleeper.id())).is_ok_and(|ns| ns == ours) {
        assert!(Instant::now() < deadline, "ip netns exec did not enter the namespace");
        std::thread::sleep(Duration::from_millis(10));
    }
    let result = leash_sandbox::bind_in_netns(sleeper.id(), &["127.0.0.1:4001".parse().unwrap()], &[]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    match result {
        Err(SandboxError::NotIsolated { why, .. }) => assert!(why.contains("lsbx-a"), "{why}"),
        other => panic!("expected NotIsolated, got {other:?}"),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn resolv_conf_names_the_stub_and_queries_reach_the_handed_out_udp_socket() {
    let script = "cat /etc/resolv.conf; umount /etc/resolv.conf 2>/dev/null && echo unmounted; \
                  getent hosts allowed.example; echo getent=$?";
    let Some(mut run) =
        sh(script).udp("127.0.0.1:53").resolv_conf("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n").start()
    else {
        return;
    };
    let stub: UdpSocket = run.sandbox.udp.remove(0);
    let names = answer_nxdomain(&stub, 2);
    let out = run.finish();
    assert!(out.stdout.starts_with("nameserver 127.0.0.1\n"), "stdout: {}", out.stdout);
    assert!(!out.stdout.contains("unmounted"), "the command could unmount resolv.conf");
    assert!(out.stdout.contains("getent=2"), "stdout: {}", out.stdout);
    assert!(names.iter().all(|n| n.contains("allowed")) && !names.is_empty(), "queries: {names:?}");
}

/// A stub that answers `count` queries with NXDOMAIN (header flags QR|RD|RA, rcode 3) and returns what it saw.
fn answer_nxdomain(stub: &UdpSocket, count: usize) -> Vec<String> {
    stub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while seen.len() < count {
        let Ok((n, from)) = stub.recv_from(&mut buf) else { break };
        let mut reply = buf[..n].to_vec();
        reply[2] = 0x81;
        reply[3] = 0x83;
        stub.send_to(&reply, from).unwrap();
        seen.push(String::from_utf8_lossy(&buf[12..n]).into_owned());
    }
    seen
}

#[test]
fn the_mounts_stay_and_no_mount_namespace_of_the_commands_own_can_be_made() {
    let dir = tempfile::Builder::new().prefix("leash-unmount").tempdir_in("/tmp").unwrap();
    let path = dir.path().join("relay.sock");
    let _relay = UnixListener::bind(&path).unwrap();
    let undo = format!(
        "for p in /etc/resolv.conf /proc {sock}; do umount $p 2>/dev/null && echo unmounted $p; \
         umount -l $p 2>/dev/null && echo detached $p; done",
        sock = path.display()
    );
    let connect =
        format!("import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('connected')", path.display());
    // In the sandbox's mount namespace; then a mount namespace of the command's own, directly or in a user namespace
    // it makes (where it would hold every capability), which it cannot make; then what is still in place.
    let script = format!(
        "{undo}; for how in -m -Urm; do unshare $how bash -c \"echo own namespace; {undo}\" 2>/dev/null || \
         echo no namespace; done; head -1 /etc/resolv.conf; python3 -c \"{connect}\" 2>/dev/null || echo refused"
    );
    let Some(out) = sh(&script).resolv_conf("nameserver 127.0.0.1\n").output() else { return };
    let want = "no namespace\nno namespace\nnameserver 127.0.0.1\nrefused\n";
    assert_eq!(out.stdout, want, "stderr: {}", out.stderr);
}

// ---- host Unix sockets ----

#[test]
fn a_unix_socket_relay_on_the_host_is_refused_unless_allowed() {
    let dir = tempfile::Builder::new().prefix("leash-relay").tempdir_in("/tmp").unwrap();
    let path = dir.path().join("relay.sock");
    let relay = UnixListener::bind(&path).unwrap();
    let connect =
        format!("import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('connected')", path.display());
    let Some(out) = python(&connect).output() else { return };
    assert_ne!(out.status, ExitStatus::Exited(0));
    assert!(out.stderr.contains("ConnectionRefusedError"), "stderr: {}", out.stderr);
    assert_eq!(python(&connect).allow_unix(&path).success().unwrap(), "connected\n");
    relay.set_nonblocking(true).unwrap();
    assert!(relay.accept().is_ok(), "the allowed connection reached the relay");
}

#[test]
fn a_unix_socket_of_another_network_namespace_is_refused() {
    let Some(host) = TestHost::new() else { return };
    let dir = tempfile::Builder::new().prefix("leash-walk").tempdir_in("/tmp").unwrap();
    // Two levels below /tmp, as deep as the walk goes there.
    let path = dir.path().join("daemon.sock");
    // Bound in the test host's netns, so absent from leash's /proc/net/unix: the old walk of /tmp had to find it.
    let bind = format!("import socket; s=socket.socket(socket.AF_UNIX); s.bind('{}'); s.listen(); print('ready', flush=True); s.accept()", path.display());
    let mut daemon =
        Reaped(host.exec(&host.host, "/usr/bin/python3", &["-c", &bind]).stdout(Stdio::piped()).spawn().unwrap());
    let mut ready = [0u8; 6];
    daemon.0.stdout.take().unwrap().read_exact(&mut ready).unwrap();
    let connect = format!("import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')", path.display());
    let out = python(&connect).output();
    let Some(out) = out else { return };
    assert!(out.stderr.contains("ConnectionRefusedError"), "stderr: {}", out.stderr);
}

/// A child process killed and reaped however the test ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---- process life ----

#[test]
fn exit_status_propagates() {
    let Some(out) = sh("exit 7").output() else { return };
    assert_eq!(out.status, ExitStatus::Exited(7));
    assert_eq!(out.status.code(), 7);
}

#[test]
fn death_by_sigkill_maps_to_137() {
    let Some(out) = sh("kill -KILL $$").output() else { return };
    assert_eq!(out.status, ExitStatus::Signaled(libc::SIGKILL));
    assert_eq!(out.status.code(), 137);
}

#[test]
fn a_child_left_running_is_gone_when_the_command_exits() {
    let mark = format!("leash-orphan-{}", std::process::id());
    assert_nothing_named_outlives_wait(&format!("{}; echo started", orphan(&mark)), &mark);
}

#[test]
fn a_process_that_keeps_forking_is_gone_when_the_command_exits() {
    // A background loop forking marked sleepers as fast as it can: init must catch every one, also those forked
    // while the others were being killed, before it reports the command's end.
    let mark = format!("leash-forker-{}", std::process::id());
    let script = format!(
        "bash -c 'while :; do (exec -a {mark} sleep 1000) & done' {mark} & \
         until pgrep -f -c {mark} | grep -qv '^[01]$'; do sleep 0.01; done; echo started"
    );
    assert_nothing_named_outlives_wait(&script, &mark);
}

/// Runs `script`, which says `started` once its processes named `mark` run, then exits 0; no host process is named
/// `mark` as `wait` returns (checked before the sandbox is dropped or its output read to the end).
fn assert_nothing_named_outlives_wait(script: &str, mark: &str) {
    let Some(mut run) = sh(script).start() else { return };
    assert_eq!(run.line(), "started");
    assert_eq!(run.sandbox.wait().unwrap(), ExitStatus::Exited(0));
    assert!(!processes_named(mark), "a process of the sandbox outlived it");
}

#[test]
fn the_exit_descriptor_turns_readable_when_the_sandbox_ends_and_drop_reaps_the_init() {
    let script = "trap 'exit 4' USR1; echo ready; while :; do sleep 0.05; done";
    let Some(mut run) = sh(script).start() else { return };
    assert_eq!(run.line(), "ready");
    let poll = |timeout_ms: i32| {
        let mut fds = [libc::pollfd { fd: run.sandbox.exit_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: `fds` is valid for its length.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) }
    };
    assert_eq!(poll(0), 0, "readable while the command runs");
    run.sandbox.signal(libc::SIGUSR1).unwrap();
    assert_eq!(poll(30_000), 1, "not readable after the command's end");
    let init = run.sandbox.pid() as libc::pid_t;
    let out = run.finish();
    assert_eq!(out.status, ExitStatus::Exited(4));
    // SAFETY: a status out-pointer is valid; WNOHANG never blocks.
    let found = unsafe { libc::waitpid(init, &mut 0, libc::WNOHANG) };
    assert_eq!((found, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::ECHILD)), "init not reaped");
}

#[test]
fn detach_leaves_an_ended_init_to_the_kernel_without_waiting() {
    let Some(run) = sh("exit 0").start() else { return };
    let init = run.sandbox.pid() as libc::pid_t;
    assert_eq!(run.sandbox.wait().unwrap(), ExitStatus::Exited(0));
    run.sandbox.detach();
    // Still this process's child, exiting or a zombie: reaped here, as the kernel's reaper would once leash exits.
    let mut status = 0;
    // SAFETY: a status out-pointer is valid.
    assert_eq!(unsafe { libc::waitpid(init, &mut status, 0) }, init);
    assert!(libc::WIFEXITED(status), "init ended on its own: {status:#x}");
}

/// Runs in a child process of `the_sandbox_ends_when_leash_dies`, standing in for leash: starts a sandbox whose
/// command leaves a marked orphan, says `started`, and waits to be killed.
#[test]
#[ignore = "a helper process, run by the_sandbox_ends_when_leash_dies"]
fn helper_leash_that_gets_killed() {
    let Some(mark) = std::env::var_os("LEASH_TEST_MARK") else { return };
    let mark = mark.to_string_lossy().into_owned();
    let script = format!("{}; echo started; wait", orphan(&mark));
    let Some(sandbox) = support::spawn_or_skip(sh(&script).spec) else { return };
    let _ = sandbox.wait();
}

#[test]
fn the_sandbox_ends_when_leash_dies() {
    let mark = format!("leash-orphan-of-killed-{}", std::process::id());
    let exe = std::env::current_exe().unwrap();
    let args = ["--exact", "helper_leash_that_gets_killed", "--ignored", "--test-threads=1"];
    let mut leash =
        Reaped(Command::new(exe).args(args).env("LEASH_TEST_MARK", &mark).stdout(Stdio::piped()).spawn().unwrap());
    // libtest prints `test helper_leash_that_gets_killed ... ` before the command says `started`.
    let stdout = BufReader::new(leash.0.stdout.take().unwrap());
    if !stdout.lines().any(|line| line.is_ok_and(|l| l.ends_with("started"))) {
        support::skip::<()>(&"the helper could not start a sandbox");
        return;
    }
    leash.0.kill().unwrap();
    let deadline = Instant::now() + support::DEADLINE;
    while processes_named(&mark) {
        assert!(Instant::now() < deadline, "the sandbox outlived leash");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_sandbox_ends_with_the_thread_that_prepared_it() {
    // The documented contract of `Sandbox::prepare`: init's death signal follows the thread that cloned it, so a
    // sandbox whose thread is gone is ended even if nobody drops it (here: leaked on purpose).
    let mark = format!("leash-orphan-of-thread-{}", std::process::id());
    let script = format!("{}; echo started; wait", orphan(&mark));
    let started = std::thread::spawn(move || {
        let mut running = sh(&script).start()?;
        let line = running.line();
        std::mem::forget(running);
        Some(line)
    });
    let Some(line) = started.join().unwrap() else { return };
    assert_eq!(line, "started");
    let deadline = Instant::now() + support::DEADLINE;
    while processes_named(&mark) {
        assert!(Instant::now() < deadline, "the sandbox outlived the thread that prepared it");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell snippet that starts `sleep 1000` named `mark` in the background and returns once it runs.
fn orphan(mark: &str) -> String {
    format!("(exec -a {mark} sleep 1000) & until grep -q {mark} /proc/$!/cmdline 2>/dev/null; do sleep 0.01; done")
}

/// Whether any host process has `mark` in its command line.
fn processes_named(mark: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(mark))
    })
}

#[test]
fn inherited_descriptors_are_closed() {
    let file = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: F_DUPFD without CLOEXEC on a descriptor we own; the duplicate is closed below.
    let leaked = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&file), libc::F_DUPFD, 50) };
    assert!(leaked >= 50);
    let out = sh("ls /proc/self/fd | tr '\\n' ' '").success();
    // SAFETY: closing the duplicate made above.
    unsafe { libc::close(leaked) };
    let Some(out) = out else { return };
    assert_eq!(out, "0 1 2 3 ", "only stdio and ls's own directory");
}

#[test]
fn signals_are_forwarded_to_the_command() {
    let script = "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
    let Some(mut run) = sh(script).start() else { return };
    assert_eq!(run.line(), "ready");
    run.sandbox.signal(libc::SIGTERM).unwrap();
    let out = run.finish();
    assert_eq!((out.status, out.stdout.as_str()), (ExitStatus::Exited(3), "got TERM\n"));
}

#[test]
fn a_sigterm_sent_to_leash_reaches_the_command() {
    let script = "trap 'echo got TERM; exit 4' TERM; echo ready; while :; do sleep 0.05; done";
    let Some(mut run) = sh(script).start() else { return };
    assert_eq!(run.line(), "ready");
    let forwarding = run.sandbox.forward_signals().unwrap();
    // SAFETY: signalling this very process, whose SIGTERM handler is the forwarder just armed.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGTERM) }, 0);
    let out = run.finish();
    drop(forwarding);
    assert_eq!((out.status, out.stdout.as_str()), (ExitStatus::Exited(4), "got TERM\n"));
}

#[test]
fn proc_shows_only_the_sandbox_and_the_command_cannot_read_leash() {
    let code = "import ctypes, os
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
for f in ['/proc/1/mem', '/proc/1/environ']:
    try: open(f, 'rb').read(1); print('read', f)
    except OSError as e: print('denied', f)
libc = ctypes.CDLL(None, use_errno=True)
print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())";
    let Some(stdout) = python(code).success() else { return };
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("[1, 2]"), "init and the command only");
    assert_eq!(lines.next(), Some("denied /proc/1/mem"));
    assert_eq!(lines.next(), Some("denied /proc/1/environ"));
    assert_eq!(lines.next(), Some(format!("ptrace -1 {}", libc::EPERM).as_str()));
}

#[test]
fn the_command_and_init_run_on_exactly_the_cpus_leash_had() {
    // Init is moved off leash's CPU while both build the sandbox, and must take leash's affinity back before the
    // command starts. Checked with this thread's whole affinity, then pinned to one CPU (nothing to move to).
    let all = thread_affinity();
    let last = *all.last().unwrap();
    for cpus in [all.clone(), vec![last]] {
        set_thread_affinity(&cpus);
        let code = "import os; print(sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(1)))";
        let Some(stdout) = python(code).success() else { return };
        assert_eq!(stdout.trim(), format!("{cpus:?} {cpus:?}"), "the command's CPUs, then init's");
    }
    set_thread_affinity(&all);
}

fn thread_affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most the size passed into `set`.
    let ret = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(ret, 0);
    // SAFETY: CPU_ISSET reads one bit below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
}

fn set_thread_affinity(cpus: &[usize]) {
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes one bit below CPU_SETSIZE (the CPUs come from `thread_affinity`).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the kernel reads at most the size passed of `set`.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(ret, 0);
}

#[test]
fn harden_self_makes_leash_non_dumpable() {
    harden_self().unwrap();
    // SAFETY: PR_GET_DUMPABLE takes no pointers.
    assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE) }, 0);
}

#[test]
fn a_sandbox_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Sandbox>();
}

#[test]
fn the_environment_is_exactly_the_specs() {
    let mut run = sh("env | sort");
    run.spec.env = vec![("PATH".into(), support::PATH.into()), ("ONLY".into(), "this".into())];
    let Some(stdout) = run.success() else { return };
    // bash itself adds PWD, SHLVL and `_`.
    let given: Vec<&str> =
        stdout.lines().filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_=")).collect();
    assert_eq!(given, ["ONLY=this".to_string(), format!("PATH={}", support::PATH)]);
}

#[test]
fn sandboxes_start_from_many_threads_at_once() {
    let threads: Vec<_> = (0..4).map(|i| std::thread::spawn(move || sh(&format!("exit {i}")).output())).collect();
    for (i, thread) in threads.into_iter().enumerate() {
        let Some(out) = thread.join().unwrap() else { return };
        assert_eq!(out.status, ExitStatus::Exited(i as i32));
    }
}

/// Runs as `nobody` in a child process of `an_ordinary_user_gets_the_same_sandbox`.
#[test]
#[ignore = "a helper process, run by an_ordinary_user_gets_the_same_sandbox"]
fn helper_unprivileged_leash() {
    if std::env::var_os("LEASH_TEST_UNPRIVILEGED").is_none() {
        return;
    }
    // As `leash run` does: a non-dumpable parent is what made the id maps fail without root.
    harden_self().unwrap();
    let script = "echo uid=$(id -u); grep CapEff /proc/self/status; cat /proc/sys/net/ipv6/conf/all/disable_ipv6; \
                  cat /etc/resolv.conf; n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo $n; while :; do sleep 0.05; done";
    let Some(mut run) = sh(script).resolv_conf("nameserver 127.0.0.1\n").start() else { return };
    for _ in 0..5 {
        println!("{}", run.line());
    }
    // init, a copy of leash's memory, is dumpable only while it (and the command, which shares that memory until
    // `execve`) writes its id maps: a process of the same user outside, this one, cannot read it.
    let init = std::fs::read(format!("/proc/{}/environ", run.sandbox.pid()));
    println!("init {}", if init.is_ok() { "readable" } else { "private" });
    run.sandbox.signal(libc::SIGKILL).unwrap();
    run.finish();
}

#[test]
fn an_ordinary_user_gets_the_same_sandbox() {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return; // every other test already runs without root here
    }
    // A copy anyone may run: the build directory may sit below a private home.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("sandbox-tests");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"];
    let helper = ["--exact", "helper_unprivileged_leash", "--ignored", "--nocapture", "--test-threads=1"];
    let out = Command::new("setpriv").args(args).arg(&exe).args(helper).env("LEASH_TEST_UNPRIVILEGED", "1").output();
    let Ok(out) = out else {
        support::skip::<()>(&"setpriv (util-linux) is missing");
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.contains("uid=") {
        let stderr = String::from_utf8_lossy(&out.stderr);
        support::skip::<()>(&format!("an unprivileged sandbox did not start: {stderr}"));
        return;
    }
    let expected = ["uid=65534\n", "CapEff:\t0000000000000000\n", "\n1\nnameserver 127.0.0.1\n2\n", "init private\n"];
    for expected in expected {
        assert!(stdout.contains(expected), "{expected:?} missing from: {stdout}");
    }
}

// ---- failing closed ----

#[test]
fn a_failed_step_is_named_and_the_command_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut run = sh(&format!("touch {}", marker.display())).tcp("127.0.0.1:3128").tcp("127.0.0.1:3128");
    run.spec.stdout = None;
    let err = Sandbox::spawn(run.spec).unwrap_err();
    if err.is_unavailable() {
        support::skip::<()>(&err);
        return;
    }
    assert!(matches!(&err, SandboxError::Setup { step: Step::BindTcp(a), .. } if a.port() == 3128), "{err}");
    assert!(err.to_string().starts_with("cannot bind TCP `127.0.0.1:3128` inside the sandbox: "), "{err}");
    let mut spec = sh(&format!("touch {}", marker.display())).spec;
    spec.cwd = Some(dir.path().join("missing"));
    assert!(matches!(Sandbox::spawn(spec), Err(SandboxError::Setup { step: Step::ChangeDir(_), .. })));
    assert!(!marker.exists(), "the command ran although set-up failed");
}

#[test]
fn a_socket_as_the_commands_stdio_is_refused_before_any_namespace() {
    let (socket, _peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let mut spec = SandboxSpec::new("/bin/true");
    spec.stderr = Some(socket.into());
    let err = Sandbox::spawn(spec).unwrap_err();
    assert!(matches!(&err, SandboxError::InvalidSpec(why) if why.contains("stderr would be a socket")), "{err}");
}

#[test]
fn a_missing_program_is_refused_before_any_namespace() {
    let err = Sandbox::spawn(SandboxSpec::new("leash-no-such-program")).unwrap_err();
    assert!(matches!(err, SandboxError::ProgramNotFound { .. }), "{err}");
    assert!(err.to_string().starts_with("cannot run `leash-no-such-program`: not found on the command's PATH"));
}

#[test]
fn start_up_takes_milliseconds() {
    let started = Instant::now();
    let Some(out) = (support::Run { spec: SandboxSpec::new("/bin/true") }).output() else { return };
    assert_eq!(out.status, ExitStatus::Exited(0));
    // Generous: the figure is a few milliseconds (see the benchmark); this only catches a gross regression.
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}
