//! How a tokentap program hosts its listeners: the tap process (its taps
//! and its admin listener) and the joiner (its OTLP/HTTP receiver and its
//! admin listener) all go through `serve::Host` — bind (a taken port is an
//! error naming its key), serve on pingora, report when every listener
//! accepts, stop on a signal or a handle — and every listener is held to
//! the same limits (`guard`: a connection cap and a request-head deadline,
//! counted by the listener's `Admission`).
//!
//! Owns: the hosting (`serve`), the connection-level limits (`guard`,
//! `deadline`), TLS for a listener (`tls`), bearer tokens (`auth`), the
//! admin endpoints (`admin`). Must not touch: what a listener serves (a
//! tap's hooks, the joiner's receivers) or what is measured.

pub mod admin;
pub mod auth;
pub mod deadline;
pub mod guard;
pub mod serve;
pub mod tls;

pub use guard::Guarded;
pub use serve::{wait_listening, Host, HostError, Listener, Running, Stop};
