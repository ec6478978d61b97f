//! A test host: two network namespaces joined by a veth pair, made and removed by each test. "outside" stands in
//! for leash's host (198.18.0.1, fd00:1ea5::1) and reaches "host" (198.18.0.2, fd00:1ea5::2), where small Python
//! servers print each connection or datagram they see. A sandbox spawned from a thread that entered "outside"
//! shows what the sandbox takes away. No packet goes anywhere but these namespaces.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{skip, Run, Running};

/// The test host's addresses, and the outside end's.
pub const HOST_V4: &str = "198.18.0.2";
pub const OUTSIDE_V4: &str = "198.18.0.1";
pub const HOST_V6: &str = "fd00:1ea5::2";
const OUTSIDE_V6: &str = "fd00:1ea5::1";

/// A TCP server on every address of the test host: prints `ready`, then `conn ADDR` per connection.
const TCP_SERVER: &str = "import socket,sys
s=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(('::', int(sys.argv[1]))); s.listen(); print('ready', flush=True)
while True:
    c, a = s.accept(); print('conn', a[0].removeprefix('::ffff:'), flush=True); c.close()";

/// A UDP server on the test host: prints `ready`, then `got DATA FROM` per datagram.
const UDP_SERVER: &str = "import socket,sys
s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[2], int(sys.argv[1]))); print('ready', flush=True)
while True:
    d, a = s.recvfrom(4096); print('got', d[:40].decode(errors='replace'), a[0], flush=True)";

pub struct TestHost {
    pub outside: String,
    pub host: String,
    servers: Vec<Child>,
}

/// A server's event lines.
pub struct Events(BufReader<ChildStdout>);

impl Events {
    pub fn next(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }
}

impl TestHost {
    /// Both namespaces and the link, or a loud skip where `ip netns` is refused.
    pub fn new() -> Option<TestHost> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let host = TestHost { outside: format!("lsbx-out-{n}"), host: format!("lsbx-host-{n}"), servers: Vec::new() };
        match host.build() {
            Ok(()) => Some(host),
            Err(why) => skip(&why),
        }
    }

    fn build(&self) -> Result<(), String> {
        let (a, b) = (&self.outside, &self.host);
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&["link", "add", "lsbx-a", "netns", a, "type", "veth", "peer", "name", "lsbx-b", "netns", b])?;
        for (ns, dev, v4, v6) in [(a, "lsbx-a", OUTSIDE_V4, OUTSIDE_V6), (b, "lsbx-b", HOST_V4, HOST_V6)] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev])?;
            ip(&["-n", ns, "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// A command run inside the "outside" or "host" namespace.
    pub fn exec(&self, ns: &str, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program]).args(args);
        cmd
    }

    fn serve(&mut self, code: &str, args: &[&str]) -> Events {
        let mut all = vec!["-c", code];
        all.extend_from_slice(args);
        let mut child = self.exec(&self.host, "/usr/bin/python3", &all).stdout(Stdio::piped()).spawn().unwrap();
        let mut events = Events(BufReader::new(child.stdout.take().unwrap()));
        self.servers.push(child);
        assert_eq!(events.next(), "ready");
        events
    }

    /// A TCP server on the test host at `port`, IPv4 and IPv6.
    pub fn tcp_server(&mut self, port: u16) -> Events {
        self.serve(TCP_SERVER, &[&port.to_string()])
    }

    /// A UDP server on the test host at `HOST_V4:port`.
    pub fn udp_server(&mut self, port: u16) -> Events {
        self.serve(UDP_SERVER, &[&port.to_string(), HOST_V4])
    }

    /// Runs `code` with python3 in the "outside" namespace and expects success (the sanity checks).
    #[allow(
        clippy::wrong_self_convention,
        reason = "reads as `host.from_outside(...)`: run code from outside the sandbox"
    )]
    pub fn from_outside(&self, code: &str) {
        let status = self.exec(&self.outside, "/usr/bin/python3", &["-c", code]).status().unwrap();
        assert!(status.success(), "the test host is not reachable from outside: {code}");
    }

    /// Starts `run` with this thread in the "outside" namespace, as leash would run there.
    pub fn spawn_from_outside(&self, run: Run) -> Option<Running> {
        // On this thread, back in its own namespace after: the sandbox ends with the thread that started it.
        let own = File::open("/proc/thread-self/ns/net").unwrap();
        let ns = File::open(format!("/run/netns/{}", self.outside)).unwrap();
        // SAFETY: setns on this thread only, with namespace fds we just opened.
        assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        let running = run.start();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns back");
        running
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = ip(&["netns", "del", &self.outside]);
        let _ = ip(&["netns", "del", &self.host]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}
