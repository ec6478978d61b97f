#!/usr/bin/env bash
# Boot a Debian guest under QEMU whose only NIC is a tap in a network namespace that `leash attach` serves, and check
# from inside: an allowed fetch works, a refused one gets 403, HTTPS is inspected with the run's CA, direct
# connections and the host fail. As root: sudo examples/vm/run.sh [RUNDIR]
#
# RUNDIR (kept; default a temporary directory, removed) receives serial.log (the console, each line stamped with
# the host's clock), audit.jsonl, nft.txt (the tap's firewall as listed during the run), summary.txt. Environment:
# LEASH (the binary; default target/<host>/release/leash, else debug), LEASH_VM_DIR (the guest, built by build.sh;
# default target/vm), LEASH_VM_ACCEL (kvm or tcg; default: KVM if a probe guest boots with it, remembered in
# LEASH_VM_DIR/accel), LEASH_VM_TIMEOUT (seconds for the guest's checks, default 90). Exit 0 when every check passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "run.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (a network namespace, a tap, nftables)"
for t in qemu-system-x86_64 ip nft openssl python3 cpio gzip; do
  command -v "$t" >/dev/null || die "$t is missing (apt-get install qemu-system-x86 iproute2 nftables openssl python3 cpio)"
done
leash=${LEASH:-}
if [ -z "$leash" ]; then
  for b in "$repo"/target/*/release/leash "$repo"/target/*/debug/leash; do [ -x "$b" ] && { leash=$b; break; }; done
fi
[ -n "$leash" ] && [ -x "$leash" ] || die "no leash binary (cargo build, or set LEASH)"
vmdir=${LEASH_VM_DIR:-$repo/target/vm}
guest_timeout=${LEASH_VM_TIMEOUT:-90}
# Seconds for leash to print its listening line, and for a powered-off guest's QEMU to exit.
ready_timeout=20
exit_timeout=10
# Seconds a KVM probe guest gets to reach /init; under TCG it takes about 4.
probe_timeout=15

tap_addr=169.254.100.1 guest_addr=169.254.100.2 proxy_port=3128
ns=leash-vm-$$
run=${1:-}
if [ -n "$run" ]; then mkdir -p "$run"; run=$(cd "$run" && pwd); keep=1; else run=$(mktemp -d); keep=0; fi
rm -rf "$run"/{serial.log,probe.log,audit.jsonl,nft.txt,nft-after.txt,summary.txt,sentinel.log,origins.ports,leash.out,leash.err,ca.pem,qemu.pid,guest}

pids=()
cleanup() {
  set +e
  [ -s "$run/qemu.pid" ] && kill "$(cat "$run/qemu.pid")" 2>/dev/null
  ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  [ "$keep" = 1 ] || rm -rf "$run"
}
trap cleanup EXIT
# Wait up to $1 seconds for the command after it to succeed.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.1; done
}

"$here/build.sh" "$vmdir"

# Origins on the host's loopback: plain HTTP for allowed.test, HTTPS (a throw-away CA) for docs.test; a sentinel on
# every host address that the guest must never reach.
cd "$run"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout test-ca.key -out test-ca.pem -days 2 \
  -subj /CN=leash-vm-test-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=docs.test \
  2>/dev/null
printf 'subjectAltName=DNS:docs.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >leaf.cnf
openssl x509 -req -in leaf.csr -CA test-ca.pem -CAkey test-ca.key -CAcreateserial -out leaf.pem -days 2 \
  -extfile leaf.cnf 2>/dev/null
