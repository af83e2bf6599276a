#!/usr/bin/env bash
# House rule (ARCHITECTURE.md): small files. Fails if a non-test Rust source
# file has more than MAX lines, or if the median exceeds MEDIAN; prints both.
# Test files (tests.rs, *_tests.rs, tests/) are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX=${MAX:-500}
MEDIAN=${MEDIAN:-200}
mapfile -t counts < <(find crates src -name '*.rs' ! -name 'tests.rs' ! -name '*_tests.rs' ! -path '*/tests/*' -print0 \
  | xargs -0 wc -l | grep -v ' total$' | sort -n)
n=${#counts[@]}
median=$(printf '%s\n' "${counts[@]}" | awk -v n="$n" 'NR == int((n + 1) / 2) {print $1}')
largest=$(printf '%s\n' "${counts[@]}" | tail -n 1)
echo "file sizes: $n source files, median $median lines, largest $largest"
over=$(printf '%s\n' "${counts[@]}" | awk -v max="$MAX" '$1 > max')
if [ -n "$over" ]; then
  echo "file sizes: over $MAX lines (split them):"; echo "$over"; exit 1
fi
if [ "$median" -gt "$MEDIAN" ]; then
  echo "file sizes: the median is over $MEDIAN lines"; exit 1
fi
