//! tokentap's pure measuring core: bytes and instants in, values out.
//!
//! Owns: the decoders and their shared event vocabulary (`decode`), one
//! request's measuring state machine and its record (`record`), W3C trace
//! context (`trace`), usage injection's pure parts (`inject`), the ten
//! methodology analyses (`analysis`), the correlator's join and attribution
//! (`correlate`), the canonical metric table (`table`) and its typed label
//! sets (`labels`), the client limits' head scanner and reasons (`limits`),
//! the stable hash of every value that leaves the process (`hash`), an OTLP
//! trace export read with bounded work (`otlp`), and the fuzzing entry
//! points.
//!
//! Must not touch: sockets, runtimes, clocks (every instant is an
//! argument), exporters. This crate's manifest has no pingora, tokio,
//! prometheus or opentelemetry dependency, and `make test` fails if one
//! appears in `cargo tree -p tokentap-core`.

// Tests build their inputs with the clock; the library itself may not
// (crates/core/clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod analysis;
pub mod calls;
pub mod chunked;
pub mod correlate;
pub mod decode;
#[doc(hidden)]
pub mod fuzzing;
pub mod hash;
pub mod inject;
pub mod labels;
pub mod limits;
pub mod links;
pub mod names;
pub mod otlp;
pub mod record;
pub mod table;
pub mod tap;
pub mod trace;
