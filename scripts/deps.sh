#!/usr/bin/env bash
# Installs what building and testing tokentap needs and is missing:
#   cmake      pingora's zlib-ng build, and llama.cpp's (Debian/Ubuntu: apt)
#   patch      scripts/vendor-check.sh takes vendor/patches/ off a copy (make lint)
#   g++        llama.cpp's server, the real engine of it::engine (scripts/engine.sh)
#   promtool   `promtool check metrics` in the tests (Debian/Ubuntu: package prometheus)
#   nginx      a real gateway hop between two taps in the attribution tests
#   haproxy    the coalescing middlebox of the benchmark's accuracy-cell test
#   docker-compose  validates docker-compose.yml (`config -q` needs no engine)
#   strace     counts a tap's system calls per streamed event (it::syscalls)
#   faketime   libfaketime: a tap whose wall clock steps mid-stream (it::clock)
#   openssl    a throwaway certificate for join.yaml's TLS in make deploy-check
#   chromium   headless check that the HTML report opens without console errors
#   llvm-N     llvm-profdata of rustc's own LLVM major N, for the profile-guided
#              shipped build (scripts/pgo.sh, `make build`): only with the
#              argument `pgo` (`make build`), not for the tests
#   .venv      the official `openai`, `anthropic`, `ollama` and `huggingface_hub` Python clients for the real-client tests,
#              `kubernetes-validate` and the Prometheus Operator's CRD models for `make deploy-check` (pip)
#   .venv-compound  the compound system's real components for the tool, retrieval
#              and agent tests: the official MCP SDK, the OpenAI Agents SDK and
#              Chroma (pip; a venv of its own: Chroma's dependencies are many)
#   cargo-deny licenses, bans and sources of the dependency tree (cargo install)
# Idempotent: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=()
command -v cmake >/dev/null 2>&1 || apt_packages+=(cmake)
command -v g++ >/dev/null 2>&1 || apt_packages+=(g++)
command -v patch >/dev/null 2>&1 || apt_packages+=(patch)
command -v promtool >/dev/null 2>&1 || apt_packages+=(prometheus)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apt_packages+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || apt_packages+=(haproxy)
command -v docker-compose >/dev/null 2>&1 || apt_packages+=(docker-compose)
command -v strace >/dev/null 2>&1 || apt_packages+=(strace)
command -v faketime >/dev/null 2>&1 || apt_packages+=(faketime)
command -v openssl >/dev/null 2>&1 || apt_packages+=(openssl)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || apt_packages+=(chromium)
if [ "${#apt_packages[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "deps: installing ${apt_packages[*]} (apt)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
    # The packages start servers; the tests start their own.
    for svc in prometheus nginx haproxy; do
      if [[ " ${apt_packages[*]} " == *" ${svc}"* ]]; then
        $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || $SUDO pkill -x "$svc" >/dev/null 2>&1 || true
      fi
    done
  else
    echo "deps: please install: ${apt_packages[*]} (cmake for the build; patch for make lint; promtool from Prometheus, nginx, haproxy, docker-compose, strace, faketime and chromium for the tests)" >&2
    exit 1
  fi
fi

# llvm-profdata of rustc's own LLVM, for the profile-guided `make build`:
# apart from the rest, so that a system without that package (Debian
# bookworm has llvm-22 in bookworm-security) still gets the tests, and
# scripts/pgo.sh says what is missing (or `make build PGO=0`).
llvm=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
if [ "${1:-}" = pgo ] && [ -n "$llvm" ] && ! command -v "llvm-profdata-$llvm" >/dev/null 2>&1 && [ ! -x "/usr/lib/llvm-$llvm/bin/llvm-profdata" ] \
   && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing llvm-$llvm (apt) for llvm-profdata"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "llvm-$llvm" >/dev/null \
    || echo "deps: llvm-$llvm did not install; make build needs it (PGO=0 builds without)" >&2
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import openai, anthropic, ollama, huggingface_hub, kubernetes_validate, cloudcoil.models.prometheus_operator" >/dev/null 2>&1; then
  echo "deps: creating .venv with the openai, anthropic, ollama and huggingface_hub clients, kubernetes-validate and the PodMonitor schema"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r tests/py/requirements.txt
fi

if [ ! -x .venv-compound/bin/python ] || ! .venv-compound/bin/python -c "import mcp, agents, chromadb" >/dev/null 2>&1; then
  echo "deps: creating .venv-compound with the MCP SDK, the OpenAI Agents SDK and Chroma"
  python3 -m venv .venv-compound
  .venv-compound/bin/pip install -q --disable-pip-version-check -r tests/py/compound-requirements.txt
fi

# cargo-deny: the supply-chain check in `make test` (licenses, bans, sources).
if ! cargo deny --version >/dev/null 2>&1; then
  echo "deps: installing cargo-deny (cargo install, a few minutes)"
  cargo install --locked -q cargo-deny@0.20.2
fi
