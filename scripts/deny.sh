#!/usr/bin/env bash
# Supply chain (`make deny`): licenses, banned crates and sources, then
# security advisories against the RustSec database — the live one where
# github.com is reachable, otherwise the snapshot every developer and CI run
# has in ../shared/rustsec/ (a git bundle). Says which one it used, and its
# date: a snapshot ages.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo deny --locked check --hide-inclusion-graph licenses bans sources

# deny.toml points cargo-deny at target/advisory-dbs; the directory name is
# the one cargo-deny derives from the default database URL.
DB_ROOT=target/advisory-dbs
DB="$DB_ROOT/advisory-db-3157b0e258782691"
SNAPSHOT=../shared/rustsec/advisory-db.bundle
LIVE=https://github.com/RustSec/advisory-db

describe() {
  git -C "$DB" log -1 --format='commit %h of %cs' 2>/dev/null || echo "unknown commit"
}

if timeout 20 git ls-remote -q "$LIVE" HEAD >/dev/null 2>&1; then
  cargo deny --locked check --hide-inclusion-graph advisories
  echo "deny: advisories checked against the live RustSec database ($(describe))"
elif [ -f "$SNAPSHOT" ]; then
  want=$(git bundle list-heads "$SNAPSHOT" | awk '{print $1; exit}')
  have=$(git -C "$DB" rev-parse HEAD 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    rm -rf "$DB"
    mkdir -p "$DB_ROOT"
    git -c init.defaultBranch=main clone -q "$SNAPSHOT" "$DB"
  fi
  cargo deny --locked --offline check --hide-inclusion-graph advisories
  echo "deny: advisories checked against the RustSec snapshot in $SNAPSHOT ($(describe)): the live database is unreachable from this machine"
else
  echo "deny: ADVISORIES NOT CHECKED: the live RustSec database is unreachable and there is no snapshot at $SNAPSHOT" >&2
  exit 1
fi
