#!/usr/bin/env bash
# benchflow 0.7.11 (PyPI) egress denylist proxy, the one benchflow starts in a task container for
# network_mode='denylist' (stdlib Python, one thread per connection). Nothing of benchflow is kept in this
# repository: `fetch` (run by run.sh and install/all.sh before the namespaces, where PyPI is reachable) downloads
# the wheel with pip and unpacks its two files, unmodified, to $BENCH_TOOLS/benchflow. material.py gets policy.json
# and the per-rollout CA from benchflow's own start_egress_denylist, launch.py starts the proxy with the flags
# benchflow's setup uses (own port, plus --upstream-ca for the test CA).
#
# Policy: a denylist, blocked_hosts [denied.bench.test]; allowed.bench.test is allowed because it is not listed
# (benchflow's proxy has no allowlist mode; BENCH_ALLOWED is not used).
#
# It INTERCEPTS EVERY HTTPS HOST, not only the hosts that carry URL rules: each CONNECT that is not refused is
# answered 200 and TLS-terminated with a leaf from benchflow's CA (minted with two openssl runs on a host's first
# CONNECT, then cached), and the inner request goes upstream over a new, verified TLS connection. So INTERCEPTS=1
# and CLIENT_CA is benchflow's CA. One request per client connection: it forwards with `Connection: close` and
# closes the client's connection (tunnel) after the response, so keep-alive workloads get one answer per
# connection.
#
# The upstream is on 127.0.0.1. benchflow refuses every address that Python's ipaddress does not call global, with
# no exemption list; launch.py treats 127.0.0.0/8 as global (BF_PUBLIC_NETS), like leash.sh's
# allow_destinations: [127.0.0.0/8]. Python: BENCHFLOW_PYTHON, else the first of python3.13 / python3.12 that runs
# (PATH or ~/.pyenv/versions), else python3.
set -euo pipefail
W="${BENCH_WORK:-}"
D="$(cd "$(dirname "$0")" && pwd)/benchflow"
VERSION="${BENCHFLOW_VERSION:-0.7.11}"
export BENCHFLOW_SRC="${BENCH_TOOLS:-/opt/bench-tools}/benchflow/$VERSION"
DENIED="${BENCH_DENIED:-denied.bench.test}"
pick_python() {
  if [ -n "${BENCHFLOW_PYTHON:-}" ]; then echo "$BENCHFLOW_PYTHON"; return; fi
  local pv="${HOME:-/nonexistent}/.pyenv/versions"
  for p in "$(command -v python3.13 || true)" "$(command -v python3.12 || true)" \
           $(ls -rd "$pv"/3.13*/bin/python3 2>/dev/null || true) $(ls -rd "$pv"/3.12*/bin/python3 2>/dev/null || true); do
    [ -n "$p" ] && "$p" -c 'import ssl' >/dev/null 2>&1 && { echo "$p"; return; }
  done
  command -v python3
}
PY="$(pick_python)"
args() {
  echo "--port $BENCH_PORT --policy \$W/bf/policy.json --cert-dir \$W/bf/certs --ca-cert \$W/bf/ca.crt" \
       "--ca-key \$W/bf/ca.key --openssl $(command -v openssl) --log \$W/bf/blocked.jsonl --upstream-ca \$TEST_CA"
}
case "${1:-}" in
  fetch)
    [ -f "$BENCHFLOW_SRC/_egress_denylist_proxy.py" ] && exit 0
    # The wheel declares Python >= 3.12; the two files run on 3.11 too, so ask for the 3.12 wheel whatever runs pip.
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps "benchflow==$VERSION" --python-version 3.12 --only-binary=:all: -d "$tmp" \
      || { echo "pip download benchflow==$VERSION failed" >&2; rm -rf "$tmp"; exit 1; }
    mkdir -p "$BENCHFLOW_SRC"
    python3 - "$tmp"/benchflow-*.whl "$BENCHFLOW_SRC" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("_egress_denylist_proxy.py", "egress_denylist.py"):
        open(f"{sys.argv[2]}/{name}", "wb").write(z.read(f"benchflow/sandbox/{name}"))
PY
    rm -rf "$tmp"
    ;;
  check)
    [ -f "$BENCHFLOW_SRC/_egress_denylist_proxy.py" ] \
      || { echo "benchflow $VERSION not fetched: bash bench/candidates/benchflow.sh fetch (needs PyPI)"; exit 1; }
    command -v openssl >/dev/null || { echo "benchflow's proxy mints leaves with openssl (apt-get install openssl)"; exit 1; }
    python3 -c 'import cryptography' 2>/dev/null || { echo "benchflow makes its CA with python3's cryptography (pip install cryptography)"; exit 1; }
    "$PY" -c 'import ssl' || { echo "$PY does not run"; exit 1; }
    ;;
  version) echo "benchflow $VERSION egress denylist proxy (Python $("$PY" -c 'import sys; print(sys.version.split()[0])'))" ;;
  config)
    echo "BF_PUBLIC_NETS=127.0.0.0/8 $PY candidates/benchflow/launch.py $(args)"
    echo "# policy.json (benchflow's start_egress_denylist): blocked_urls [], blocked_hosts [$DENIED]; intercepts every HTTPS host"
    ;;
  start)
    python3 "$D/material.py" "$W/bf" --blocked-host "$DENIED" >"$W/material.log" 2>&1 \
      || { cat "$W/material.log" >&2; exit 1; }
    BF_PUBLIC_NETS=127.0.0.0/8 "$PY" "$D/launch.py" --port "$BENCH_PORT" --policy "$W/bf/policy.json" \
      --cert-dir "$W/bf/certs" --ca-cert "$W/bf/ca.crt" --ca-key "$W/bf/ca.key" --openssl "$(command -v openssl)" \
      --log "$W/bf/blocked.jsonl" --upstream-ca "$BENCH_CA_CERT" >"$W/stdout.log" 2>&1 &
    echo $! > "$W/main.pid"
    for i in $(seq 200); do grep -q 'listening on' "$W/stdout.log" && break; sleep 0.05; done
    "$BENCH_LIB/waitport.sh" 127.0.0.1 "$BENCH_PORT" 10
    cat > "$W/proxy.env" <<E
PID=$(cat "$W/main.pid")
HTTP_PROXY_URL=http://127.0.0.1:$BENCH_PORT
CONNECT_PROXY_URL=http://127.0.0.1:$BENCH_PORT
CLIENT_CA=$W/bf/ca.crt
INTERCEPTS=1
E
    ;;
  stop)
    pid=$(cat "$W/main.pid" 2>/dev/null || true)
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; kill -9 "$pid" 2>/dev/null || true; }
    ;;
  wrap|wrap-client) exit 1 ;;   # no wrapper command: benchflow's sandbox is a task container with a uid firewall
esac
