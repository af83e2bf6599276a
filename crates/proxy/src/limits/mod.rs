//! The pingora side of a tap's client limits (the pure parts, the head
//! scanner and the reasons are `tokentap_core::limits`; the connection cap
//! and the head deadline every listener has are `tokentap_host::guard`):
//! `app::TapAdmission`, the tap's limits and counters for the host. Head
//! size, header count, URI length and the HTTP/2 stream cap are checked in
//! `TapProxy::early_request_filter`.

pub mod app;
