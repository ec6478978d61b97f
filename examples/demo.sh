#!/usr/bin/env bash
# Build leash, start a local origin, run the proxy on examples/demo.yaml and show what it allows, what it refuses
# and what it writes to the audit log. Needs cargo, curl and python3; touches nothing outside a temp directory.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
LEASH=target/release/leash
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/site/guide" && echo "the guide" > "$work/site/guide/index.html"
python3 -m http.server 8080 --bind 127.0.0.1 --directory "$work/site" >/dev/null 2>&1 &
"$LEASH" check examples/demo.yaml
"$LEASH" proxy --policy examples/demo.yaml --listen 127.0.0.1:0 --log "$work/audit.jsonl" \
  --resolve docs.example.test:127.0.0.1 >"$work/stdout" &
for _ in $(seq 100); do grep -q 'listening on' "$work/stdout" 2>/dev/null && break; sleep 0.05; done
proxy="http://$(sed -n 's/^listening on //p' "$work/stdout")"
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8080/ && break; sleep 0.05; done

show() { echo; echo "\$ curl -x $proxy $1"; curl -s -i -x "$proxy" "$1" | sed -n '1p;/^X-Leash-Reason/p;/^leash:/p;/^the guide/p'; }
show http://docs.example.test:8080/guide/
show http://evil.example.test:8080/exfiltrate
show http://127.0.0.1:8080/guide/
show "http://[::ffff:127.0.0.1]:8080/guide/"
echo; echo "\$ leash explain --policy examples/demo.yaml http://evil.example.test:8080/"
"$LEASH" explain --policy examples/demo.yaml http://evil.example.test:8080/ || true
echo; echo "audit log of the proxy ($work/audit.jsonl):"
cat "$work/audit.jsonl"

# The main job: a command whose only way out is leash. Inside, the network holds only `lo`; the proxy variables
# point at leash's listener there; a direct connection and a DNS lookup get nowhere.
echo; echo "\$ leash run --policy examples/demo.yaml -- sh -c '…'"
"$LEASH" run --policy examples/demo.yaml --resolve docs.example.test:127.0.0.1 --log "$work/run-audit.jsonl" -- sh -c '
  echo "inside: fetch through the proxy: $(curl -s http://docs.example.test:8080/guide/)"
  echo "inside: a refused host: $(curl -s -o /dev/null -w "%{http_code}" http://evil.example.test:8080/)"
  curl -s --noproxy "*" --max-time 3 http://127.0.0.1:8080/guide/ >/dev/null && echo "inside: direct: REACHED" || echo "inside: direct connection to the host: fails"
  getent hosts docs.example.test >/dev/null && echo "inside: DNS: ANSWERED" || echo "inside: DNS lookup: fails"
  exit 7' || status=$?
echo "exit status: ${status:-0} (the command's)"
echo "audit log of the run:"; cat "$work/run-audit.jsonl"
