#!/usr/bin/env bash
# Build leash, start a local origin, run the proxy on examples/demo.yaml and show what it allows, what it refuses
# and what it writes to the audit log. Needs cargo, curl, openssl and python3; touches nothing outside a temp directory.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "building leash (release) ..."
cargo build --release   # cargo shows its progress: a few minutes the first time, seconds after
echo "built."
LEASH=${CARGO_TARGET_DIR:-target}/$(rustc -vV | sed -n 's/^host: //p')/release/leash
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/site/guide" && echo "the guide" > "$work/site/guide/index.html"
mkdir -p "$work/site/open" "$work/site/closed" && echo "an open paper" > "$work/site/open/index.html"
echo "a closed paper" > "$work/site/closed/index.html"
python3 -m http.server 8080 --bind 127.0.0.1 --directory "$work/site" >/dev/null 2>&1 &
# An HTTPS origin for papers.example.test, signed by a throw-away CA (leash verifies upstreams: --upstream-ca).
(cd "$work" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
   -days 1 -subj /CN=demo-origin-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign &&
 openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=papers &&
 printf 'subjectAltName=DNS:papers.example.test\nextendedKeyUsage=serverAuth\n' > ext.cnf &&
 openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 1 -extfile ext.cnf) \
  >/dev/null 2>&1
python3 - "$work" >/dev/null 2>&1 <<'PY' &
import functools, http.server, ssl, sys
work = sys.argv[1]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=work + "/site")
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8443), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(work + "/leaf.pem", work + "/leaf.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
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
# HTTPS to papers.example.test is TLS-inspected: the command trusts the run's CA through SSL_CERT_FILE & co.
echo; echo "\$ leash run --policy examples/demo.yaml -- sh -c '…'"
"$LEASH" run --policy examples/demo.yaml --resolve docs.example.test:127.0.0.1 \
  --resolve papers.example.test:127.0.0.1 --upstream-ca "$work/ca.pem" --log "$work/run-audit.jsonl" -- sh -c '
  echo "inside: fetch through the proxy: $(curl -s http://docs.example.test:8080/guide/)"
  echo "inside: a refused host: $(curl -s -o /dev/null -w "%{http_code}" http://evil.example.test:8080/)"
  echo "inside: HTTPS, an allowed path of an inspected host: $(curl -s https://papers.example.test:8443/open/)"
  echo "inside: HTTPS, another path there: $(curl -s https://papers.example.test:8443/closed/ | head -1)"
  curl -s --noproxy "*" --max-time 3 http://127.0.0.1:8080/guide/ >/dev/null && echo "inside: direct: REACHED" || echo "inside: direct connection to the host: fails"
  echo "inside: DNS for an allowed name: $(getent hosts docs.example.test | cut -d" " -f1) (the sandbox-local address)"
  echo "inside: ignoring the proxy variables, an allowed name still goes through leash: $(curl -s --noproxy "*" http://docs.example.test:8080/guide/)"
  getent hosts evil.example.test >/dev/null && echo "inside: DNS: ANSWERED" || echo "inside: DNS for a refused name: fails at once"
  exit 7' || status=$?
echo "exit status: ${status:-0} (the command's)"
echo "audit log of the run:"; cat "$work/run-audit.jsonl"
