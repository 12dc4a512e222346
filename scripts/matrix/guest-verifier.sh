#!/bin/bash
# PID 1 in a kernel-matrix guest booted by verifier_log.py: load gputop's BPF programs one by one with
# the suite's own bcc and keep each refused program's verifier log under /mnt/matrix/out.
M=/mnt/matrix
O=$M/out
mkdir -p "$O"
exec >"$O/guest.log" 2>&1
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
echo "kernel $(uname -r) bcc $(dpkg-query -W -f='${Version}' python3-bpfcc)" > "$O/platform.txt"
shopt -s nullglob
python3 "$M/repo/scripts/matrix/guest_verifier.py" "$M/repo" "$O" "$M/repo/bpf/gputop.bpf.c" "$M"/srcs/*.c
echo $? > "$O/status"
sync
umount "$M" 2>/dev/null
sync
echo o > /proc/sysrq-trigger
sleep 30
