#!/usr/bin/env bash
# benchflow's own live egress-filter tests, run against leash (docs/benchflow.md).
#
# Downloads the benchflow sdist from PyPI, makes a Python 3.12 venv with what the chosen test modules import, and runs
# them with the plugin tests/benchflow/conftest_leash.py, which starts `leash proxy` where benchflow's fixtures start
# benchflow's proxy. pytest runs in a network namespace of its own holding only `lo`: nothing but loopback exists.
# Also checks that leash_egress.benchflow (python/) keeps benchflow's egress API (drop_in_api.py; a difference fails
# the run too).
# Prints `PASS|FAIL|SKIP name` per test and a count; exits 1 when a test fails that tests/benchflow/expected.txt does
# not list, or a listed one passes; 77 when it cannot run here (no python3.12, no network namespace).
#
#   LEASH_BIN=target/x86_64-unknown-linux-gnu/debug/leash tests/benchflow/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.7.11

leash=${LEASH_BIN:-}
if [ -z "$leash" ]; then
  for c in "$root"/target/*/debug/leash "$root"/target/debug/leash; do [ -x "$c" ] && leash=$c && break; done
fi
[ -n "$leash" ] && [ -x "$leash" ] || { echo "run.sh: no leash binary (set LEASH_BIN or cargo build)" >&2; exit 2; }
leash=$(cd "$(dirname "$leash")" && pwd)/$(basename "$leash")

python=""
if command -v pyenv >/dev/null 2>&1 && PYENV_VERSION=3.12.1 pyenv exec python3.12 -V >/dev/null 2>&1; then
  python="env PYENV_VERSION=3.12.1 pyenv exec python3.12"
elif command -v python3.12 >/dev/null 2>&1 && python3.12 -V >/dev/null 2>&1; then
  python=python3.12
else
  echo "run.sh: no Python 3.12 (pyenv's 3.12.1 or python3.12 on PATH): benchflow $version needs it; skipped" >&2
  exit 77
fi
# A namespace with only loopback: unprivileged with a user namespace, or as root.
netns=""
for try in "unshare -rn" "unshare -n"; do
  if $try true 2>/dev/null; then netns=$try; break; fi
done
[ -n "$netns" ] || { echo "run.sh: cannot make a network namespace (unshare -rn / -n); skipped" >&2; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
timeout 300 $python -m venv venv
pip() { timeout 600 venv/bin/pip -q --disable-pip-version-check "$@"; }
pip download --no-deps --no-binary :all: -d dl "benchflow==$version"
mkdir src && tar -xzf dl/benchflow-$version.tar.gz -C src
bf=src/benchflow-$version
# benchflow itself (its tests import it) without its model-provider dependencies (litellm, google-cloud-aiplatform),
# which no chosen module imports; then what those modules and the package's import chain need.
pip install pytest pytest-asyncio cryptography pyyaml pydantic 'agent-client-protocol>=0.10' httpx anyio rich \
  packaging tomli-w typer
pip install --no-deps "./$bf"

results=$work/results.txt notlive=$work/notlive.txt
: >"$results"
# benchflow's tests whose every test calls its Python functions (task parsing, Docker/Daytona sandboxes) are not run.
modules="tests/test_egress_denylist.py tests/test_egress_connect_authority.py tests/test_egress_model_gateway.py"
set +e
(cd "$bf" && timeout 900 $netns env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u all_proxy \
  LEASH_BIN="$leash" LEASH_BF_RESULTS="$results" LEASH_BF_NOTLIVE="$notlive" PYTHONPATH="$here" TMPDIR="$work" \
  sh -c 'ip link set lo up && exec "$0" "$@"' \
  "$work/venv/bin/python" -m pytest -p conftest_leash -p no:cacheprovider -q -o addopts= $modules >"$work/pytest.log" 2>&1)
status=$?
set -e
# leash_egress.benchflow, the drop-in for benchflow's egress module (docs/python.md), against this benchflow: the names
# its rollout imports, the constants, the parameters, the agent environment.
api=0
PYTHONPATH="$root/python" "$work/venv/bin/python" "$here/drop_in_api.py" >"$work/api.txt" 2>&1 || api=1
sed 's/^/drop-in: /' "$work/api.txt"
if [ ! -s "$results" ]; then
  echo "run.sh: pytest ran no test (exit $status):" >&2
  tail -40 "$work/pytest.log" >&2
  exit 1
fi
cat "$results"
echo "not about the live filter (deselected, not counted): $(wc -l <"$notlive") tests of these modules, and" \
  "tests/test_egress_denylist_integration.py, tests/test_network_denylist_config.py (not run)"
pass=$(grep -c '^PASS ' "$results" || true) fail=$(grep -c '^FAIL ' "$results" || true)
skip=$(grep -c '^SKIP ' "$results" || true)
echo "benchflow $version against leash: $pass passed, $fail failed, $skip skipped"

# The failures must be exactly the expected ones: `name | reason` lines in expected.txt.
bad=0
expected=$(sed -n 's/^\([^#][^|]*[^ |]\) *|.*/\1/p' "$here/expected.txt")
while read -r word name; do
  listed=0
  grep -qxF -- "$name" <<<"$expected" && listed=1
  if [ "$word" = FAIL ] && [ $listed = 0 ]; then echo "UNEXPECTED FAIL $name" >&2; bad=1; fi
  if [ "$word" = PASS ] && [ $listed = 1 ]; then echo "UNEXPECTED PASS $name (remove it from expected.txt)" >&2; bad=1; fi
done <"$results"
while read -r name; do
  [ -n "$name" ] || continue
  cut -d' ' -f2- "$results" | grep -qxF -- "$name" ||
    { echo "LISTED BUT NOT RUN $name" >&2; bad=1; }
done <<<"$expected"
if [ $bad = 1 ]; then
  echo "run.sh: results differ from tests/benchflow/expected.txt (pytest's output: rerun with LEASH_BF_KEEP=1)" >&2
  [ -n "${LEASH_BF_KEEP:-}" ] && { cp "$work/pytest.log" /tmp/leash-bf-pytest.log; echo "kept /tmp/leash-bf-pytest.log" >&2; }
  exit 1
fi
if [ $api = 1 ]; then
  echo "run.sh: leash_egress.benchflow differs from benchflow's egress module (the DIFFERS lines above)" >&2
  exit 1
fi
echo "run.sh: results as expected.txt says"
