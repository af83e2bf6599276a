//! HTTP/1.1's chunked transfer coding (RFC 9112 §7.1), scanned as its bytes
//! arrive, in any splits: which of them are payload, and where the body
//! ends (what follows is the next message's).
//!
//! Owns the framing state (one enum) and a capped copy of a size line split
//! across reads. Strict where a lax reading lets two parsers disagree on
//! where a body ends (request smuggling): a size line needs a hex digit
//! first and CRLF last, no control byte in between (a line of hex digits
//! alone is read here, any other by `httparse`, which skips extensions as
//! pingora does); chunk data must be followed
//! by CRLF; trailer lines end in CRLF, a bare LF is refused. A failed scan
//! stays failed.
//!
//! Not here: reading sockets, the message head (whether a body is chunked),
//! copying the payload anywhere (the caller gets slices of what it fed),
//! trailer fields (skipped, within the cap).

/// Longest size line (with its extensions) or trailer section kept: as
/// pingora's limit on chunk extensions.
pub const MAX_LINE: usize = 8 * 1024;

/// Why a chunked body cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("bad chunk size line")]
    Size,
    #[error("chunk data not followed by CRLF")]
    DataEnd,
    #[error("bad trailer line")]
    Trailer,
    #[error("chunk size line or trailers over {MAX_LINE} bytes")]
    TooLong,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a size line (part of it may be in `line`).
    Size,
    /// Payload bytes left in the current chunk.
    Data(u64),
    /// After a chunk's data: its CR seen or not.
    DataEnd {
        cr: bool,
    },
    /// After the last chunk: bytes of the current trailer line, CR seen.
    Trailer {
        len: usize,
        cr: bool,
    },
    Done,
    Failed(ChunkedError),
}

/// The scan of one chunked body.
#[derive(Debug)]
pub struct ChunkedScan {
    state: State,
    /// A size line whose end has not arrived yet (≤ [`MAX_LINE`]).
    line: Vec<u8>,
    /// Trailer bytes so far (≤ [`MAX_LINE`]).
    trailers: usize,
    payload: u64,
}

impl Default for ChunkedScan {
    fn default() -> Self {
        ChunkedScan {
            state: State::Size,
            line: Vec::new(),
            trailers: 0,
            payload: 0,
        }
    }
}

impl ChunkedScan {
    /// Scans the body's next `bytes`, handing each run of payload in them
    /// to `payload`, in order. Returns how many of `bytes` belong to the
    /// body: all of them until it ends, then those up to and including its
    /// final CRLF.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        mut payload: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkedError> {
        let mut pos = 0;
        while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) {
            pos += match self.state {
                State::Done => return Ok(pos),
                State::Failed(e) => return Err(e),
                State::Data(left) => {
                    let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    payload(rest.get(..n).unwrap_or_default());
                    let n64 = u64::try_from(n).unwrap_or(u64::MAX);
                    self.payload = self.payload.saturating_add(n64);
                    self.state = match left.saturating_sub(n64) {
                        0 => State::DataEnd { cr: false },
                        left => State::Data(left),
                    };
                    n
                }
                State::Size => self.size_line(rest)?,
                State::DataEnd { cr } => {
                    self.state = match (cr, rest.first()) {
                        (false, Some(b'\r')) => State::DataEnd { cr: true },
                        (true, Some(b'\n')) => State::Size,
                        _ => return self.fail(ChunkedError::DataEnd),
                    };
                    1
                }
                State::Trailer { len, cr } => {
                    let b = rest.first().copied().unwrap_or_default();
                    self.state = match (cr, b) {
                        (true, b'\n') if len == 0 => State::Done,
                        (true, b'\n') => State::Trailer { len: 0, cr: false },
                        (false, b'\r') => State::Trailer { len, cr: true },
                        (false, b) if !is_control(b) => {
                            self.trailers += 1;
                            if self.trailers > MAX_LINE {
                                return self.fail(ChunkedError::TooLong);
                            }
                            State::Trailer { len: len + 1, cr }
                        }
                        _ => return self.fail(ChunkedError::Trailer),
                    };
                    1
                }
            };
        }
        Ok(pos)
    }

    /// The last CRLF of the body has been scanned.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Payload bytes scanned so far.
    pub fn payload_len(&self) -> u64 {
        self.payload
    }

    /// Takes what `rest` holds of a size line; returns the bytes used.
    fn size_line(&mut self, rest: &[u8]) -> Result<usize, ChunkedError> {
        let Some(lf) = memchr::memchr(b'\n', rest) else {
            if self.line.len() + rest.len() > MAX_LINE {
                return self.fail(ChunkedError::TooLong);
            }
            self.line.extend_from_slice(rest);
            return Ok(rest.len());
        };
        let used = lf + 1;
        if self.line.len() + used > MAX_LINE {
            return self.fail(ChunkedError::TooLong);
        }
        let size = if self.line.is_empty() {
            chunk_size(rest.get(..used).unwrap_or_default())
        } else {
            self.line
                .extend_from_slice(rest.get(..used).unwrap_or_default());
            let size = chunk_size(&self.line);
            self.line.clear();
            size
        };
        self.state = match size {
            Some(0) => State::Trailer { len: 0, cr: false },
            Some(n) => State::Data(n),
            None => return self.fail(ChunkedError::Size),
        };
        Ok(used)
    }

    fn fail<T>(&mut self, e: ChunkedError) -> Result<T, ChunkedError> {
        self.state = State::Failed(e);
        self.line = Vec::new();
        Err(e)
    }
}

/// The size of a whole size line (ending in its LF), if it is one: the
/// plain line engines send read here, any other through `httparse`.
fn chunk_size(line: &[u8]) -> Option<u64> {
    plain_size(line).or_else(|| httparse_size(line))
}

/// A line of hex digits only (1 to 16: no overflow) and CRLF, as every
/// engine and pingora write them; `None` for anything else, which
/// [`httparse_size`] then judges. Cheaper than that path, and there is a
/// size line per streamed event, scanned twice on the raw relay
/// (BENCHMARKS.md, "After M"); `tests` hold the two to the same answer.
fn plain_size(line: &[u8]) -> Option<u64> {
    let digits = line.strip_suffix(b"\r\n")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let d = char::from(b).to_digit(16)?;
        Some(n << 4 | u64::from(d))
    })
}

/// Any size line: extensions skipped by `httparse`, as pingora does.
fn httparse_size(line: &[u8]) -> Option<u64> {
    let starts_hex = line.first().is_some_and(u8::is_ascii_hexdigit);
    let body = line.strip_suffix(b"\r\n")?;
    if !starts_hex || body.iter().any(|b| is_control(*b)) {
        return None;
    }
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((n, size))) if n == line.len() => Some(size),
        _ => None,
    }
}

/// A control byte other than HTAB: never inside a size or trailer line.
fn is_control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

#[cfg(test)]
mod tests;
