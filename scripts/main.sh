#!/usr/bin/env bash
# Install Sluice on this machine (Debian 12, as root) and run the main job: the quick
# side-by-side benchmark of every priority queue against its baselines.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck disable=SC1091
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

cargo install --locked --quiet --path crates/sluice --root /usr/local --target-dir target --force
echo "installed $(command -v sluice)"
sluice bench queues --quick "$@"
