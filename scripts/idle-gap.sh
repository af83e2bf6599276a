#!/usr/bin/env bash
# What a streamed request costs a relay when it comes after idle time, as
# S2's requests at concurrency 1 do: tokentap (measure on and off) and
# nginx side by side, each pinned to core 1 with one worker, the client
# (scripts/burst-streams.py) on core 0, `tokentap sim` unpinned.
#
#     scripts/idle-gap.sh [BIN] [STREAMS] [GAP_MS...]
#     scripts/idle-gap.sh target/shipped/tokentap 400 0 10 50
#
# Prints, per system and gap, the CPU per stream (every thread, from
# schedstat) and the client's first-event p50. Back to back (gap 0) the
# caches are hot; with a gap the other work on the core evicts them.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/loopback.sh
bin=${1:-target/shipped/tokentap}; n=${2:-400}; shift $(($# < 2 ? $# : 2))
if [ $# -eq 0 ]; then gaps=(0 10 50); else gaps=("$@"); fi
tmp=$(mktemp -d /tmp/idle-gap-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
up=$(free_port)
"$bin" sim --listen "127.0.0.1:$up" --log warn >/dev/null 2>&1 & pids+=($!)
wait_port "$up"
declare -A listen proc
for m in on off; do
  p=$(free_port); a=$(free_port); measure=$([ $m = on ] && echo true || echo false)
  printf 'admin:\n  listen: 127.0.0.1:%s\nserver:\n  threads: 1\ntaps:\n  - name: gap\n    boundary: engine\n    listen: 127.0.0.1:%s\n    upstream: http://127.0.0.1:%s\n    measure: %s\n' \
    "$a" "$p" "$up" "$measure" > "$tmp/$m.yaml"
  taskset -c 1 "$bin" run -c "$tmp/$m.yaml" --log warn >/dev/null 2>&1 & pids+=($!)
  listen[tokentap-$m]=$p; proc[tokentap-$m]=$!
done
p=$(free_port)
cat > "$tmp/nginx.conf" <<CONF
worker_processes 1; master_process off; daemon off; pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $tmp/nb; proxy_temp_path $tmp/np;
  fastcgi_temp_path $tmp/nf; uwsgi_temp_path $tmp/nu; scgi_temp_path $tmp/ns;
  upstream up { server 127.0.0.1:$up; keepalive 64; }
  server {
    listen 127.0.0.1:$p;
    location / { proxy_pass http://up; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; }
  }
}
CONF
taskset -c 1 "$(command -v nginx || echo /usr/sbin/nginx)" -c "$tmp/nginx.conf" 2>/dev/null & pids+=($!)
listen[nginx]=$p; proc[nginx]=$!
for s in tokentap-on tokentap-off nginx; do wait_port "${listen[$s]}"; done
echo "idle-gap: $bin, $n streams per cell; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for g in "${gaps[@]}"; do
  for s in tokentap-on tokentap-off nginx; do
    # a warm-up, then the measured streams
    taskset -c 0 scripts/burst-streams.py "127.0.0.1:${listen[$s]}" 50 "${proc[$s]}" >/dev/null
    printf '%-13s ' "$s"
    taskset -c 0 scripts/burst-streams.py "127.0.0.1:${listen[$s]}" "$n" "${proc[$s]}" --gap-ms "$g"
  done
done
