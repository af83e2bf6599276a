#!/usr/bin/env bash
# A profile-guided build of the shipped binary (Cargo.toml's `dist`
# profile plus rustc's PGO): an instrumented build, a training run of a
# tap in front of `tokentap sim` (non-streamed requests over keep-alive
# connections, unpaced streams, paced streams held open together: the
# traffic of BENCHMARKS' S9, S2 and S5), then the build that uses it.
#
#     scripts/pgo.sh            # -> target/pgo/tokentap
#
# Needs llvm-profdata of rustc's own LLVM major version (Debian's
# llvm-N; installed here with apt when missing and run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/loopback.sh
triple=$(rustc -vV | sed -n 's/^host: //p')
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=$(command -v "llvm-profdata-$major" || true)
[ -n "$profdata" ] || profdata=/usr/lib/llvm-$major/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "pgo: installing llvm-$major (apt) for llvm-profdata"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "llvm-$major" >/dev/null
  fi
  [ -x "$profdata" ] || { echo "pgo: no llvm-profdata for LLVM $major (Debian: llvm-$major)" >&2; exit 1; }
fi
out=target/pgo
data=$PWD/$out/data
rm -rf "$data"; mkdir -p "$data"
# --target keeps RUSTFLAGS off build scripts and proc macros.
build() { cargo build --profile dist --locked --bin tokentap --target "$triple" --target-dir "$out/$1"; }
echo "pgo: instrumented build"
RUSTFLAGS="-Cprofile-generate=$data" build gen
gen=$out/gen/$triple/dist/tokentap

tmp=$(mktemp -d /tmp/pgo-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
up=$(free_port); tap=$(free_port); admin=$(free_port)
# The simulator's own profile is not wanted: it goes to the scratch dir.
LLVM_PROFILE_FILE=$tmp/sim-%p.profraw "$gen" sim --listen "127.0.0.1:$up" --log warn >/dev/null 2>&1 & pids+=($!)
printf 'admin:\n  listen: 127.0.0.1:%s\nserver:\n  threads: 1\ntaps:\n  - name: train\n    boundary: engine\n    listen: 127.0.0.1:%s\n    upstream: http://127.0.0.1:%s\n' \
  "$admin" "$tap" "$up" > "$tmp/tap.yaml"
LLVM_PROFILE_FILE=$data/tap-%p.profraw "$gen" run -c "$tmp/tap.yaml" --log warn >/dev/null 2>&1 & tap_pid=$!; pids+=($tap_pid)
wait_port "$up"; wait_port "$tap"
echo "pgo: training (non-streamed, unpaced streams, paced streams held open)"
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
ls "$data"/tap-*.profraw >/dev/null 2>&1 || { echo "pgo: the tap wrote no profile" >&2; exit 1; }
"$profdata" merge -o "$out/merged.profdata" "$data"
echo "pgo: optimised build"
RUSTFLAGS="-Cprofile-use=$PWD/$out/merged.profdata" build use
cp "$out/use/$triple/dist/tokentap" "$out/tokentap"
ls -l "$out/tokentap" | awk '{printf "pgo: target/pgo/tokentap, %.1f MB\n", $5 / 1e6}'
