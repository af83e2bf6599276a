//! Which tenant a request belongs to, for the fairness analysis: a
//! configured header's value, or a hash of the API key — never the key.
//! Values are capped and printable, so they can be label values (the
//! analyses fold all but the top K into `other`).

use super::TenantSource;
use crate::hash::StableHasher;

/// Longest header value kept as a tenant name.
pub const MAX_TENANT: usize = 64;

fn short_hash(prefix: &str, bytes: &[u8]) -> String {
    let mut h = StableHasher::new();
    h.raw(b"tokentap-tenant").raw(bytes);
    // `format!("{prefix}{:012x}", ..)`, without the formatting machinery
    // (a third of a request's measuring outside the JSON parses).
    let hash = h.finish() >> 16;
    let mut out = String::with_capacity(prefix.len() + 12);
    out.push_str(prefix);
    for shift in (0..12).rev() {
        let digit = ((hash >> (4 * shift)) & 0xf) as u32;
        out.push(char::from_digit(digit, 16).unwrap_or('0'));
    }
    out
}

/// The tenant of a request from its headers (`get(name)` returns a header's
/// value). `None` when the request carries none.
pub fn tenant_of<'a>(
    source: &TenantSource,
    get: impl Fn(&str) -> Option<&'a [u8]>,
) -> Option<String> {
    match source {
        TenantSource::Header(name) => {
            let v = get(name)?;
            let v = v.trim_ascii();
            if v.is_empty() {
                None
            } else if v.len() <= MAX_TENANT && v.iter().all(|b| b.is_ascii_graphic()) {
                std::str::from_utf8(v).ok().map(str::to_owned)
            } else {
                Some(short_hash("h-", v))
            }
        }
        TenantSource::ApiKey => {
            let key = get("authorization")
                .map(|v| {
                    let v = v.trim_ascii();
                    match v.get(..7) {
                        Some(p) if p.eq_ignore_ascii_case(b"bearer ") => {
                            v.get(7..).unwrap_or_default().trim_ascii()
                        }
                        _ => v,
                    }
                })
                .or_else(|| get("x-api-key"))
                .or_else(|| get("api-key"))
                .filter(|k| !k.is_empty())?;
            Some(short_hash("k-", key))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_hash_is_the_prefix_and_twelve_hex_digits() {
        for key in [&b""[..], b"sk-1", b"a much longer key than twelve digits"] {
            let mut h = StableHasher::new();
            h.raw(b"tokentap-tenant").raw(key);
            assert_eq!(
                short_hash("k-", key),
                format!("k-{:012x}", h.finish() >> 16)
            );
        }
    }

    fn headers<'a>(h: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a [u8]> + 'a {
        move |name| {
            h.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_bytes())
        }
    }

    #[test]
    fn api_keys_are_hashed_never_kept() {
        let a = tenant_of(
            &TenantSource::ApiKey,
            headers(&[("authorization", "Bearer sk-secret-1")]),
        );
        let b = tenant_of(
            &TenantSource::ApiKey,
            headers(&[("x-api-key", "sk-secret-1")]),
        );
        let c = tenant_of(
            &TenantSource::ApiKey,
            headers(&[("authorization", "Bearer sk-secret-2")]),
        );
        let a = a.unwrap();
        assert!(a.starts_with("k-") && a.len() == 14);
        assert!(!a.contains("secret"));
        assert_eq!(Some(a.clone()), b, "same key, same tenant");
        assert_ne!(Some(a), c);
        assert_eq!(tenant_of(&TenantSource::ApiKey, headers(&[])), None);
    }

    #[test]
    fn header_values_are_capped_and_printable() {
        let src = TenantSource::Header("x-tenant".into());
        assert_eq!(
            tenant_of(&src, headers(&[("x-tenant", " team-a ")])).as_deref(),
            Some("team-a")
        );
        let long = "x".repeat(100);
        let t = tenant_of(&src, headers(&[("x-tenant", &long)])).unwrap();
        assert!(t.starts_with("h-") && t.len() == 14);
        assert_eq!(
            tenant_of(&src, headers(&[("x-tenant", "a b")]))
                .unwrap()
                .len(),
            14
        );
        assert_eq!(tenant_of(&src, headers(&[])), None);
    }
}
