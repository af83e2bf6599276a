# syntax=docker/dockerfile:1
# tokentap: the measuring proxy — and, in the compose demo, the simulated
# engine (`tokentap sim`), the reference gateway (`tokentap gateway`) and the
# traffic driver (`tokentap drive`): one binary, one image.
#
#   docker build -t tokentap .
#   docker run --rm -v $PWD/config/compose.yaml:/etc/tokentap/config.yaml:ro tokentap

# rust-version in Cargo.toml is the crate's own floor; Cargo.lock needs 1.95
# (parking_lot 0.13 via pingora-lru), the toolchain the project builds with.
FROM rust:1.95-bookworm AS build
# cmake: pingora's zlib-ng build. llvm-22 (bookworm-security): the
# llvm-profdata of rustc 1.95's own LLVM, and python3 for the training's
# clients: the binary is built profile-guided (scripts/pgo.sh).
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake llvm-22 python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so that a source change does not fetch them again
# (cargo reads every member and target of the workspace, hence the empty
# stand-ins).
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/net/Cargo.toml crates/net/
COPY crates/host/Cargo.toml crates/host/
COPY crates/telemetry/Cargo.toml crates/telemetry/
COPY crates/join/Cargo.toml crates/join/
COPY crates/proxy/Cargo.toml crates/proxy/
COPY crates/sim/Cargo.toml crates/sim/
COPY crates/tools/Cargo.toml crates/tools/
# The patched pingora-proxy ([patch.crates-io], vendor/README.md).
COPY vendor ./vendor
RUN for c in core net host telemetry join proxy sim tools; do mkdir -p crates/$c/src && touch crates/$c/src/lib.rs; done \
 && mkdir -p src crates/proxy/benches crates/join/benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs crates/proxy/benches/hot_path.rs \
    crates/proxy/benches/request_body.rs crates/join/benches/store.rs \
 && cargo fetch --locked \
 && rm -rf src crates/*/src crates/proxy/benches crates/join/benches
COPY src ./src
COPY crates ./crates
COPY scripts ./scripts
# An instrumented build, trained as a tap in front of `tokentap sim` on the
# build container's loopback, then the build that uses the profile
# (`make build`, ~13 minutes on 2 cores).
RUN ./scripts/pgo.sh \
 && ./target/shipped/tokentap --version

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tokentap \
 && useradd --system --uid 10001 --gid tokentap --no-create-home --shell /usr/sbin/nologin tokentap
COPY --from=build /src/target/shipped/tokentap /usr/local/bin/tokentap
USER 10001:10001
# Taps (as configured; 8080 by convention) and the admin listener
# (/metrics, /healthz, /readyz, /report).
EXPOSE 8080 9464
# `tokentap health` GETs http://127.0.0.1:9464/readyz: exit 0 on 2xx (no curl
# in the image). Other subcommands (sim, gateway, drive) override or disable it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["tokentap", "health"]
ENTRYPOINT ["tokentap"]
CMD ["run", "--config", "/etc/tokentap/config.yaml"]
