#!/usr/bin/env bash
# One command: build leash (release) and run the side-by-side benchmark against direct, squid and tinyproxy.
#   sudo bench/leash.sh            # full run (~5 min with these three)
#   sudo bench/leash.sh --quick    # < 1 min
# Extra options go to bench/run.sh (see bench/README.md). Installs its Debian packages and load client first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
cargo build --release --quiet
BENCH_SKIP_PEERS_INSTALL="${BENCH_SKIP_PEERS_INSTALL:-1}" bash "$HERE/install/all.sh" || true
bin=$(mktemp /tmp/leash-bench.XXXXXX)
cp "${CARGO_TARGET_DIR:-target}/$(rustc -vV | sed -n 's/^host: //p')/release/leash" "$bin"
LEASH_BIN="$bin" exec "$HERE/run.sh" --only squid,tinyproxy,leash --no-wrappers "$@"
