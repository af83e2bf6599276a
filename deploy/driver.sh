#!/bin/sh
# Traffic for the compose demo: several `tokentap drive` loops at once, so that
# every dashboard panel has data within a minute or two (dashboards/README.md).
#   TARGET          the outermost tap: edge -> gw -> gateway -> engine (default http://tokentap:8080)
#   GUARDED_TARGET  the tap in front of the output-guardrail gateway (default http://tokentap:8084)
#   APP_TARGET      the compound tap in front of the reference app (`tokentap app`), if any
#   TOKENTAP        the binary (default tokentap)
# Runs until stopped; each loop starts its driver again when it ends.
set -u
TARGET=${TARGET:-http://tokentap:8080}
GUARDED_TARGET=${GUARDED_TARGET:-http://tokentap:8084}
TT=${TOKENTAP:-tokentap}
drive() { "$TT" drive --log error --request-timeout 120s "$@" >/dev/null 2>&1; }

# 1. Throughput-latency curve, knee, capacity, goodput: a closed-loop
#    concurrency sweep (the engine's --batch-slowdown makes TPOT grow with
#    concurrency); four tenants, zipf-spread, for the fairness panels.
( i=0; while :; do i=$((i + 1))
    drive --url "$TARGET" --workload uniform --concurrency-steps 1,2,4,8 --step-duration 15s \
          --tenants 4 --tenant-spread zipf --seed "$i" || sleep 1
  done ) &

# 2. Prefix cache hits: multi-turn conversations resend their history.
( i=0; while :; do i=$((i + 1))
    drive --url "$TARGET" --workload conversation --rate 0.5 --duration 120s \
          --tenants 3 --model sim-chat --seed "$i" || sleep 1
  done ) &

# 3. Prefix reuse opportunity (code completion over a shared repository
#    context), through the gateway whose output guardrail buffers each answer:
#    buffered streams, output-phase guardrail calls.
( i=0; while :; do i=$((i + 1))
    drive --url "$GUARDED_TARGET" --workload code --rate 0.3 --duration 120s \
          --model sim-code --seed "$i" || sleep 1
  done ) &

# 4. Long-context scaling: inputs from 8k to 32k tokens (TTFT by input bucket, slope).
( i=0; while :; do i=$((i + 1))
    drive --url "$TARGET" --workload long-context --rate 0.15 --duration 120s \
          --max-context 32768 --model sim-long --seed "$i" || sleep 1
  done ) &

# 5. A few stalls, failures and reasoning streams a minute (outcomes, error
#    rate, stalls, visible TTFT): the simulator reads per-request knobs from
#    the x-sim header, which the gateway passes on.
( while :; do
    drive --url "$TARGET" --requests 1 --header "x-sim: fault=stall@20:400" || true
    drive --url "$TARGET" --requests 1 --header "x-sim: fault=reset@10" || true
    drive --url "$TARGET" --requests 1 --header "x-sim: fault=status=429" || true
    drive --url "$TARGET" --requests 1 --header "x-sim: reasoning-tokens=16" || true
    sleep 5
  done ) &

# 6. The reference compound app, when there is one: a vector search, an LLM
#    call answered with a tool call, the MCP tool, the answer streamed (the
#    compound breakdown, MCP and retrieval panels).
if [ -n "${APP_TARGET:-}" ]; then
  ( i=0; while :; do i=$((i + 1))
      drive --url "$APP_TARGET" --rate 1 --duration 120s --model sim-model --seed "$i" || sleep 1
    done ) &
fi

wait
