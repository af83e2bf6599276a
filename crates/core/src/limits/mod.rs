//! Downstream limits: what a tap refuses or cuts before anything reaches
//! the upstream — request heads that arrive too slowly or are too large,
//! more connections or streams than configured, clients that stop reading.
//!
//! The pure parts: the validated limits, why a request was refused, the
//! head-size check here and the request-head deadline's state machine in
//! `scan`. The pingora side (`tokentap_proxy::limits`: connection cap, head
//! deadline, HTTP/2 stream cap; `TapProxy::early_request_filter`: head
//! size, header count, URI length, stream cap, keep-alive and write
//! timeouts) only applies them. Every refusal is counted in
//! `tokentap_rejected_total{reason}`.

pub mod scan;

use std::time::Duration;

/// Validated `timeouts.*` / `limits.*` keys of one tap that face clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLimits {
    /// A request head must be complete this long after its first byte (the
    /// first request of a connection: after the accept).
    pub header_timeout: Duration,
    /// An idle keep-alive connection is closed after this long.
    pub keepalive: Duration,
    /// One write to the client may block this long (a client that stopped
    /// reading is cut).
    pub write_timeout: Duration,
    /// Request line plus headers, in bytes.
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_uri_bytes: usize,
    /// Open client connections per tap.
    pub max_connections: usize,
    /// Requests in flight per tap (`None`: no cap).
    pub max_streams: Option<usize>,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` per connection.
    pub h2_max_streams: u32,
    /// What a connection over `max_connections` gets.
    pub reject: Reject,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            header_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            max_header_bytes: 64 << 10,
            max_headers: 100,
            max_uri_bytes: 16 << 10,
            max_connections: 10_000,
            max_streams: None,
            h2_max_streams: 128,
            reject: Reject::Respond,
        }
    }
}

/// How a connection over the cap is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// `503` with `Retry-After: 1` and `Connection: close`.
    Respond,
    /// Closed without a word (the client sees a reset or EOF).
    Close,
}

crate::names::label_enum! {
    /// Why tokentap refused a request or a connection (label `reason` of
    /// `tokentap_rejected_total`). Bounded.
    pub enum RejectReason {
        HeaderTimeout = "header_timeout",
        HeaderTooLarge = "header_too_large",
        TooManyHeaders = "too_many_headers",
        UriTooLong = "uri_too_long",
        TooManyConnections = "too_many_connections",
        TooManyStreams = "too_many_streams",
        /// A request body not complete within its deadline (the joiner's
        /// OTLP/HTTP receiver).
        BodyTimeout = "body_timeout",
        /// No or the wrong bearer token (the joiner's receivers).
        Unauthorized = "unauthorized",
    }
}

impl RejectReason {
    /// The status a client gets (a timed-out head gets none: the connection
    /// is closed).
    pub fn status(self) -> u16 {
        match self {
            RejectReason::HeaderTimeout => 408,
            RejectReason::HeaderTooLarge | RejectReason::TooManyHeaders => 431,
            RejectReason::UriTooLong => 414,
            RejectReason::TooManyConnections | RejectReason::TooManyStreams => 503,
            RejectReason::BodyTimeout => 408,
            RejectReason::Unauthorized => 401,
        }
    }
}

/// What every listener's connections are held to: a tap's, the admin
/// listener's, the joiner's receivers'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Open connections at most; over it a connection is refused.
    pub max_connections: usize,
    /// A request head must be complete this long after its first byte (the
    /// first request of a connection: after the accept).
    pub header_timeout: Duration,
    /// How a connection over the cap is refused.
    pub reject: Reject,
}

/// A listener's side of its limits, read and reported by whoever hosts it
/// (`tokentap_host::Guarded`): the limits at each accept (a tap's may be
/// reloaded), and what was refused and how many connections are open,
/// counted wherever the listener counts them.
pub trait Admission: Send + Sync + 'static {
    fn limits(&self) -> ListenerLimits;
    /// A connection or request refused.
    fn refused(&self, why: RejectReason);
    /// Open connections went up or down by `delta`.
    fn connections(&self, delta: i64);
}

/// What the size limits look at in a parsed request head, counted as on
/// the wire: the request line (`METHOD SP target SP HTTP/1.1 CRLF`), one
/// `name: value CRLF` per header, and the final CRLF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSize {
    pub uri_bytes: usize,
    pub headers: usize,
    pub bytes: usize,
}

impl HeadSize {
    /// Measures a head from its method, its raw target's length and its
    /// headers' (name, value) lengths.
    pub fn of(
        method: &str,
        uri_bytes: usize,
        headers: impl IntoIterator<Item = (usize, usize)>,
    ) -> Self {
        let line = method.len() + 1 + uri_bytes + 1 + "HTTP/1.1\r\n".len();
        let (mut count, mut bytes) = (0, line + 2);
        for (name, value) in headers {
            count += 1;
            bytes += name + 2 + value + 2;
        }
        HeadSize {
            uri_bytes,
            headers: count,
            bytes,
        }
    }
}

/// Checks a request head against the size limits.
pub fn check_head(head: &HeadSize, limits: &ClientLimits) -> Option<RejectReason> {
    if head.uri_bytes > limits.max_uri_bytes {
        return Some(RejectReason::UriTooLong);
    }
    if head.headers > limits.max_headers {
        return Some(RejectReason::TooManyHeaders);
    }
    (head.bytes > limits.max_header_bytes).then_some(RejectReason::HeaderTooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, headers: &[(&str, String)]) -> HeadSize {
        HeadSize::of(
            "POST",
            path.len(),
            headers.iter().map(|(n, v)| (n.len(), v.len())),
        )
    }

    #[test]
    fn a_normal_head_passes() {
        let r = req(
            "/v1/chat/completions",
            &[("host", "a".into()), ("authorization", "Bearer x".into())],
        );
        assert_eq!(check_head(&r, &ClientLimits::default()), None);
    }

    #[test]
    fn each_limit_is_checked_at_its_boundary() {
        let l = ClientLimits {
            max_uri_bytes: 10,
            max_headers: 2,
            max_header_bytes: 100,
            ..ClientLimits::default()
        };
        assert_eq!(check_head(&req("/123456789", &[]), &l), None);
        assert_eq!(
            check_head(&req("/1234567890", &[]), &l),
            Some(RejectReason::UriTooLong)
        );
        let two = [("a", "1".to_string()), ("b", "2".to_string())];
        assert_eq!(check_head(&req("/", &two), &l), None);
        let three = [
            ("a", "1".to_string()),
            ("b", "2".to_string()),
            ("a", "3".to_string()),
        ];
        assert_eq!(
            check_head(&req("/", &three), &l),
            Some(RejectReason::TooManyHeaders)
        );
        // "POST / HTTP/1.1\r\n" = 17, "x: " + v + "\r\n" = 5 + v, final 2.
        let fits = [("x", "v".repeat(100 - 17 - 5 - 2))];
        assert_eq!(check_head(&req("/", &fits), &l), None);
        let over = [("x", "v".repeat(100 - 17 - 5 - 2 + 1))];
        assert_eq!(
            check_head(&req("/", &over), &l),
            Some(RejectReason::HeaderTooLarge)
        );
    }

    #[test]
    fn reasons_have_distinct_names_and_4xx_5xx_statuses() {
        let names: std::collections::HashSet<_> =
            RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), RejectReason::ALL.len());
        assert!(RejectReason::ALL
            .iter()
            .all(|r| (400..600).contains(&r.status())));
    }
}
