#!/usr/bin/env bash
# Validates the deployment files without a cluster, an engine or a network
# (`make deploy-check`, part of `make test`):
#   deploy/kubernetes/*.yaml   kubernetes-validate --strict against the pinned
#                              Kubernetes versions (built-in kinds); custom
#                              resources (PodMonitor) against the Prometheus
#                              Operator's CRD schema, strictly (check_deploy.py)
#   drift                      the collector and join.yaml ConfigMaps equal
#                              deploy/otel-collector-fleet.yaml (but for the
#                              resolver) and config/fleet/join.yaml
#   docker-compose.yml         `docker-compose config -q`, default and --profile fleet
#   prometheus-fleet.yml       promtool check config (with its rule files)
#   tap configs, join.yaml     `tokentap validate` on config/fleet/*.yaml and
#                              the tap ConfigMaps, `tokentap join --check` on
#                              config/fleet/join.yaml (its TLS and token files
#                              made with openssl), with the built binary
#                              ($TOKENTAP, default target/shipped/tokentap, `make build`)
# Not checked here: the Collector config's semantics (needs an otelcol-contrib
# binary: `otelcol-contrib validate --config=deploy/otel-collector-fleet.yaml`).
# Installs what it needs into .venv when missing (the versions pinned in
# tests/py/requirements.txt); idempotent, writes only to .venv and a temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest Kubernetes the manifests need (1.30: the preStop `sleep` action
# is on by default) and the newest kubernetes-validate knows.
KUBE_VERSIONS=${KUBE_VERSIONS:-"1.30.0 1.37.0"}
PY=.venv/bin/python
TOKENTAP=${TOKENTAP:-target/shipped/tokentap}

if [ ! -x "$PY" ] || ! "$PY" -c "import kubernetes_validate, cloudcoil.models.prometheus_operator" >/dev/null 2>&1; then
  [ -x "$PY" ] || python3 -m venv .venv
  pins=$(grep -E '^(kubernetes-validate|cloudcoil-models-prometheus-operator)==' tests/py/requirements.txt)
  echo "deploy-check: installing $(echo $pins) into .venv"
  # shellcheck disable=SC2086 # one argument per pin
  .venv/bin/pip install -q --disable-pip-version-check $pins
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Built-in kinds. kubernetes-validate only warns (exit 0) on a kind it has
# no schema for — a CRD, but also a mistyped apiVersion — so every such
# warning fails here unless check_deploy.py validates that kind (step 2).
shopt -s nullglob
manifests=(deploy/kubernetes/*.yaml)
[ "${#manifests[@]}" -gt 0 ] || { echo "deploy-check: no manifests in deploy/kubernetes/"; exit 1; }
args=()
for v in $KUBE_VERSIONS; do args+=(-k "$v"); done
rc=0
.venv/bin/kubernetes-validate --strict --quiet "${args[@]}" "${manifests[@]}" >"$tmp/kv.out" 2>&1 || rc=$?
cat "$tmp/kv.out"
unexpected=$(grep -v -E "^WARN .* Couldn't find schema for kind PodMonitor with api version monitoring\.coreos\.com/v1 " "$tmp/kv.out" || true)
if [ "$rc" -ne 0 ] || [ -n "$unexpected" ]; then
  echo "deploy-check: kubernetes-validate failed (exit $rc; any line above but the PodMonitor schema warnings is a failure)"
  exit 1
fi
n=$(awk '/^kind:/ {n++} END {print n}' "${manifests[@]}")
echo "deploy-check: ${#manifests[@]} manifests ($n resources) valid for Kubernetes $KUBE_VERSIONS (strict); PodMonitor next"

# 2. Custom resources, and the ConfigMaps that copy a file of the repository.
"$PY" scripts/check_deploy.py crds "${manifests[@]}"
"$PY" scripts/check_deploy.py drift

# 3. Compose: the default stack and the fleet profile (no engine needed).
docker-compose -f docker-compose.yml config -q
docker-compose -f docker-compose.yml --profile fleet config -q
echo "deploy-check: docker-compose.yml valid (default and --profile fleet)"

# 4. The fleet's Prometheus config. fleet-rules.yml is written separately:
# until it exists, say so instead of failing.
if ! command -v promtool >/dev/null 2>&1; then
  echo "deploy-check: SKIPPED promtool check config deploy/prometheus/prometheus-fleet.yml (no promtool; make deps installs it)"
elif [ ! -f deploy/prometheus/fleet-rules.yml ]; then
  echo "deploy-check: SKIPPED promtool check config deploy/prometheus/prometheus-fleet.yml (deploy/prometheus/fleet-rules.yml does not exist yet)"
else
  promtool check config deploy/prometheus/prometheus-fleet.yml
fi

# 5. The tap configs and join.yaml, by tokentap itself when it is built
# (compose host names become 127.0.0.1: validate resolves upstreams). The
# ConfigMap tokentap-join equals config/fleet/join.yaml (step 2).
if [ ! -x "$TOKENTAP" ]; then
  echo "deploy-check: $TOKENTAP is not built (make build; make test builds it before this step)"
  exit 1
fi
"$PY" scripts/check_deploy.py configs "$tmp/configs" >"$tmp/configs.txt"
while IFS=$'\t' read -r file origin; do
  if ! out=$("$TOKENTAP" validate -c "$file" 2>&1); then
    echo "$out"; echo "deploy-check: tokentap validate failed for $origin"; exit 1
  fi
  echo "deploy-check: tokentap validate ok: $origin"
done <"$tmp/configs.txt"
# join.yaml's TLS certificate, key and token live where compose and
# Kubernetes mount them (/run/secrets/joiner); here a throwaway set
# stands in, so the check reads and parses real files.
mkdir -p "$tmp/secrets"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=joiner \
  -addext "subjectAltName=DNS:joiner" \
  -keyout "$tmp/secrets/tls.key" -out "$tmp/secrets/tls.crt" 2>/dev/null
openssl rand -hex 32 >"$tmp/secrets/token"
sed "s|/run/secrets/joiner|$tmp/secrets|g" config/fleet/join.yaml >"$tmp/join.yaml"
"$TOKENTAP" join --check -c "$tmp/join.yaml"
echo "deploy-check: ok"
