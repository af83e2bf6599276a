//! The pingora side of the client limits (the pure parts, the head scanner
//! and the reasons are `tokentap_core::limits`): `app::GuardedApp` (the
//! connection cap, the request-head deadline, the HTTP/2 stream cap) and
//! `stream::HeadDeadline` (the accepted stream wrapped so a late head fails
//! the read). Head size, header count, URI length and the stream cap are
//! checked in `TapProxy::early_request_filter`.

pub mod app;
pub mod stream;
