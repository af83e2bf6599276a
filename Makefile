# One entry point for humans and CI: `make test` is exactly what CI runs.
CARGO ?= cargo

.PHONY: all deps engine build test test-engine lint deploy-check purity deny unit it demo fuzz soak bench clean vendor-test

all: build

deps:
	@./scripts/deps.sh

# The shipped binary, target/shipped/tokentap: Cargo.toml's `dist` profile
# (release with fat LTO and one codegen unit) built profile-guided by
# scripts/pgo.sh: an instrumented build trained as a tap in front of the
# simulator, then the build that uses its profile (~12 minutes cold on 2
# cores, seconds when no source changed; ~21 % fewer instructions per
# streamed event than `dist` alone, BENCHMARKS.md "After M"). `make build
# PGO=0` skips the training.
# Tests and deploy-check build `release`; `make bench` and the Dockerfile
# use this one.
PGO ?= 1
build: deps
	@./scripts/deps.sh pgo
	PGO=$(PGO) ./scripts/pgo.sh

# clippy in the release profile: the proc macros and build scripts (pingora's
# zlib-ng among them) it compiles are the ones the tests then reuse.
lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	./scripts/file-sizes.sh
	python3 scripts/module-cycles.py
	./scripts/vendor-check.sh

# The deployment files, without a cluster or a Docker engine: Kubernetes
# manifests (kubernetes-validate --strict, PodMonitor against the Prometheus
# Operator's CRD schema), the compose file with and without the fleet
# profile, the fleet's Prometheus config, and the tap and join configs with
# the release binary the integration tests build (nothing new to build
# after `make it`; the profile-guided one is `make build`'s, the Dockerfile's
# and the benchmark's).
deploy-check: deps
	$(CARGO) build --release --locked --bin tokentap --test it
	TOKENTAP=target/release/tokentap ./scripts/check-deploy.sh

# The pure core must not reach a socket, a runtime or an exporter: its
# dependency tree (normal and dev) may not contain any of these crates.
IMPURE = pingora|tokio|prometheus|opentelemetry
purity:
	@tree="$$($(CARGO) tree --locked -p tokentap-core -e normal,dev --prefix none)" || exit 1; \
	bad="$$(printf '%s\n' "$$tree" | grep -E '^($(IMPURE))' | sort -u)"; \
	if [ -n "$$bad" ]; then \
	  echo "purity: tokentap-core's tree has crates it must not depend on (crates/core/Cargo.toml):"; \
	  echo "$$bad"; exit 1; \
	fi; \
	echo "purity: tokentap-core's tree ($$(printf '%s\n' "$$tree" | sort -u | wc -l) crates) has no pingora, tokio, prometheus or opentelemetry"

# Unit and property tests, then the integration crate (real servers on
# loopback, serialised inside the binary). Built with --release: the timing
# assertions (1 ms accuracy, 5 ms no-coalescing) are about the build users run.
unit: deps
	$(CARGO) test --release --locked --workspace --lib --bins
	$(CARGO) test --release --locked --doc -p tokentap-telemetry

it: deps engine
	$(CARGO) test --release --locked --test it

# A real engine for it::engine: llama.cpp's llama-server, built (CPU only)
# from the llama.cpp vendored in the llama-cpp-python sdist on PyPI, and a
# tiny random-weight GGUF model (scripts/tiny_gguf.py). Cached in
# .cache/engine/: ~6 minutes cold on 2 cores, nothing when warm.
engine: deps
	@./scripts/engine.sh >/dev/null

# Only the real-engine tests (prints their figures).
test-engine: deps engine
	$(CARGO) test --release --locked --test it engine:: -- --nocapture

# Supply chain: licenses, banned crates, sources, and advisories (the live
# RustSec database where github.com answers, else the snapshot in
# ../shared/rustsec/; scripts/deny.sh says which and its date).
deny: deps
	./scripts/deny.sh

test: lint purity deny unit it deploy-check

# The vendored pingora-core's, pingora-proxy's and pingora-runtime's own
# unit tests on the patched copies (not in CI: their dev-dependencies build
# on the side, ~10 minutes each cold for core and proxy, ~20 s for runtime).
vendor-test:
	./scripts/vendor-test.sh pingora-core
	./scripts/vendor-test.sh pingora-proxy
	./scripts/vendor-test.sh pingora-runtime

# The binary the integration tests build (the same features: right after
# `make test` nothing is compiled again; on a fresh machine this builds the
# test crate too). Its test-only fault hooks act only on a request that
# carries `x-tokentap-fault`, which the demo's traffic never does.
demo: deps
	$(CARGO) build --release --locked --bin tokentap --test it
	./target/release/tokentap demo

# libFuzzer on each target for FUZZ_SECONDS (needs a nightly toolchain;
# cargo-fuzz is installed when missing). The committed seeds in
# fuzz/corpus/<target>/ are read, new inputs go to fuzz/target/corpus/
# (not committed); crashes land in fuzz/artifacts/ — add them to the seeds
# once fixed.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = sse classify request meter chunked otlp
fuzz: deps
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  mkdir -p fuzz/target/corpus/$$t; \
	  (cd fuzz && $(CARGO) +nightly fuzz run $$t target/corpus/$$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=1024 -print_final_stats=1) || exit 1; \
	done

# The full soak (not in CI): 2,000 concurrent slow streams for 2 minutes
# through a tokentap process, RSS and fds sampled every 5 s. `make test`
# runs the same test at 300 streams for 20 s.
SOAK_STREAMS ?= 2000
SOAK_SECONDS ?= 120
soak: deps
	TOKENTAP_SOAK_STREAMS=$(SOAK_STREAMS) TOKENTAP_SOAK_SECONDS=$(SOAK_SECONDS) \
	  $(CARGO) test --release --locked --test it soak -- --nocapture

# The side-by-side benchmark (not in CI; ~15 minutes): tokentap, tokentap
# with measurement off, nginx, HAProxy and LiteLLM in front of the same
# simulator, interleaved rounds, systems pinned to core 1. Results in
# bench-results/run-*/ (results.json, results.md); BENCHMARKS.md keeps the
# latest full run. BENCH_ARGS passes options (`--rounds 3`, `--systems ...`).
BENCH_ARGS ?=
bench: build
	@./scripts/bench-deps.sh
	./target/shipped/tokentap bench $(BENCH_ARGS)

clean:
	$(CARGO) clean
	rm -rf .venv .venv-compound