python3 "$here/origins.py" >origins.ports 2>origins.err &
pids+=($!)
wait_for "$ready_timeout" test -s origins.ports || die "the origins did not start: $(cat origins.err)"
read -r http_port https_port sentinel_port <origins.ports
host_ip=$(ip -4 route get 192.0.2.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
host_ip=${host_ip:-$(ip -4 -o addr show scope global | awk '{sub("/.*", "", $4); print $4; exit}')}

# The namespace: lo and the tap, nothing else, no route out; the tap's firewall drops all forwarding both ways.
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" tuntap add dev tap0 mode tap
ip netns exec "$ns" sysctl -qw net.ipv6.conf.tap0.accept_ra=0 net.ipv6.conf.tap0.autoconf=0
ip -n "$ns" addr add "$tap_addr/30" dev tap0
ip -n "$ns" link set tap0 up
ip netns exec "$ns" nft -f - <<'NFT'
table inet leash_vm {
  chain forward {
    type filter hook forward priority filter; policy drop;
    iifname "tap0" counter drop
    oifname "tap0" counter drop
  }
}
NFT
ip netns exec "$ns" nft list table inet leash_vm >nft.txt
grep -q 'iifname "tap0".* drop' nft.txt && grep -q 'oifname "tap0".* drop' nft.txt || die "the tap's firewall is missing"

cat >policy.yaml <<EOF2
network:
  mode: allowlist
  allowed_hosts: [allowed.test]
  allowed_urls: [docs.test/vm]          # a path rule: docs.test is TLS-inspected with the run's CA
  ports: [80, $http_port]
  tunnel_ports: [443, $https_port]
  allow_destinations: [127.0.0.0/8]     # the origins are on the host's loopback
EOF2
"$leash" attach --netns "/run/netns/$ns" --listen "$tap_addr:$proxy_port" --interface tap0 --policy policy.yaml \
  --log audit.jsonl --ca-cert-out ca.pem --resolve allowed.test:127.0.0.1 --resolve docs.test:127.0.0.1 \
  --upstream-ca test-ca.pem >leash.out 2>leash.err &
pids+=($!)
leash_pid=$!
listening() { grep -qs '^listening inside ' leash.out; }
wait_for "$ready_timeout" sh -c "grep -qs '^listening inside ' leash.out || ! kill -0 $leash_pid 2>/dev/null" && listening ||
  die "leash attach did not start: $(cat leash.err)"

# The run's part of the initramfs, appended to the built one: /leash/config and the CA.
mkdir -p guest/leash
cp ca.pem guest/leash/ca.pem
cp test-ca.pem guest/leash/origin-ca.pem
cat >guest/leash/config <<EOF2
addr=$guest_addr/30
proxy=$tap_addr:$proxy_port
allowed=http://allowed.test:$http_port/vm
refused=http://refused.test:$http_port/
https=https://docs.test:$https_port/vm
direct=192.0.2.1:80,$tap_addr:22,$tap_addr:$sentinel_port${host_ip:+,$host_ip:$sentinel_port}
EOF2
(cd guest && find . | cpio -o -H newc -R 0:0 --quiet | gzip) >run.cpio.gz
cat "$vmdir/initramfs.gz" run.cpio.gz >initramfs.gz

# One guest boot; $1 accel, $2 extra kernel arguments, $3 the serial log. QEMU's pid goes to qemu.pid.
boot() {
  local start=${EPOCHREALTIME/./} now
  ip netns exec "$ns" qemu-system-x86_64 -machine pc -accel "$1" -m 256 -smp 1 -display none -monitor none \
    -serial stdio -no-reboot -pidfile qemu.pid -kernel "$vmdir/vmlinuz" -initrd initramfs.gz \
    -append "console=ttyS0 quiet panic=-1 $2" \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no -device virtio-net-pci,netdev=n0 </dev/null 2>qemu.err |
    while IFS= read -r line; do
      now=${EPOCHREALTIME/./}
      printf '%d.%03d %s\n' $(((now - start) / 1000000)) $(((now - start) / 1000 % 1000)) "${line%$'\r'}"
    done >"$3"
}
# KVM where it boots a guest (remembered), else TCG.
accel=${LEASH_VM_ACCEL:-$(cat "$vmdir/accel" 2>/dev/null || true)}
if [ -z "$accel" ]; then
  accel=tcg
  if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    boot kvm leash.probe=1 probe.log &
    probe=$!
    wait_for "$probe_timeout" grep -qs 'LEASH-VM init' probe.log && accel=kvm
    [ -s qemu.pid ] && kill "$(cat qemu.pid)" 2>/dev/null
    wait "$probe" || true
    rm -f qemu.pid
  fi
  echo "$accel" >"$vmdir/accel"
fi

boot "$accel" "" serial.log &
pids+=($!)
wait_for "$guest_timeout" grep -qs 'LEASH-VM done' serial.log || echo "run.sh: the guest did not finish in ${guest_timeout}s" >&2
wait_for "$exit_timeout" sh -c '! kill -0 "$(cat qemu.pid 2>/dev/null)" 2>/dev/null' || kill "$(cat qemu.pid)" 2>/dev/null || true
ip netns exec "$ns" nft list table inet leash_vm >nft-after.txt
kill "$leash_pid" 2>/dev/null
wait "$leash_pid" 2>/dev/null || true

set +e
python3 "$here/verdict.py" "$run" "$accel" | tee summary.txt
exit "${PIPESTATUS[0]}"
