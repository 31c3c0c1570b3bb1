#!/usr/bin/env bash
# Install what building, running and testing Sluice needs on Debian 12, as root.
# Idempotent: it installs only what is missing, so the other scripts call it every time.
set -euo pipefail

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
  echo "setup: installing the Rust toolchain (rustup, stable)"
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal --default-toolchain stable --component rustfmt,clippy
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
