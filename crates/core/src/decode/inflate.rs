//! Inflating a private copy of a gzip- or deflate-encoded response so it
//! can be measured; the encoded bytes are what is forwarded, untouched.
//!
//! Layers compress streams (nginx `gzip`, CDNs), and a tap on the client's
//! side of such a layer only sees compressed bytes. The inflater turns each
//! piece into plain bytes through one fixed output buffer (no allocation
//! per piece), stops at `MAX_INFLATED_BYTES` (a decompression bomb costs
//! CPU, never memory), and reports a corrupt stream instead of guessing.
//! Brotli and zstd are not inflated: those responses stay `unmeasured`
//! (`compressed_body`).

use flate2::{Decompress, FlushDecompress, Status};

const OUT_BYTES: usize = 16 * 1024;
/// Plain bytes decoded per response at most.
pub const MAX_INFLATED_BYTES: u64 = 256 * 1024 * 1024;

/// A `Content-ContentEncoding`, as far as measuring goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    Identity,
    Gzip,
    Deflate,
    /// Brotli, zstd, several codings, anything else.
    Unsupported,
}

impl ContentEncoding {
    pub fn from_header(value: Option<&[u8]>) -> ContentEncoding {
        let Some(v) = value.map(<[u8]>::trim_ascii).filter(|v| !v.is_empty()) else {
            return ContentEncoding::Identity;
        };
        if v.eq_ignore_ascii_case(b"identity") {
            ContentEncoding::Identity
        } else if v.eq_ignore_ascii_case(b"gzip") || v.eq_ignore_ascii_case(b"x-gzip") {
            ContentEncoding::Gzip
        } else if v.eq_ignore_ascii_case(b"deflate") {
            ContentEncoding::Deflate
        } else {
            ContentEncoding::Unsupported
        }
    }
}

/// Why inflating stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    Corrupt,
    TooLarge,
}

pub struct Inflater {
    z: Decompress,
    out: Box<[u8]>,
    done: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("in", &self.z.total_in())
            .field("out", &self.z.total_out())
            .finish()
    }
}

impl Inflater {
    /// An inflater for gzip or deflate (zlib-wrapped, as HTTP says).
    pub fn new(encoding: ContentEncoding) -> Option<Inflater> {
        let z = match encoding {
            ContentEncoding::Gzip => Decompress::new_gzip(15),
            ContentEncoding::Deflate => Decompress::new(true),
            ContentEncoding::Identity | ContentEncoding::Unsupported => return None,
        };
        Some(Inflater {
            z,
            out: vec![0u8; OUT_BYTES].into_boxed_slice(),
            done: false,
        })
    }

    /// Inflates one encoded piece, handing every run of plain bytes to `sink`.
    pub fn feed(
        &mut self,
        mut input: &[u8],
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<(), InflateError> {
        while !self.done {
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(input, &mut self.out, FlushDecompress::None)
                .map_err(|_| InflateError::Corrupt)?;
            let consumed = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            let produced = usize::try_from(self.z.total_out() - out0).unwrap_or(usize::MAX);
            if self.z.total_out() > MAX_INFLATED_BYTES {
                return Err(InflateError::TooLarge);
            }
            if let Some(plain) = self.out.get(..produced).filter(|p| !p.is_empty()) {
                sink(plain);
            }
            input = input.get(consumed..).unwrap_or_default();
            self.done = status == Status::StreamEnd;
            // Stop when the input is used up and the buffer was not filled
            // (a full buffer may mean more output is waiting).
            if (input.is_empty() && produced < self.out.len()) || (consumed == 0 && produced == 0) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::{GzEncoder, ZlibEncoder};
    use flate2::Compression;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn inflate_in_pieces(
        enc: ContentEncoding,
        data: &[u8],
        piece: usize,
    ) -> Result<Vec<u8>, InflateError> {
        let mut inf = Inflater::new(enc).unwrap();
        let mut out = Vec::new();
        for p in data.chunks(piece) {
            inf.feed(p, &mut |b| out.extend_from_slice(b))?;
        }
        Ok(out)
    }

    #[test]
    fn gzip_and_deflate_split_anywhere() {
        let plain: Vec<u8> = (0..100_000u32)
            .flat_map(|i| format!("data: {{\"n\":{i}}}\n\n").into_bytes())
            .collect();
        let gz = gzip(&plain);
        for piece in [1, 7, 1000, gz.len()] {
            assert_eq!(
                inflate_in_pieces(ContentEncoding::Gzip, &gz, piece).unwrap(),
                plain,
                "pieces of {piece}"
            );
        }
        let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
        z.write_all(&plain).unwrap();
        assert_eq!(
            inflate_in_pieces(ContentEncoding::Deflate, &z.finish().unwrap(), 333).unwrap(),
            plain
        );
    }

    #[test]
    fn corrupt_and_bombs_stop() {
        assert_eq!(
            inflate_in_pieces(ContentEncoding::Gzip, b"not gzip at all", 4),
            Err(InflateError::Corrupt)
        );
        let bomb = gzip(&vec![b'x'; (MAX_INFLATED_BYTES + 1024 * 1024) as usize]);
        assert!(bomb.len() < 1024 * 1024, "a small input");
        assert_eq!(
            inflate_in_pieces(ContentEncoding::Gzip, &bomb, 64 * 1024),
            Err(InflateError::TooLarge)
        );
    }

    #[test]
    fn encodings_from_headers() {
        assert_eq!(
            ContentEncoding::from_header(None),
            ContentEncoding::Identity
        );
        assert_eq!(
            ContentEncoding::from_header(Some(b" GZIP ")),
            ContentEncoding::Gzip
        );
        assert_eq!(
            ContentEncoding::from_header(Some(b"deflate")),
            ContentEncoding::Deflate
        );
        assert_eq!(
            ContentEncoding::from_header(Some(b"br")),
            ContentEncoding::Unsupported
        );
        assert_eq!(
            ContentEncoding::from_header(Some(b"gzip, br")),
            ContentEncoding::Unsupported
        );
    }
}
