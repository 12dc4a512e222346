#!/usr/bin/env bash
# Build (or find cached) a Debian root + ext4 image for one suite of the kernel matrix, run as root.
#   scripts/matrix/build-root.sh SUITE      (bullseye | bookworm | trixie | sid; SUITE-arm64: bookworm-arm64,
#                                            trixie-arm64: Debian's arm64 root and kernel, docs/matrix.md)
# Prints the cache directory holding root.img, vmlinuz, initrd.img, kernel-release and times.txt.
# The root comes from this machine's own apt mirror (read from its apt sources at run time), with
# Debian's cloud kernel, its headers, bcc, python3-venv and gcc, and this machine's CA bundle and pip
# configuration copied in. Cached under $GPUTOP_MATRIX_CACHE (default /var/cache/gputop-matrix)/SUITE/KEY,
# KEY a hash of this recipe: a changed recipe rebuilds; a missing cache is rebuilt.
set -euo pipefail
SUITE=${1:?usage: build-root.sh SUITE}
# SUITE-arm64: the arm64 port of SUITE (debootstrap's second stage runs its arm64 binaries through
# qemu-user-static and binfmt_misc), with the generic arm64 kernel (booted under qemu-system-aarch64 -M virt)
DIST=${SUITE%-arm64}
if [ "$DIST" != "$SUITE" ]; then ARCH=arm64; else ARCH=amd64; fi
CACHE=${GPUTOP_MATRIX_CACHE:-/var/cache/gputop-matrix}
say() { echo "matrix: $*" >&2; }
if [ "$(id -u)" -ne 0 ]; then
    echo "gputop: error: building a matrix root needs root (debootstrap, chroot)" >&2
    echo "hint: run it with sudo" >&2
    exit 77
fi

if [ "$ARCH" = arm64 ]; then KFLAVOUR=arm64; else KFLAVOUR=cloud-amd64; fi
PACKAGES=linux-image-$KFLAVOUR,linux-headers-$KFLAVOUR,bpfcc-tools,python3-bpfcc,python3-venv,gcc,libc6-dev,binutils,ca-certificates,iproute2,kmod,procps
# the recipe: this script and the suite (the mirror is this machine's, not part of the key)
KEY=$( (cat "$0"; echo "$SUITE") | sha256sum | cut -c1-16)
OUT="$CACHE/$SUITE/$KEY"
# one build of a suite at a time (the tier boots suites at once; two runs can share a root): a second
# waits here, then finds the first one's cache
mkdir -p "$CACHE"
exec 9>"$CACHE/$SUITE.lock"
flock 9
if [ -s "$OUT/root.img" ] && [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ] && [ -s "$OUT/kernel-release" ]; then
    echo "$OUT"
    exit 0
fi

