//! The command's seccomp filter: the system calls that reach the host by a way other than the network namespace.
//! Built in the parent as a classic BPF program; the command installs it (with a user-notification listener) just
//! before `execve`, and init answers the notifications (`connects`).
//!
//! What it decides, on the native architecture only (a foreign one, i386's `int 0x80` or x32, gets `ENOSYS` for
//! every call, so none of the rules below can be dodged through another system-call table):
//! - `socket` and `socketpair`: only `AF_UNIX` (stream and seqpacket), `AF_INET`, `AF_INET6` and `AF_NETLINK`.
//!   Every other family gets `EAFNOSUPPORT`: `AF_VSOCK` reaches the hypervisor whatever the network namespace, and
//!   a family leash does not know may do the same. Unix datagram sockets get `EPERM`: a datagram can be sent to any
//!   path with `sendto`/`sendmsg`, whose address a filter cannot read, and to a host socket (`/dev/log`, journald).
//! - `connect`: notified to init, which makes the connection itself (see `connects`): the only way to reach a
//!   filesystem Unix socket, so only the allowed ones and the sandbox's own are reached.
//! - `ioctl` `TIOCSTI` and `TIOCLINUX`: `EPERM` (pushing input into a terminal the caller's shell reads).
//! - `io_uring_*`: `ENOSYS` (its operations, `connect` and `socket` among them, would pass no filter).
//! - `request_key`: `EPERM` (its up-call runs a program on the host, `/sbin/request-key`, in the host's namespaces).
//! - `add_key` and `keyctl`: `EPERM`. Keyrings are kernel objects keyed by uid, not by namespace: the caller's user
//!   and session keyrings stay visible to the same uid inside, which may link them into its own and then read,
//!   add or remove the caller's keys. Refusing the two calls closes every keyring at once (Docker's default does the
//!   same); nothing leash runs needs them.
//! - `bpf`: `EPERM`. A pinned eBPF object (a map a host firewall or tracer reads) is opened with `BPF_OBJ_GET` by its
//!   path in a bpf filesystem, with file permissions only, so a read-only mount does not keep it out; loading a
//!   program takes a capability the command never holds.

use libc::{c_int, sock_filter};

/// The audit architecture of the system-call table this filter was written for.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("leash's seccomp filter names the x86_64 and aarch64 system-call tables only");

/// On x86_64, the bit that selects the x32 table.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

