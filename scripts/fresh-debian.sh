#!/usr/bin/env bash
# Check the README's two commands on a fresh Debian 12, as root: a minimal bookworm root
# (debootstrap --variant=minbase) in a chroot that shares this machine's kernel, a clean
# clone of this repository's HEAD in it, and then the commands, by default
#   CI=true ./scripts/test.sh && ./scripts/main.sh --plain
# or the ones given as arguments (run by bash in the clone). The chroot's mounts are undone
# on exit; the root stays in DIR (default /var/tmp/sluice-fresh-debian) for a look, and is
# made again from scratch on the next run.
#
#   ./scripts/fresh-debian.sh
#   ./scripts/fresh-debian.sh './scripts/setup.sh && cargo --version'
#   FRESH_DEBIAN_DIR=/srv/deb12 ./scripts/fresh-debian.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
root="${FRESH_DEBIAN_DIR:-/var/tmp/sluice-fresh-debian}"
commands="${*:-CI=true ./scripts/test.sh && ./scripts/main.sh --plain}"

case "$root" in
  / | "" | /usr | /var | /root | /home | /srv | /tmp)
    echo "fresh-debian: FRESH_DEBIAN_DIR must be a directory of its own, not $root" >&2
    exit 1
    ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-debian: run as root (debootstrap, chroot and mounts need it)" >&2
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
}

undo() {
  for m in run dev sys proc; do
    mountpoint -q "$root/$m" && umount -R "$root/$m"
  done
  mountpoint -q "$root" && umount "$root"
  return 0
}
trap undo EXIT
undo
rm -rf "$root"
mkdir -p "$root"
echo "fresh-debian: debootstrap bookworm into $root"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null

# `ip netns` makes the root's mounts slaves, which needs the root to be a mount point.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount -t tmpfs tmpfs "$root/run"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Certificate authorities this machine added itself (a TLS-intercepting proxy's, say): the
# new root must trust what this one does to reach the same hosts.
# (ca-certificates, installed by setup.sh, adds them to the store when it is installed.)
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# git is not in the new root yet: clone from here.
git clone -q "$repo" "$root/root/sluice"

echo "fresh-debian: running in the chroot: $commands"
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -c "cd /root/sluice && $commands"
echo "fresh-debian: passed"
