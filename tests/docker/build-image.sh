#!/usr/bin/env bash
# Builds the image the Docker tests run (`leash-test:latest`) without any registry: downloads Debian packages
# (busybox-static, curl, python3-minimal and what they depend on, Python's standard library, the CA certificates)
# with apt into a private cache, unpacks each with `dpkg-deb -x` into a root filesystem and `docker import`s it.
# Idempotent: does nothing when the image exists (LEASH_TEST_IMAGE_REBUILD=1 forces a rebuild).
# Needs: docker, apt-get, dpkg-deb, ldconfig (a Debian or Ubuntu host whose release the image then matches).
set -euo pipefail

image="${LEASH_TEST_IMAGE:-leash-test:latest}"
if [ -z "${LEASH_TEST_IMAGE_REBUILD:-}" ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-image: $image exists"
  exit 0
fi

# A fresh machine may have no package lists yet.
apt-cache show busybox-static >/dev/null 2>&1 || apt-get update -qq

# Packages resolved with their dependencies, and packages taken alone (their dependencies are either already in the
# list or not needed for what the tests do: Python's pure modules, a PEM bundle).
with_deps=(busybox-static curl python3-minimal)
# More packages for another image (tests/inside.rs: `LEASH_TEST_IMAGE=leash-inside-test:latest
# LEASH_TEST_IMAGE_PACKAGES="nftables iptables"`), each with its dependencies.
read -r -a extra <<<"${LEASH_TEST_IMAGE_PACKAGES:-}"
with_deps+=("${extra[@]}")
alone=(libpython3.11-stdlib ca-certificates)
if ! apt-cache show libpython3.11-stdlib >/dev/null 2>&1; then
  py=$(apt-cache depends python3-minimal | awk '/Depends: python3\.[0-9]+-minimal/ {print $2; exit}')
  alone=("lib${py%-minimal}-stdlib" ca-certificates)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/archives/partial" "$work/state" "$work/root"
touch "$work/state/status"

# An empty dpkg status makes apt fetch the whole dependency closure, not only what this host lacks.
apt_opts=(-o "Dir::State::status=$work/state/status" -o "Dir::Cache::archives=$work/archives"
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get install --download-only -y -qq --no-install-recommends "${apt_opts[@]}" "${with_deps[@]}" >/dev/null
(cd "$work/archives" && apt-get download -qq -o APT::Sandbox::User=root "${alone[@]}")

for deb in "$work"/archives/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
done

root="$work/root"
# busybox supplies the shell and the small tools (sh, sleep, nc, ip, cat...) as symlinks, without replacing a file
# a package shipped.
mkdir -p "$root/bin"
for tool in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$tool" ] || [ -e "$root/usr/bin/$tool" ] || ln -s busybox "$root/bin/$tool"
done
# The dynamic loader finds the libraries through a cache built for this root.
mkdir -p "$root/etc"
# The multiarch directories the packages filled (x86_64-linux-gnu, aarch64-linux-gnu...), then the plain ones.
for dir in "$root"/lib/*-linux-gnu "$root"/usr/lib/*-linux-gnu; do
  [ -d "$dir" ] && echo "${dir#"$root"}"
done >"$root/etc/ld.so.conf"
printf '/lib\n/usr/lib\n' >>"$root/etc/ld.so.conf"
ldconfig -r "$root"
# The names Debian's iptables package leaves to update-alternatives (which `dpkg-deb -x` does not run): the nft
# backend, which the kernel of a container's host has.
for tool in iptables ip6tables; do
  if [ -e "$root/usr/sbin/$tool-nft" ] && [ ! -e "$root/usr/sbin/$tool" ]; then
    ln -s "$tool-nft" "$root/usr/sbin/$tool"
  fi
done
# One PEM bundle where curl, OpenSSL and Python look by default.
mkdir -p "$root/etc/ssl/certs"
cat "$root"/usr/share/ca-certificates/*/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/run" "$root/root"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"

old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
  --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
# A rebuild leaves the previous image untagged: remove it unless a container still uses it.
[ -z "$old" ] || docker rmi "$old" >/dev/null 2>&1 || true
echo "build-image: built $image"
