#!/usr/bin/env bash
# Runs the vendored pingora-core's own unit tests on the patched copy
# (vendor/README.md): the patches change its HTTP/1 read and write paths,
# and pingora's 570-odd tests of them are the first safety net. Not part of
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
# Its own workspace (it sits under tokentap's target/), and the workspace's
# lock, which pins every dependency the crate shares with tokentap.
printf '\n[workspace]\n' >> "$work/Cargo.toml"
cp Cargo.lock "$work/Cargo.lock"
cd "$work"
cargo test --lib -- \
  --skip connectors::http::v1::tests::test_connect \
  --skip connectors::http::v1::tests::test_reuse_rejects_fd_mismatch \
  --skip connectors::l4::tests::test_conn_error_addr_not_avail \
  --skip connectors::l4::tests::test_conn_timeout
