#!/usr/bin/env bash
# Install Sluice on this machine (Debian 12, as root) and run the main job: `sluice demo`, the
# software NIC shaping three classes of iperf3 traffic between two network namespaces, with a
# live view, then removing everything it created (also on Ctrl-C). Arguments go to the demo
# (for example --duration 60s, or --plain for one frame per second without redrawing).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck disable=SC1091
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

cargo install --locked --quiet --path crates/sluice --root /usr/local --target-dir target --force
echo "installed $(command -v sluice)"
sluice demo "$@"
