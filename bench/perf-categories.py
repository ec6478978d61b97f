#!/usr/bin/env python3
"""Where a profile's CPU goes, by category: reads `perf script | inferno-collapse-perf --kernel` output (kernel frames
end in `_[k]`) and gives every sample to one category, printing the shares.

    perf record -F 999 -g --call-graph dwarf -o perf.data -p PID -- sleep 10
    perf script -i perf.data | inferno-collapse-perf --kernel > folded.k
    python3 bench/perf-categories.py folded.k

Rules, first match wins: a stack through leash's audit, metrics or fairness code is that (its syscalls included);
a sample in the kernel goes to the syscall it is in (named by the `__x64_sys_*` frame, else by the libc wrapper
that entered the kernel); a sample in glibc's allocator is allocation whoever called it; a stack through rustls,
ring or webpki is TLS, by operation (the first matching rule of TLS_OPS); then policy matching, HTTP parsing, tokio.
On a KVM guest, samples that land on `finish_task_switch` or `_raw_spin_unlock_irqrestore` are the sampling timer
firing when interrupts are re-enabled: the work was the context switch or wake-up just before, in the same syscall.
"""
import re
import sys
from collections import Counter

SYSCALLS = [
    (r"sendto|sendmsg|write|writev|splice", "kernel: TCP send over loopback (incl. the receiver's softirq delivery)"),
    (r"recvfrom|recvmsg|read|readv", "kernel: TCP receive"),
    (r"epoll_wait|epoll_pwait|epoll_ctl", "kernel: epoll (incl. sleeping and waking there)"),
    (r"futex", "kernel: futex (tokio worker park/unpark)"),
    (r"connect|accept4?|close|socket|setsockopt|getsockopt|shutdown|bind|getsockname|getpeername",
     "kernel: socket set-up/tear-down (connect, accept, close)"),
]
# libc wrappers, for kernel stacks whose syscall frame was inlined away
WRAPPERS = {"__writev": "writev", "writev": "writev", "write": "write", "__write": "write", "__send": "sendto",
            "__recv": "recvfrom", "read": "read", "__read": "read", "__libc_read": "read", "syscall": "futex",
            "__connect": "connect", "__close": "close", "close": "close", "epoll_wait": "epoll_wait",
            "__libc_accept4": "accept4", "accept4": "accept4", "epoll_ctl": "epoll_ctl"}
TLS_OPS = [
    (r"verify_server_cert|build_chain|verify_for_usage",
     "TLS: upstream certificate chain verification (ECDSA P-256 verify)"),
    (r"verify_tls1[23]_signature", "TLS: upstream CertificateVerify signature check (ECDSA P-256 verify)"),
    (r"Signer>::sign|EcdsaKeyPair::sign|emit_certificate_verify", "TLS: signing CertificateVerify (ECDSA P-256)"),
    (r"rcgen|CertAuthority::issue", "TLS: leaf issuance"),
    (r"KeyExchange|KxGroup|x25519|agree_ephemeral|start_and_complete", "TLS: key exchange (X25519)"),
    (r"hkdf|hmac|key_schedule|KeySchedule|digest::|sha256|sha512|Transcript|HandshakeHash",
     "TLS: key schedule + transcript hashing (HKDF, SHA-2)"),
    (r"aes|gcm|chacha|poly1305|Aead|aead|MessageEncrypter|MessageDecrypter", "TLS: AEAD (record encryption)"),
]
LEASH_PARTS = [(r"leash_proxy::audit::", "audit write (line formatting, fstat, write(2))"),
               (r"leash_proxy::metrics::", "metrics"),
               (r"leash_proxy::fair::", "fairness bookkeeping")]
ALLOC = re.compile(r"^(malloc|free|__libc_free|__libc_malloc|__libc_realloc|realloc|calloc|_int_malloc|_int_free|"
                   r"_int_realloc|_int_memalign|_mid_memalign|unlink_chunk|malloc_consolidate|cfree|tcache|sysmalloc|"
                   r"__rust_alloc|__rust_dealloc|__rdl_|__rustc::__rdl|posix_memalign)")


def kernel_category(frames):
    for f in reversed(frames):
        m = re.search(r"__x64_sys_(\w+)_\[k\]", f)
        if m:
            return syscall_category(m.group(1))
    user = [f for f in frames if not f.endswith("_[k]")]
    wrapper = WRAPPERS.get(user[-1] if user else "")
    if wrapper and any(f.startswith("entry_SYSCALL") for f in frames):
        return syscall_category(wrapper)
    return "kernel: interrupts, page faults, scheduling outside a syscall"


def syscall_category(name):
    for pattern, category in SYSCALLS:
        if re.fullmatch(pattern, name):
            return category
    return f"kernel: other syscalls ({name})"


def user_category(user):
    leaf = user[-1]
    if any(k in f for f in user for k in ("rustls", "ring::", "ring_core", "webpki")):
        for pattern, category in TLS_OPS:
            if any(re.search(pattern, f) for f in user):
                return category
        return "TLS: record layer, message codec, state machine"
    for pattern, category in [(r"leash_policy", "policy matching"),
                              (r"http_head|parse_request|h1_admit|headers::|httparse|wire::", "HTTP parsing")]:
        if any(re.search(pattern, f) for f in user):
            return category
    if leaf.startswith(("__mem", "memcpy", "memmove")):
        return "memcpy/memset"
    if "tokio::" in leaf or "mio::" in leaf or leaf.startswith(("{async_fn", "__pthread")) or leaf in ("syscall", "epoll_wait"):
        return "tokio scheduling and I/O driver (user side)"
    if "leash" in leaf:
        return "leash's own code (tunnel, admission, relay)"
    return f"other user space ({leaf[:50]})"


def category(frames):
    for pattern, name in LEASH_PARTS:
        if any(re.search(pattern, f) for f in frames):
            return name
    if frames[-1].endswith("_[k]"):
        return kernel_category(frames)
    if ALLOC.match(frames[-1]):
        return "allocation (glibc malloc/free)"
    return user_category([f for f in frames if not f.endswith("_[k]")])


def main(path):
    shares, total = Counter(), 0
    for line in open(path):
        stack, weight = line.rstrip("\n").rsplit(" ", 1)
        shares[category(stack.split(";"))] += int(weight)
        total += int(weight)
    small = 0
    for name, weight in shares.most_common():
        pct = 100 * weight / total
        if pct >= 0.3 or name.startswith(("audit", "metrics", "fairness")):
            print(f"{pct:5.2f} % {name}")
        else:
            small += pct
    print(f"(rest: {small:.1f} %)")


if __name__ == "__main__":
    main(sys.argv[1])
