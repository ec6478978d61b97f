#!/usr/bin/env bash
# Run every fuzz target for a bounded time (default 20 s each; CI uses a short smoke run):
#   fuzz/smoke.sh [SECONDS]
# Needs cargo-fuzz and a nightly toolchain (`cargo install cargo-fuzz`). New interesting inputs land in
# fuzz/corpus/TARGET; a crash is saved under fuzz/artifacts/TARGET and fails the script.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-20}"
for target in client_hello http_head chunked target_and_path host policy dns; do
  mkdir -p "corpus/$target"
  seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  echo "fuzz: $target for ${secs}s"
  log=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "corpus/$target" "${seeds[@]}" -- \
      -max_total_time="$secs" -max_len=8192 >"$log" 2>&1; then
    tail -n 40 "$log"; echo "fuzz: $target FAILED (input saved under fuzz/artifacts/$target)"; exit 1
  fi
  grep -E "^Done" "$log" || true
  rm -f "$log"
done
echo "fuzz: all targets ran ${secs}s without a crash"
