#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: formatting, lints, doc links, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck disable=SC1091
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc (broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
echo "== cargo test"
cargo test --workspace --locked
