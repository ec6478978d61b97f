#!/usr/bin/env bash
# The Python wheel as a user gets it: built with maturin (pyproject.toml), installed with pip into a fresh venv, and
# `leash` found on that venv's PATH and run for real — a sandboxed curl refused by the policy, its refusal on record;
# then the wheel's Python package (leash_egress) and its tests (tests/python) run from that venv against the wheel's
# own binary, in containers of the local test image where Docker answers (LEASH_REQUIRE_DOCKER=1: it must).
# Called by .ci/run; needs python3 with venv, curl and namespaces. Prints `wheel: N passed, N failed` at the end.
# LEASH_WHEEL_DEBUG=1 builds the binary in the dev profile (the debug build a checkout has: minutes, not tens).
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
profile=--release
[ -n "${LEASH_WHEEL_DEBUG:-}" ] && profile=--profile=dev
"$work/build/bin/maturin" build "$profile" --out "$work/dist"
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

# The package: in the wheel, importable from the venv, finding the wheel's binary, and its tests passing there (from
# the repository root, where no leash_egress directory shadows the installed one).
check "the wheel ships the leash_egress package" grep -q '^leash_egress/proxy.py' \
  <<<"$("$work/venv/bin/python" -m zipfile -l "$wheel" | awk '{print $1}')"
found=$(env -u LEASH_BIN "$work/venv/bin/python" -c 'import leash_egress; print(leash_egress.find_leash())')
check "leash_egress finds the wheel's binary" test "$found" = "$work/venv/bin/leash"
check "leash_egress's tests pass against the wheel (tests/python)" \
  env -u LEASH_BIN -u PYTHONPATH timeout 900 "$work/venv/bin/python" -m unittest discover -s tests/python

echo "wheel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
