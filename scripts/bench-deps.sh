#!/usr/bin/env bash
# Installs what `make bench` compares tokentap with, when missing:
#   nginx, haproxy   Debian/Ubuntu packages (apt)
#   wrk              the independent load generator of S9 (apt)
#   .venv-bench      the LiteLLM proxy (PyPI, litellm[proxy]), pinned
# The smoke variant in `make test` needs none of them. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apt_packages+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || apt_packages+=(haproxy)
command -v wrk >/dev/null 2>&1 || apt_packages+=(wrk)
if [ "${#apt_packages[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bench-deps: installing ${apt_packages[*]} (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
  # The packages start their own servers; the benchmark starts its own.
  for svc in nginx haproxy; do
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || $SUDO pkill -x "$svc" >/dev/null 2>&1 || true
  done
fi

LITELLM_VERSION="${LITELLM_VERSION:-1.80.0}"
if [ ! -x .venv-bench/bin/litellm ]; then
  echo "bench-deps: creating .venv-bench with litellm[proxy]==${LITELLM_VERSION} (pip)"
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --disable-pip-version-check "litellm[proxy]==${LITELLM_VERSION}" || {
    echo "bench-deps: LiteLLM did not install; the benchmark will skip it" >&2
    rm -rf .venv-bench
  }
fi
