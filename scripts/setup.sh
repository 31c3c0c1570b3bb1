#!/usr/bin/env bash
# Install what building, running and testing Sluice needs on Debian 12, as root.
# Idempotent: it installs only what is missing, so the other scripts call it every time.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain the repository pins (rust-toolchain.toml).
toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"

packages=()
command -v cc >/dev/null 2>&1 || packages+=(build-essential)
command -v curl >/dev/null 2>&1 || packages+=(curl ca-certificates)
command -v git >/dev/null 2>&1 || packages+=(git)
# The software NIC and its tests and benchmarks: namespaces and qdiscs (iproute2), traffic
# (iperf3, sockperf, ping), and tools to look at it (tcpdump, ethtool).
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
command -v iperf3 >/dev/null 2>&1 || packages+=(iperf3)
command -v sockperf >/dev/null 2>&1 || packages+=(sockperf)
command -v ping >/dev/null 2>&1 || packages+=(iputils-ping)
# sysctl: the demo and `sluice bench dp` tune the namespaces' TCP (absent from minimal images).
command -v sysctl >/dev/null 2>&1 || packages+=(procps)
command -v tcpdump >/dev/null 2>&1 || packages+=(tcpdump)
command -v ethtool >/dev/null 2>&1 || packages+=(ethtool)
if ((${#packages[@]})); then
  echo "setup: installing ${packages[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"
fi

if [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  # rustup-init straight from static.rust-lang.org (where sh.rustup.rs's script fetches it
  # from), checked against its published SHA-256: one host fewer to reach.
  echo "setup: installing the Rust toolchain (rustup, Rust $toolchain)"
  url="https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  tmp="$(mktemp -d)"
  curl --proto '=https' --tlsv1.2 -sSf -o "$tmp/rustup-init" "$url"
  sum="$(curl --proto '=https' --tlsv1.2 -sSf "$url.sha256" | cut -d' ' -f1)"
  echo "$sum  $tmp/rustup-init" | sha256sum --check --quiet -
  chmod +x "$tmp/rustup-init"
  "$tmp/rustup-init" -y --profile minimal --default-toolchain "$toolchain" \
    --component rustfmt,clippy
  rm -rf "$tmp"
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if command -v rustup >/dev/null 2>&1; then
  if ! rustup toolchain list | grep -q "^$toolchain-"; then
    echo "setup: installing Rust $toolchain (rust-toolchain.toml)"
    rustup toolchain install "$toolchain" --profile minimal --component rustfmt,clippy
  fi
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
