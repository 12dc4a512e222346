#!/bin/bash
# PID 1 in a kernel-matrix guest (exec'd by the root's /usr/local/sbin/matrix-init), from the run disk
# mounted at /mnt/matrix: set the guest up, install gputop with the README's own set-up, run the checks,
# leave everything under /mnt/matrix/out, power off. Times are the guest's /proc/uptime (seconds since
# its kernel started), in out/times.txt.
# Not PID 1 (vm.py --on-host: the suite's root chroot'd on this machine's kernel, in mount and UTS
# namespaces of its own): no network set-up (the host's), no power-off; /proc, /sys and /dev are the host's.
M=/mnt/matrix
O=$M/out
mkdir -p "$O"
exec >"$O/guest.log" 2>&1
pid1() { [ "$$" = 1 ]; }
stamp() { echo "$1 $(cut -d' ' -f1 /proc/uptime)" >> "$O/times.txt"; }
finish() {
    echo "$1" > "$O/status"
    stamp end
    sync
    if pid1; then
        umount "$M" 2>/dev/null
        sync
        echo o > /proc/sysrq-trigger
        sleep 30
    fi
    exit "$1"
}
stamp userspace
# an arm64 guest runs under full emulation of another architecture (docs/matrix.md): its steps get SLOW
# times the x86-64 guests' time limits
SLOW=1
[ "$(uname -m)" = aarch64 ] && SLOW=4
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# tracefs only: gputop mounts what its bcc reads tracepoints from (debugfs for bcc 0.18) by itself
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
if pid1; then
    mount -t bpf bpf /sys/fs/bpf 2>/dev/null
    mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
    hostname "$(cat /etc/hostname)"
    # QEMU's user network: the guest reaches the mirror and the package index through the host
    # (the initrd's udev names the NIC: ens3 on QEMU's default PCI slot, eth0 without it; where the
    # initrd left its driver unloaded (sid's 7.x), it is loaded here)
    nic=$(ls /sys/class/net | grep -v '^lo$' | head -n1)
    if [ -z "$nic" ]; then
        modprobe virtio_net
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            nic=$(ls /sys/class/net | grep -v '^lo$' | head -n1)
            [ -n "$nic" ] && break
            sleep 0.5
        done
    fi
    ip link set lo up
    ip link set "$nic" up
    ip addr add 10.0.2.15/24 dev "$nic"
    ip route add default via 10.0.2.2
    echo "nameserver 10.0.2.3" > /etc/resolv.conf
fi
{
    echo "kernel $(uname -r)"
    echo "machine $(uname -m)"
    echo "python $(python3 -c 'import platform; print(platform.python_version())')"
    echo "bcc $(dpkg-query -W -f='${Version}' python3-bpfcc)"
    echo "btf $([ -e /sys/kernel/btf/vmlinux ] && echo present || echo absent)"
} > "$O/platform.txt"
cp -a "$M/repo" /opt/gputop
cd /opt/gputop || finish 90
stamp copied

# the README's set-up: ./gputop.sh runs scripts/setup.sh, then gputop; set-up alone first to time it
timeout $((1200 * SLOW)) scripts/setup.sh > "$O/setup.log" 2>&1
echo $? > "$O/setup.rc"
stamp setup
[ "$(cat "$O/setup.rc")" = 0 ] || finish 91
timeout $((600 * SLOW)) ./gputop.sh doctor > "$O/doctor.txt" 2>&1
echo $? > "$O/doctor.rc"
stamp doctor
timeout $((1800 * SLOW)) .venv/bin/python scripts/matrix/guest_checks.py "$O" > "$O/checks.log" 2>&1
rc=$?
stamp checks
# gputop as a package (pipx, uv) on the Debian releases the issue names, 12 and later (sid has no VERSION_ID),
# booted: on this machine's kernel the host's BPF tier would see its gputop
. /etc/os-release
if [ $rc = 0 ] && pid1 && [ "${VERSION_ID:-99}" -ge 12 ]; then
    timeout $((1500 * SLOW)) .venv/bin/python scripts/matrix/guest_package.py "$O" > "$O/package.log" 2>&1 || rc=94
    stamp package
fi
finish $rc
