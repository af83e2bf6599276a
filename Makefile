# One entry point for humans and CI: `make test` is exactly what CI runs.
CARGO ?= cargo

.PHONY: all deps build test lint unit it demo clean

all: build

deps:
	@./scripts/deps.sh

build: deps
	$(CARGO) build --release --locked

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

# Unit and property tests, then the integration crate (real servers on
# loopback, serialised inside the binary). Built with --release: the timing
# assertions (1 ms accuracy, 5 ms no-coalescing) are about the build users run.
unit: deps
	$(CARGO) test --release --locked --lib --bins

it: deps
	$(CARGO) test --release --locked --test it

test: lint unit it

demo: deps
	$(CARGO) run --release --locked -- demo

clean:
	$(CARGO) clean
	rm -rf .venv
