//! The async plumbing that the proxy, the simulator and the tools share,
//! kept apart so that none of them depends on another for it.
//!
//! Owns: `client`, a minimal HTTP/1.1 client that timestamps every read
//! (the tests' and the driver's view of a stream, the engine scraper, the
//! health probe); `rt`, threads that run async code on a runtime of their
//! own, and blocking until a stop signal.
//!
//! Must not touch: measurement (this is the client's side of the wire).

pub mod client;
pub mod rt;
