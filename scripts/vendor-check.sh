#!/usr/bin/env bash
# Checks that every vendored crate under vendor/ is the published crate plus
# exactly the patches in vendor/patches/: the patches are taken off a copy
# (in reverse order) and every file must then match the published crate's
# checksums (vendor/<crate>.sha256, recorded from the crates.io source), with
# no file more or less. Works offline.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for manifest in vendor/*.sha256; do
  crate="$(basename "$manifest" .sha256)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cp -r "vendor/$crate" "$tmp/$crate"
  mapfile -t patches < <(ls vendor/patches/"$crate"-*.patch 2>/dev/null | sort -r)
  for p in "${patches[@]}"; do
    if ! patch -s -R -p1 --no-backup-if-mismatch -d "$tmp/$crate" < "$p"; then
      echo "vendor-check: $p does not come off vendor/$crate cleanly" >&2
      status=1
    fi
  done
  if ! (cd "$tmp/$crate" && sha256sum --quiet -c "$OLDPWD/$manifest"); then
    echo "vendor-check: vendor/$crate differs from the published crate beyond its patches" >&2
    status=1
  fi
  have="$(cd "$tmp/$crate" && find . -type f | LC_ALL=C sort)"
  want="$(awk '{print $2}' "$manifest")"
  if [ "$have" != "$want" ]; then
    echo "vendor-check: vendor/$crate has files the published crate does not (or lacks some):" >&2
    diff <(echo "$want") <(echo "$have") >&2 || true
    status=1
  fi
  rm -rf "$tmp"
  trap - EXIT
  [ "$status" -eq 0 ] && echo "vendor-check: vendor/$crate = the published crate + ${#patches[@]} patch(es)"
done
exit "$status"
