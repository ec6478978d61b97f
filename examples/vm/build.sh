#!/usr/bin/env bash
# Build a guest for examples/vm/run.sh from Debian packages only: the kernel of `linux-image-amd64` and an initramfs
# holding busybox-static, the virtio modules its NIC needs (in dependency order), curl with its shared libraries,
# and examples/vm/init. Outputs in OUTDIR (default target/vm): vmlinuz, initramfs.gz. Each is rebuilt only when
# missing (the initramfs also when init or this script changed). Exit 3: apt could not provide a package.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../target/vm}
mkdir -p "$out"
out=$(cd "$out" && pwd)
debs=$out/debs
mkdir -p "$debs"
[ -x /usr/bin/curl ] || { echo "build.sh: the guest's client is the host's /usr/bin/curl (apt-get install curl)" >&2; exit 1; }

# apt-get download, quietly; as root without dropping to _apt (which cannot write to $debs).
download() {
  (cd "$debs" && ls "$1"_*.deb >/dev/null 2>&1) && return 0
  (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "$1" >/dev/null) ||
    { echo "build.sh: apt-get download $1 failed (try apt-get update)" >&2; exit 3; }
}

# The image package behind the metapackage, e.g. linux-image-6.1.0-57-amd64.
kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kpkg" ] || { echo "build.sh: linux-image-amd64 not known to apt (apt-get update?)" >&2; exit 3; }
kver=${kpkg#linux-image-}
# The kernel and the modules the NIC needs, each after what it depends on (the `depends=` of each module's
# .modinfo: the package ships no modules.dep, which depmod makes at install time). virtio_mmio for microvm,
# virtio_pci for pc. Only these are kept (the unpacked package is 400 MB).
kdir=$out/kernel-$kver
if [ ! -e "$kdir/vmlinuz" ] || [ ! -s "$kdir/modules/order" ]; then
  download "$kpkg"
  kroot=$debs/kernel
  rm -rf "$kroot" "$kdir" && mkdir -p "$kroot" "$kdir/modules"
  dpkg-deb -x "$debs/${kpkg}"_*.deb "$kroot"
  moddir=$kroot/lib/modules/$kver/kernel
  modpath() { find "$moddir" -name "$1.ko" -o -name "$1.ko.xz" | head -n 1; }
  depends() { tr '\0' '\n' <"$(modpath "$1")" | sed -n 's/^depends=//p' | tr ',' ' '; }
  order=()
  visit() {
    local m=$1 d
    for d in "${order[@]}"; do [ "$d" = "$m" ] && return 0; done
    [ -n "$(modpath "$m")" ] || { echo "build.sh: module $m not in $kpkg" >&2; exit 1; }
    for d in $(depends "$m"); do visit "$d"; done
    order+=("$m")
  }
  for m in virtio_mmio virtio_pci virtio_net; do visit "$m"; done
  for m in "${order[@]}"; do
    f=$(modpath "$m")
    case $f in *.xz) xz -dc "$f" >"$kdir/modules/$m.ko" ;; *) cp "$f" "$kdir/modules/$m.ko" ;; esac
  done
  printf '%s\n' "${order[@]}" >"$kdir/modules/order"
  cp "$kroot/boot/vmlinuz-$kver" "$kdir/vmlinuz"
  rm -rf "$kroot" "$debs/${kpkg}"_*.deb
fi
cmp -s "$kdir/vmlinuz" "$out/vmlinuz" || { cp "$kdir/vmlinuz" "$out/vmlinuz.tmp" && mv "$out/vmlinuz.tmp" "$out/vmlinuz"; }

stamp=$(cat "$0" "$here/init" /usr/bin/curl | sha256sum | cut -c1-16)-$kver
if [ -e "$out/initramfs.gz" ] && [ "$(cat "$out/initramfs.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi

download busybox-static
bb=$debs/busybox
rm -rf "$bb" && mkdir -p "$bb"
dpkg-deb -x "$debs"/busybox-static_*.deb "$bb"

root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc/leash-vm,lib/modules,leash}
cp "$bb/bin/busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 0755 "$here/init" "$root/init"

cp "$kdir"/modules/*.ko "$root/lib/modules/"
cp "$kdir/modules/order" "$root/etc/leash-vm/modules"

# curl (the Debian package on this machine) and the shared libraries it loads, at the same paths.
cp /usr/bin/curl "$root/bin/curl"
for lib in $(ldd /usr/bin/curl | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -6) >"$out/initramfs.gz.tmp"
mv "$out/initramfs.gz.tmp" "$out/initramfs.gz"
echo "$stamp" >"$out/initramfs.stamp"
echo "build.sh: $out/vmlinuz ($kpkg), $out/initramfs.gz (modules: $(tr '\n' ' ' <"$kdir/modules/order"))" >&2
