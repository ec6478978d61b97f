#!/usr/bin/env bash
# The Python wheel as a user gets it: built with maturin (pyproject.toml), installed with pip into a fresh venv, and
# `leash` found on that venv's PATH and run for real — a sandboxed curl refused by the policy, its refusal on record.
# Called by .ci/run; needs python3 with venv, curl and namespaces. Prints `wheel: N passed, N failed` at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
check() { # NAME COMMAND...: one assertion, counted
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "wheel: FAILED: $name" >&2; fi
}

python3 -m venv "$work/build"
"$work/build/bin/pip" install --quiet 'maturin>=1.5,<2'
"$work/build/bin/maturin" build --release --out "$work/dist"
wheel=$(ls "$work"/dist/leash_egress-*.whl)
check "the wheel is tagged for Linux" grep -q 'linux' <<<"$wheel"

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$wheel"
# As a user would: the venv activated, `leash` by name.
on_path=$(. "$work/venv/bin/activate" && command -v leash)
check "leash is on the venv's PATH" test "$on_path" = "$work/venv/bin/leash"
version=$(. "$work/venv/bin/activate" && leash --version)
check "it is this build" grep -q "^leash $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (" <<<"$version"
status=$(. "$work/venv/bin/activate" && leash run --allow allowed.test --log "$work/audit.jsonl" -- \
  curl -s -o /dev/null -w '%{http_code}' http://refused.test/x || true)
check "leash run from the wheel refuses what the policy refuses" test "$status" = 403
check "and logs it" grep -q '"host":"refused.test".*"reason":"not-allowed"' "$work/audit.jsonl"

echo "wheel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
