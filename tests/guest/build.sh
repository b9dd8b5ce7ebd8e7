#!/usr/bin/env bash
# Builds a small Linux guest for the live tests into DIR (default target/guest): Debian's cloud
# kernel (fetched as a package with apt-get download and unpacked, never installed), and a
# busybox initramfs that loads the virtio modules, configures eth0 from the kernel command line
# and runs the test the command line names. It also holds a 16 MiB payload of random bytes and
# its SHA-256 (payload.sha256), for checking what crosses the switch. Reuses what is there.
# Needs apt-get, dpkg-deb, busybox-static and cpio (.ci/run installs them).
set -euo pipefail
out=${1:-target/guest}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# What was built is kept while this script is unchanged.
stamp=$(sha256sum "$0" | cut -d' ' -f1)
if [ -s "$out/vmlinuz" ] && [ -s "$out/initrd.cpio.gz" ] && [ -s "$out/payload.sha256" ] &&
  [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The kernel the cloud metapackage points at.
pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$pkg" ]; then
  apt-get update -q >/dev/null
  pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
fi
[ -n "$pkg" ] || { echo "guest: no linux-image-cloud-amd64 in apt's lists (apt-get update?)" >&2; exit 1; }
(cd "$work" && apt-get download -q "$pkg" >/dev/null 2>&1) || { echo "guest: apt-get download $pkg failed" >&2; exit 1; }
dpkg-deb -x "$work"/"$pkg"_*.deb "$work/k"
kver=${pkg#linux-image-}
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,lib/modules,tmp}
# The guest has no libraries: busybox must be the static build (Debian's busybox-static).
if ldd /bin/busybox >/dev/null 2>&1; then
  echo "guest: /bin/busybox is dynamically linked; install busybox-static" >&2
  exit 1
fi
cp /bin/busybox "$root/bin/busybox"
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net; do
  f=$(find "$work/k/lib/modules/$kver" -name "$m.ko*" | head -1)
  [ -n "$f" ] || { echo "guest: module $m not in $pkg" >&2; exit 1; }
  case "$f" in
    *.ko.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
    *.ko.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
done
head -c $((16 << 20)) /dev/urandom > "$root/payload"
cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net; do
  insmod /lib/modules/$m.ko
done
# From the kernel command line: guest_ip=ADDR/LEN peer=ADDR
for a in $(cat /proc/cmdline); do
  case "$a" in guest_ip=*) ip=${a#guest_ip=} ;; peer=*) peer=${a#peer=} ;; esac
done
ip link set lo up
ip link set eth0 up
ip addr add "$ip" dev eth0
echo "GUEST-UP $(cat /sys/class/net/eth0/address)"
# The virtio-net features negotiated with QEMU (a bit string, bit 0 first): the offloads on.
echo "GUEST-FEATURES $(cat /sys/bus/virtio/devices/*/features | head -1)"
# Wait for the peer (the port attaches when QEMU's tap appears).
n=0
until ping -c 1 -W 1 "$peer" >/dev/null 2>&1; do
  n=$((n + 1)); [ $n -lt 60 ] || { echo "GUEST-FAIL no answer from $peer"; poweroff -f; }
done
echo "GUEST-PING ok"
# Out: the payload to the peer's port 5001 (it checks it). In: 16 MiB from its port 5002.
nc "$peer" 5001 < /payload && echo "GUEST-SENT ok" || echo "GUEST-FAIL send"
nc "$peer" 5002 > /tmp/in && echo "GUEST-RECV $(sha256sum < /tmp/in | cut -d' ' -f1) $(wc -c < /tmp/in)"
echo "GUEST-DONE"
poweroff -f
INIT
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initrd.cpio.gz"
cp "$work/k/boot/vmlinuz-$kver" "$out/vmlinuz"
sha256sum < "$root/payload" | cut -d' ' -f1 > "$out/payload.sha256"
echo "$stamp" > "$out/stamp"
echo "guest: $pkg and a busybox initramfs in $out"