// Offsets into `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of argument `i` (the kernel reads `int` and `unsigned int` arguments from them alone).
const fn arg(i: u32) -> u32 {
    if cfg!(target_endian = "little") {
        16 + 8 * i
    } else {
        20 + 8 * i
    }
}

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const AND: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
const fn errno(e: c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The mask of the socket type in `socket`'s second argument (the rest are `SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u32 = 0xf;

fn op(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The whole program.
pub(super) fn program() -> Vec<sock_filter> {
    with_connects(&[op(RET, NOTIFY)])
}

/// The program without the hand-over of `connect` (allowed): for a command whose connections a firewall decides
/// (`uid`), where no init answers notifications.
pub(super) fn program_without_connect_notify() -> Vec<sock_filter> {
    with_connects(&[op(RET, ALLOW)])
}

/// The program, `connect` answered by `on_connect`.
fn with_connects(on_connect: &[sock_filter]) -> Vec<sock_filter> {
    let mut p = vec![op(LD_ABS, ARCH), jump(JEQ, NATIVE_ARCH, 1, 0), op(RET, errno(libc::ENOSYS)), op(LD_ABS, NR)];
    #[cfg(target_arch = "x86_64")]
    p.extend([jump(JGE, X32_BIT, 0, 1), op(RET, errno(libc::ENOSYS))]);
    on_call(&mut p, libc::SYS_connect, on_connect);
    on_call(&mut p, libc::SYS_socket, &socket_rules());
    on_call(&mut p, libc::SYS_socketpair, &socket_rules());
    on_call(&mut p, libc::SYS_ioctl, &ioctl_rules());
    for call in [libc::SYS_io_uring_setup, libc::SYS_io_uring_enter, libc::SYS_io_uring_register] {
        on_call(&mut p, call, &[op(RET, errno(libc::ENOSYS))]);
    }
    for call in [libc::SYS_request_key, libc::SYS_add_key, libc::SYS_keyctl, libc::SYS_bpf] {
        on_call(&mut p, call, &[op(RET, errno(libc::EPERM))]);
    }
    p.push(op(RET, ALLOW));
    p
}

/// Appends "if the call is `nr`, run `body` (which ends in a return)", with the call number in the accumulator
/// before and after.
fn on_call(p: &mut Vec<sock_filter>, nr: libc::c_long, body: &[sock_filter]) {
    p.push(jump(JEQ, nr as u32, 0, body.len() as u8));
    p.extend_from_slice(body);
}

/// `socket`/`socketpair`: the families allowed, and no Unix datagrams.
fn socket_rules() -> Vec<sock_filter> {
    vec![
        op(LD_ABS, arg(0)),
        jump(JEQ, libc::AF_INET as u32, 9, 0),
        jump(JEQ, libc::AF_INET6 as u32, 8, 0),
        jump(JEQ, libc::AF_NETLINK as u32, 7, 0),
        jump(JEQ, libc::AF_UNIX as u32, 0, 4),
        op(LD_ABS, arg(1)),
        op(AND, SOCK_TYPE_MASK),
        jump(JEQ, libc::SOCK_STREAM as u32, 3, 0),
        jump(JEQ, libc::SOCK_SEQPACKET as u32, 2, 1),
        op(RET, errno(libc::EAFNOSUPPORT)),
        op(RET, errno(libc::EPERM)),
        op(RET, ALLOW),
    ]
}

/// `ioctl`: no terminal injection.
fn ioctl_rules() -> Vec<sock_filter> {
    vec![
        op(LD_ABS, arg(1)),
        jump(JEQ, libc::TIOCSTI as u32, 2, 0),
        jump(JEQ, libc::TIOCLINUX as u32, 1, 0),
        op(RET, ALLOW),
        op(RET, errno(libc::EPERM)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the few instructions the program uses, over a `seccomp_data`.
    fn run(p: &[sock_filter], nr: libc::c_long, arch: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                NR => nr as u32,
                ARCH => arch,
                _ => {
                    let i = ((off - 16) / 8) as usize;
                    let a = args[i];
                    if (off - 16).is_multiple_of(8) {
                        a as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
            }
        };
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = p[pc];
            pc += 1;
            match ins.code {
                LD_ABS => acc = word(ins.k),
                AND => acc &= ins.k,
                JEQ => pc += usize::from(if acc == ins.k { ins.jt } else { ins.jf }),
                JGE => pc += usize::from(if acc >= ins.k { ins.jt } else { ins.jf }),
                RET => return ins.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    fn decide(nr: libc::c_long, args: [u64; 6]) -> u32 {
        run(&program(), nr, NATIVE_ARCH, args)
    }

    #[allow(clippy::unnecessary_cast, reason = "`Ioctl` is `c_ulong` here, `c_int` on other targets")]
    fn request(r: libc::Ioctl) -> u64 {
        r as u64
    }

    fn sock(family: c_int, kind: c_int) -> [u64; 6] {
        [family as u64, kind as u64, 0, 0, 0, 0]
    }

    #[test]
    fn only_the_known_families_and_no_unix_datagrams_get_a_socket() {
        for call in [libc::SYS_socket, libc::SYS_socketpair] {
            for (family, kind) in [
                (libc::AF_INET, libc::SOCK_STREAM),
                (libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC),
                (libc::AF_INET6, libc::SOCK_STREAM),
                (libc::AF_NETLINK, libc::SOCK_RAW),
                (libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC),
                (libc::AF_UNIX, libc::SOCK_SEQPACKET),
            ] {
                assert_eq!(decide(call, sock(family, kind)), ALLOW, "{family} {kind}");
            }
            for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC] {
                assert_eq!(decide(call, sock(libc::AF_UNIX, kind)), errno(libc::EPERM), "unix {kind}");
            }
            for family in [libc::AF_VSOCK, libc::AF_PACKET, libc::AF_BLUETOOTH, libc::AF_CAN, 200] {
                assert_eq!(decide(call, sock(family, libc::SOCK_STREAM)), errno(libc::EAFNOSUPPORT), "{family}");
            }
            // The kernel reads an `int`: high bits set around AF_VSOCK still name AF_VSOCK.
            let high = (1u64 << 32) | libc::AF_VSOCK as u64;
            assert_eq!(decide(call, [high, 1, 0, 0, 0, 0]), errno(libc::EAFNOSUPPORT));
        }
    }

    #[test]
    fn connect_is_notified_and_host_reaching_calls_refused() {
        assert_eq!(decide(libc::SYS_connect, [3, 0, 16, 0, 0, 0]), NOTIFY);
        assert_eq!(decide(libc::SYS_ioctl, [0, request(libc::TIOCSTI), 0, 0, 0, 0]), errno(libc::EPERM));
        assert_eq!(decide(libc::SYS_ioctl, [0, request(libc::TIOCLINUX), 0, 0, 0, 0]), errno(libc::EPERM));
        let high = (7u64 << 32) | request(libc::TIOCSTI);
        assert_eq!(decide(libc::SYS_ioctl, [0, high, 0, 0, 0, 0]), errno(libc::EPERM), "the kernel reads 32 bits");
        assert_eq!(decide(libc::SYS_ioctl, [0, request(libc::TIOCGWINSZ), 0, 0, 0, 0]), ALLOW);
        assert_eq!(decide(libc::SYS_io_uring_setup, [0; 6]), errno(libc::ENOSYS));
        for call in [libc::SYS_request_key, libc::SYS_add_key, libc::SYS_keyctl, libc::SYS_bpf] {
            assert_eq!(decide(call, [0; 6]), errno(libc::EPERM), "{call}");
        }
        assert_eq!(decide(libc::SYS_read, [0; 6]), ALLOW);
        assert_eq!(decide(libc::SYS_sendto, [0; 6]), ALLOW);
    }

    #[test]
    fn foreign_system_call_tables_get_nothing() {
        const I386: u32 = 0x4000_0003;
        assert_eq!(run(&program(), 102, I386, [0; 6]), errno(libc::ENOSYS), "socketcall on i386");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(decide(libc::SYS_connect | X32_BIT as libc::c_long, [0; 6]), errno(libc::ENOSYS), "x32");
    }
}