# this machine's mirror: the URI of the first deb822 stanza (or sources.list line) that is not -security
mirror=""
if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    mirror=$(awk '
        /^URIs:/ {u=$2}
        /^Suites:/ {s=$0}
        /^$/ { if (u != "" && s !~ /-security/ && m == "") m=u; u=""; s="" }
        END { if (u != "" && s !~ /-security/ && m == "") m=u; print m }' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -r /etc/apt/sources.list ]; then
    mirror=$(awk '$1 == "deb" && $3 !~ /-security/ {print $2; exit}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
    echo "gputop: error: no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list" >&2
    echo "hint: configure apt on this machine first" >&2
    exit 1
fi

if [ "$ARCH" != "$(dpkg --print-architecture)" ] && ! grep -qs '^enabled' "/proc/sys/fs/binfmt_misc/qemu-aarch64"; then
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    if ! grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
        echo "gputop: error: an $ARCH root needs qemu-user-static registered with binfmt_misc (qemu-aarch64)" >&2
        echo "hint: apt-get install qemu-user-static binfmt-support" >&2
        exit 1
    fi
fi
rm -rf "$OUT"
mkdir -p "$OUT" "$CACHE/debs/$SUITE"
WORK="$OUT/root"
t0=$(date +%s.%N)
say "debootstrap $SUITE (log in $OUT/debootstrap.log)"
if ! debootstrap --arch="$ARCH" --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs/$SUITE" \
        "$DIST" "$WORK" "$mirror" >"$OUT/debootstrap.log" 2>&1; then
    tail -n 20 "$OUT/debootstrap.log" >&2
    echo "gputop: error: debootstrap of $SUITE failed" >&2
    echo "hint: see $OUT/debootstrap.log" >&2
    exit 1
fi
t1=$(date +%s.%N)

# apt inside points at the same mirror, with the machine's way of reaching it (its apt configuration
# files that set a proxy, a CA, or switch off the validity checks of a frozen mirror's Release files:
# without them sid's and experimental's, which expire within a week, are refused); the machine's CA
# bundle and pip configuration go in
printf 'deb %s %s main\n' "$mirror" "$DIST" > "$WORK/etc/apt/sources.list"
for conf in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
    if [ -f "$conf" ] && grep -q -E 'Acquire::(Check-Valid-Until|Check-Date|https?::(Proxy|CAInfo|Verify-Peer))' "$conf"; then
        cp "$conf" "$WORK$conf"
    fi
done
if [ -d /usr/local/share/ca-certificates ]; then
    cp -a /usr/local/share/ca-certificates/. "$WORK/usr/local/share/ca-certificates/"
fi
cp /etc/ssl/certs/ca-certificates.crt "$WORK/etc/ssl/certs/ca-certificates.crt"
chroot "$WORK" update-ca-certificates >/dev/null 2>&1 || true
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$WORK/etc/pip.conf"
if [ -d /etc/xdg/pip ]; then mkdir -p "$WORK/etc/xdg"; cp -a /etc/xdg/pip "$WORK/etc/xdg/"; fi
echo "gputop-$SUITE" > "$WORK/etc/hostname"
printf '127.0.0.1 localhost gputop-%s\n' "$SUITE" > "$WORK/etc/hosts"
# PID 1 of the guest (init=): mounts the run's disk (/dev/vdb, ext4: the cloud kernels have no 9p)
# and hands over to the script it carries
cat > "$WORK/usr/local/sbin/matrix-init" <<'INIT'
#!/bin/sh
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /mnt/matrix
mount -t ext4 /dev/vdb /mnt/matrix
[ -x /mnt/matrix/guest-run.sh ] && exec /mnt/matrix/guest-run.sh
echo "matrix-init: no /mnt/matrix/guest-run.sh" >&2
echo o > /proc/sysrq-trigger
INIT
chmod 0755 "$WORK/usr/local/sbin/matrix-init"
rm -rf "$WORK/var/cache/apt/archives/"*.deb

krel=$(basename "$(ls -d "$WORK"/lib/modules/*/ | sort -V | tail -n1)")
cp "$WORK/boot/vmlinuz-$krel" "$OUT/vmlinuz"
cp "$WORK/boot/initrd.img-$krel" "$OUT/initrd.img"
echo "$krel" > "$OUT/kernel-release"

# the image: the root plus 3 GiB for the venv, the BPF cache and the workloads
used_mib=$(du -sm "$WORK" | cut -f1)
size_mib=$((used_mib + 3072))
mkfs.ext4 -q -F -L gputop-root -d "$WORK" "$OUT/root.img.tmp" "${size_mib}M"
mv "$OUT/root.img.tmp" "$OUT/root.img"
t2=$(date +%s.%N)
rm -rf "$WORK"
# roots of an older recipe for this suite go
for old in "$CACHE/$SUITE"/*/; do [ "${old%/}" = "$OUT" ] || rm -rf "$old"; done
printf 'debootstrap_s %.1f\nimage_s %.1f\nmirror_packages %s\n' \
    "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$PACKAGES" > "$OUT/times.txt"
echo "$OUT"
