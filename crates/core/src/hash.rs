//! The one hash whose values leave the process: request fingerprints (the
//! joiner compares those of taps on other machines, built by other
//! toolchains), prompt-prefix hashes (a record log read by another build)
//! and tenant ids (summed across a fleet's taps in Prometheus).
//!
//! Specified, so the same input gives the same value on every build and
//! platform: XXH3-64 (seed 0) over a byte string framed by the methods
//! below — a `field` is its length as a little-endian u64, then its bytes;
//! a `tag` is one byte; `raw` bytes are written as they are (no framing:
//! text cut into pieces hashes as the whole). `std`'s `DefaultHasher` and
//! the `Hash` trait are neither (their algorithm and the width of a
//! length prefix may change between Rust releases and platforms).
//! `tests::known_answers` pins the values.
//!
//! Must not touch: what is hashed (the callers decide, and never store the
//! input).

use xxhash_rust::xxh3::Xxh3;

/// A streaming stable hash (see the module doc for its byte framing).
#[derive(Clone, Default)]
pub struct StableHasher(Xxh3);

impl StableHasher {
    pub fn new() -> Self {
        StableHasher(Xxh3::new())
    }

    /// A length-framed byte string: `"ab","c"` and `"a","bc"` differ.
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// One byte that says what comes next.
    pub fn tag(&mut self, t: u8) -> &mut Self {
        self.0.update(&[t]);
        self
    }

    /// Bytes without framing: pieces of one text hash as the whole text.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(bytes);
        self
    }

    pub fn finish(&self) -> u64 {
        self.0.digest()
    }
}

/// The stable hash of one framed field.
pub fn of(bytes: &[u8]) -> u64 {
    StableHasher::new().field(bytes).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values any build on any platform must give: a change here changes
    /// every fingerprint in a fleet, so joins across versions would fail.
    #[test]
    fn known_answers() {
        assert_eq!(StableHasher::new().finish(), 0x2d06_8005_38d3_94c2);
        assert_eq!(of(b""), xxhash_rust::xxh3::xxh3_64(&[0u8; 8]));
        let mut framed = 3u64.to_le_bytes().to_vec();
        framed.extend_from_slice(b"abc");
        assert_eq!(of(b"abc"), xxhash_rust::xxh3::xxh3_64(&framed));
        assert_eq!(
            StableHasher::new().tag(1).raw(b"x").finish(),
            xxhash_rust::xxh3::xxh3_64(b"\x01x")
        );
    }

    #[test]
    fn fields_are_framed_and_raw_bytes_are_not() {
        let ab_c = StableHasher::new().field(b"ab").field(b"c").finish();
        let a_bc = StableHasher::new().field(b"a").field(b"bc").finish();
        assert_ne!(ab_c, a_bc);
        let pieces = StableHasher::new().raw(b"ab").raw(b"c").finish();
        let whole = StableHasher::new().raw(b"abc").finish();
        assert_eq!(pieces, whole);
    }
}
