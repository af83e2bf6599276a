//! The headers the hooks read, looked up by names made once: a `HeaderMap`
//! lookup by `&str` parses (and lowercases) the name on every call, a
//! dozen times per request.
//!
//! Owns: the names, and reading a header's bytes or `Content-Length`.
//! Does not own: what a value means (the `Meter`, `tenant_of`).

use http::header::{HeaderMap, HeaderName, AUTHORIZATION, CONTENT_LENGTH};

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
static API_KEY: HeaderName = HeaderName::from_static("api-key");
#[cfg(feature = "fault-injection")]
pub static X_TOKENTAP_FAULT: HeaderName = HeaderName::from_static("x-tokentap-fault");

/// A header's value, as bytes.
pub fn get<'a>(h: &'a HeaderMap, name: &HeaderName) -> Option<&'a [u8]> {
    h.get(name).map(|v| v.as_bytes())
}

/// A header asked for by name (the tenant's): the names tokentap knows
/// without parsing, any other parsed.
pub fn by_name<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    let known = match name {
        "authorization" => Some(&AUTHORIZATION),
        "x-api-key" => Some(&X_API_KEY),
        "api-key" => Some(&API_KEY),
        _ => None,
    };
    match known {
        Some(n) => get(h, n),
        None => h.get(name).map(|v| v.as_bytes()),
    }
}

/// `Content-Length`, when it is one number.
pub fn content_length(h: &HeaderMap) -> Option<u64> {
    get(h, &CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_whatever_case_the_client_sent() {
        let mut h = HeaderMap::new();
        h.insert("X-Request-ID", "r1".parse().unwrap());
        h.insert("X-Api-Key", "k".parse().unwrap());
        h.insert("X-Tenant", "t".parse().unwrap());
        h.insert("Content-Length", " 12 ".parse().unwrap());
        assert_eq!(get(&h, &X_REQUEST_ID), Some(&b"r1"[..]));
        assert_eq!(by_name(&h, "x-api-key"), Some(&b"k"[..]));
        assert_eq!(by_name(&h, "x-tenant"), Some(&b"t"[..]));
        assert_eq!(by_name(&h, "authorization"), None);
        assert_eq!(content_length(&h), Some(12));
    }
}
