#!/usr/bin/env bash
# A perf profile of tokentap relaying many streams (BENCHMARKS.md, "Where
# the time goes"): builds the profiling binary (symbols, line tables), runs
# `tokentap bench --cells s5` up to 1,024 streams with only tokentap, and
# records core 1 (where the bench pins the system under test) for 12 s
# while the streams run. Writes OUT.data and OUT.txt (by binary, then the
# top symbols by self time, of the tap's own thread). Needs perf and two
# or more CPUs.
#   scripts/profile-streams.sh [OUT]    (default docs/profiles/s5-1024-streams)
# With PROFILE_BIN=path, profiles that binary instead of building one (an
# older build for a before/after pair; a release build's symbols suffice
# for the self-time table). With DRIVER_BIN=path, that binary drives the
# bench instead of a `dist` build (e.g. target/shipped/tokentap, which
# `make build` made: no build at all when both are set).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/profiles/s5-1024-streams}"
command -v perf >/dev/null || { echo "profile-streams: perf is not installed (apt install linux-perf)" >&2; exit 1; }
driver="${DRIVER_BIN:-}"
if [ -z "$driver" ]; then
  cargo build --profile dist --locked --bin tokentap
  driver=./target/dist/tokentap
fi
bin="${PROFILE_BIN:-}"
build="profiling build, $(git rev-parse --short HEAD)"
if [ -z "$bin" ]; then
  cargo build --profile profiling --locked --bin tokentap
  bin=./target/profiling/tokentap
else
  build="$bin"
fi
runs="$(mktemp -d)"
"$driver" bench --systems tokentap --cells s5 --s5-max 1024 --rounds 1 \
  --tokentap "$bin" --out "$runs" > "$runs/results.md" 2> "$runs/bench.err" &
bench=$!
sleep 4
perf record -C 1 -F 999 -g -o "$out.data" -- sleep 12 2> "$runs/perf.err"
wait "$bench"
# `head` closes the reports' pipes early: not a failure.
set +o pipefail
{
  echo "# perf record -C 1 -F 999 -g, 12 s of tokentap bench --systems tokentap --cells s5 --s5-max 1024 --rounds 1"
  echo "# ($build; $(nproc) CPUs; tokentap pinned to core 1)"
  echo "# CPU per event in that run: $(grep '^| tokentap' "$runs/results.md" | awk -F'|' '{print $8}') µs"
  echo "#"
  echo "# core 1 by thread (swapper = idle: the window also covers the steps below 1,024 and the gaps between them):"
  perf report -i "$out.data" --no-children --sort comm --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -3
  echo "#"
  echo "# the tap's thread only ('tap bench'), as shares of its own samples:"
  perf report -i "$out.data" --comms "tap bench" --percentage relative --no-children --sort sym --stdio -g none 2>/dev/null \
    | grep -E "^ +[0-9]" | awk '{gsub("%","",$1); if ($2=="[k]") k+=$1; else u+=$1} END {printf "#   kernel %.1f %%, user space %.1f %%\n", k, u}'
  echo "#"
  echo "# top 60 symbols (self), the tap's thread only:"
  perf report -i "$out.data" --comms "tap bench" --percentage relative --no-children --sort sym --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -60
} > "$out.txt"
rm -rf "$runs"
echo "profile-streams: $out.txt"
