#!/usr/bin/env bash
# The shipped binary (`make build`, the Dockerfile): Cargo.toml's `dist`
# profile (fat LTO, one codegen unit) built profile-guided. An instrumented
# build, a training run of a tap in front of `tokentap sim` (non-streamed
# requests over keep-alive connections, unpaced streams, paced streams held
# open together: the traffic of BENCHMARKS' S9, S2 and S5), then the build
# that uses the profile: ~21 % fewer instructions per streamed event and
# ~23 % per request than `dist` alone (BENCHMARKS.md, "After M").
#
#     scripts/pgo.sh            # -> target/shipped/tokentap
#     PGO=0 scripts/pgo.sh      # the plain `dist` build, copied there
#
# Needs llvm-profdata of rustc's own LLVM major version (Debian's llvm-N,
# which scripts/deps.sh installs). Each build has its own target dir under
# target/pgo/, so neither mixes with a plain `cargo build --profile dist`.
# The profile is named after the instrumented binary it came from and the
# training's scripts: when neither changed (cargo had nothing to rebuild),
# the profile is reused and the run takes a second; when one did, the new
# name is a new RUSTFLAGS, so cargo builds the optimised binary again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/loopback.sh
shipped=target/shipped/tokentap
mkdir -p "$(dirname "$shipped")"

if [ "${PGO:-1}" = 0 ]; then
  cargo build --profile dist --locked --bin tokentap
  cp target/dist/tokentap "$shipped"
  echo "pgo: PGO=0, $shipped is the plain dist build"
  exit 0
fi

triple=$(rustc -vV | sed -n 's/^host: //p')
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=$(command -v "llvm-profdata-$major" || true)
[ -n "$profdata" ] || profdata=/usr/lib/llvm-$major/bin/llvm-profdata
[ -x "$profdata" ] || {
  echo "pgo: no llvm-profdata for rustc's LLVM $major (Debian: apt install llvm-$major; make deps does);" \
       "PGO=0 builds without a profile" >&2
  exit 1
}
out=target/pgo
data=$PWD/$out/data
# --target keeps RUSTFLAGS off build scripts and proc macros.
build() { cargo build --profile dist --locked --bin tokentap --target "$triple" --target-dir "$out/$1"; }
echo "pgo: instrumented build"
RUSTFLAGS="-Cprofile-generate=$data" build gen
gen=$out/gen/$triple/dist/tokentap
# The profile's key: the instrumented binary and the training that runs it.
training=(scripts/pgo.sh scripts/request-cost.py scripts/burst-streams.py scripts/hold-streams.py)
profile=$PWD/$out/tokentap-$(cat "$gen" "${training[@]}" | sha256sum | cut -c1-16).profdata
# The training: a tap built instrumented, in front of the simulator, for
# the benchmark's traffic; its profile is merged into $profile.
train() {
  rm -rf "$data"; mkdir -p "$data"
  tmp=$(mktemp -d /tmp/pgo-XXXXXX)
  pids=()
  cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
  trap cleanup EXIT
  up=$(free_port); tap=$(free_port); admin=$(free_port)
  # The simulator's own profile is not wanted: it goes to the scratch dir.
  LLVM_PROFILE_FILE=$tmp/sim-%p.profraw "$gen" sim --listen "127.0.0.1:$up" --log warn >/dev/null 2>&1 & sim_pid=$!; pids+=($sim_pid)
  printf 'admin:\n  listen: 127.0.0.1:%s\nserver:\n  threads: 1\ntaps:\n  - name: train\n    boundary: engine\n    listen: 127.0.0.1:%s\n    upstream: http://127.0.0.1:%s\n' \
    "$admin" "$tap" "$up" > "$tmp/tap.yaml"
  LLVM_PROFILE_FILE=$data/tap-%p.profraw "$gen" run -c "$tmp/tap.yaml" --log warn >/dev/null 2>&1 & tap_pid=$!; pids+=($tap_pid)
  wait_port "$up"; wait_port "$tap"
  echo "pgo: training (non-streamed, unpaced streams, paced streams held open)"
  started=$SECONDS
  python3 - "$tap" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("cost", "scripts/request-cost.py")
cost = importlib.util.module_from_spec(spec); spec.loader.exec_module(cost)
port = int(sys.argv[1])
cost.send(port, 20000, False)   # S9's request: 16 tokens at once
cost.send(port, 200, True)      # 64 events, 2 ms apart: a read per event
PY
  scripts/burst-streams.py "127.0.0.1:$tap" 2000 "$tap_pid" >/dev/null
  scripts/hold-streams.py "127.0.0.1:$tap" 256 3 "$tap_pid" >/dev/null
  # A graceful stop: the profile is written as the process exits.
  kill -TERM "$tap_pid"; wait "$tap_pid" || true
  pids=("$sim_pid")   # the tap was reaped: its pid may be reused
  ls "$data"/tap-*.profraw >/dev/null 2>&1 || { echo "pgo: the tap wrote no profile" >&2; exit 1; }
  echo "pgo: trained in $((SECONDS - started)) s"
  # The simulator and the scratch dir go now, not after the long build.
  cleanup; trap - EXIT
  rm -f "$out"/tokentap-*.profdata "$out"/tokentap-*.profdata.part
  # Merged aside, then renamed: a cut-off merge leaves no profile to reuse.
  "$profdata" merge -o "$profile.part" "$data"
  mv "$profile.part" "$profile"
}
if [ -s "$profile" ]; then
  echo "pgo: neither the instrumented binary nor its training changed: the profile is reused"
else
  train
fi
echo "pgo: optimised build"
RUSTFLAGS="-Cprofile-use=$profile" build use
cp "$out/use/$triple/dist/tokentap" "$shipped"
ls -l "$shipped" | awk '{printf "pgo: target/shipped/tokentap, %.1f MB, profile-guided\n", $5 / 1e6}'
