#!/usr/bin/env bash
# Runs a vendored crate's own unit tests on the patched copy (default
# pingora-core; vendor/README.md): the patches change its HTTP/1 read and
# write paths, and pingora's 570-odd tests of them are the first safety
# net; pingora-proxy's hold the direct relay's own. Not part of
# `make test`: the crate is outside the workspace, so its dev-dependencies
# (hyper, reqwest, criterion, ...) are fetched and built on the side, in
# target/vendor-test/ (~10 minutes cold on 2 cores). Four tests that need
# the internet (1.1.1.1, 192.0.2.0/24) are skipped.
#   scripts/vendor-test.sh [CRATE]    (default pingora-core)
set -euo pipefail
cd "$(dirname "$0")/.."
crate="${1:-pingora-core}"
work="target/vendor-test/$crate"
rm -rf "$work/src"
mkdir -p "$work"
cp -r "vendor/$crate/." "$work/"
# Its own workspace (it sits under tokentap's target/), built against the
# other patched crates as tokentap is (pingora-proxy's patches call
# pingora-core's), and the workspace's lock, which pins every dependency
# the crate shares with tokentap.
printf '\n[workspace]\n\n[patch.crates-io]\n' >> "$work/Cargo.toml"
for other in vendor/*.sha256; do
  other="$(basename "$other" .sha256)"
  [ "$other" = "$crate" ] || printf '%s = { path = "%s" }\n' "$other" "$PWD/vendor/$other" >> "$work/Cargo.toml"
done
cp Cargo.lock "$work/Cargo.lock"
cd "$work"
[ "$crate" = pingora-core ] || exec cargo test --lib
cargo test --lib -- \
  --skip connectors::http::v1::tests::test_connect \
  --skip connectors::http::v1::tests::test_reuse_rejects_fd_mismatch \
  --skip connectors::l4::tests::test_conn_error_addr_not_avail \
  --skip connectors::l4::tests::test_conn_timeout
