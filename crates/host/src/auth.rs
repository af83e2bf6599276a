//! Bearer tokens: a listener that asks for one (the joiner's receivers,
//! `receiver.auth.bearer_token_file`) takes a request only with
//! `Authorization: Bearer <token>` — what an OpenTelemetry exporter sends
//! with `headers: {authorization: "Bearer ..."}`. Compared in constant
//! time; the token is never logged or echoed (its `Debug` hides it).

use std::path::Path;
use subtle::ConstantTimeEq;

/// A bearer token a listener asks for.
#[derive(Clone)]
pub struct BearerToken(Vec<u8>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// Why a token could not be loaded (never says the token).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the token is empty or has characters a header value cannot carry")]
    Invalid { path: String },
}

impl BearerToken {
    /// The token in `path` (surrounding whitespace, such as a final
    /// newline, trimmed).
    pub fn from_file(path: &Path) -> Result<BearerToken, TokenError> {
        let raw = std::fs::read(path).map_err(|source| TokenError::Read {
            path: path.display().to_string(),
            source,
        })?;
        BearerToken::new(raw.trim_ascii()).ok_or_else(|| TokenError::Invalid {
            path: path.display().to_string(),
        })
    }

    /// A token of visible ASCII (RFC 6750's token68 and then some).
    pub fn new(token: &[u8]) -> Option<BearerToken> {
        let ok = !token.is_empty() && token.iter().all(|b| b.is_ascii_graphic());
        ok.then(|| BearerToken(token.to_vec()))
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some(scheme) = value.get(..7) else {
            return false;
        };
        let Some(given) = value.get(7..) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(given.trim_ascii().ct_eq(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_under_the_bearer_scheme_passes() {
        let t = BearerToken::new(b"s3cret.token").unwrap();
        assert!(t.accepts(Some(b"Bearer s3cret.token")));
        assert!(t.accepts(Some(b"bearer s3cret.token")));
        for bad in [
            &b"Bearer s3cret.tokeN"[..],
            b"Bearer s3cret",
            b"Basic s3cret.token",
            b"s3cret.token",
            b"Bearer ",
            b"",
        ] {
            assert!(!t.accepts(Some(bad)), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(!t.accepts(None));
        assert!(BearerToken::new(b"").is_none());
        assert!(BearerToken::new(b"a b").is_none());
        assert_eq!(format!("{t:?}"), "BearerToken(..)");
    }

    #[test]
    fn a_token_file_is_trimmed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc123\n").unwrap();
        assert!(BearerToken::from_file(&p)
            .unwrap()
            .accepts(Some(b"Bearer abc123")));
        std::fs::write(&p, "\n").unwrap();
        let e = BearerToken::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }
}
