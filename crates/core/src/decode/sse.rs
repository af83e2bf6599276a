//! Incremental Server-Sent Events decoder (WHATWG "event stream interpretation").
//!
//! Owns: splitting an arbitrary sequence of byte pieces into SSE lines and
//! events, exactly as a browser's `EventSource` would: LF, CRLF and CR line
//! ends (a CRLF may be split across pieces), one leading UTF-8 BOM ignored,
//! `:` comments, `field: value` with at most one space stripped, several
//! `data:` lines joined with `\n`, dispatch on a blank line, an event with no
//! `data` never dispatched, an unfinished event at end of stream dropped.
//!
//! Does not own: what an event means (see `decode::openai`), timing, or any
//! IO. It never holds bytes back from anyone: it sees a borrowed view of each
//! piece after the proxy has it. Pieces that end mid-line are remembered in a
//! line buffer capped at `max_line_bytes`; an event's data is capped at
//! `max_event_bytes`. Exceeding a cap puts the decoder into a failed state
//! (it then ignores everything) so the caller can mark the stream unmeasured.
//! Steady state allocates nothing: both buffers keep their capacity.

use memchr::memchr2;

/// Why the decoder gave up. Each maps to a `reason` of
/// `tokentap_measurement_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseError {
    /// A single line grew beyond `max_line_bytes` without a line end.
    LineTooLong,
    /// The `data` of one event grew beyond `max_event_bytes`.
    EventTooLarge,
}

/// One thing the decoder found in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// A dispatched event: `event` is the raw event type (empty when the
    /// stream gave none, which WHATWG calls `message`), `data` the joined data
    /// lines without the final newline.
    Event { event: &'a [u8], data: &'a [u8] },
    /// A comment line (`: keep-alive`), without the leading colon.
    Comment(&'a [u8]),
}

/// Size limits of one decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    pub max_line_bytes: usize,
    pub max_event_bytes: usize,
}

const MAX_EVENT_NAME: usize = 64;
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The incremental decoder. Feed it pieces in order with [`SseDecoder::feed`].
#[derive(Debug)]
pub struct SseDecoder {
    limits: SseLimits,
    /// Bytes of a line that started in an earlier piece.
    line: Vec<u8>,
    /// `data` of the event being assembled (each line followed by `\n`).
    data: Vec<u8>,
    has_data: bool,
    event: [u8; MAX_EVENT_NAME],
    event_len: usize,
    /// The previous piece ended with CR: a leading LF in this piece belongs to it.
    pending_cr: bool,
    /// No line has been completed yet (the BOM rule applies to the first line).
    first_line: bool,
    failed: Option<SseError>,
}

impl SseDecoder {
    pub fn new(limits: SseLimits) -> Self {
        SseDecoder {
            limits,
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            event: [0; MAX_EVENT_NAME],
            event_len: 0,
            pending_cr: false,
            first_line: true,
            failed: None,
        }
    }

    /// The error that stopped the decoder, if any.
    pub fn failed(&self) -> Option<SseError> {
        self.failed
    }

    /// Feeds one piece; calls `on_item` for every comment and complete event
    /// it finishes. After a failure it returns the error and does nothing.
    pub fn feed<F>(&mut self, mut piece: &[u8], on_item: &mut F) -> Result<(), SseError>
    where
        F: FnMut(SseItem<'_>),
    {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = piece.strip_prefix(b"\n") {
                piece = rest;
            }
        }
        while !piece.is_empty() {
            match memchr2(b'\n', b'\r', piece) {
                None => {
                    self.carry(piece)?;
                    break;
                }
                Some(pos) => {
                    let (head, tail) = piece.split_at(pos);
                    // `tail` starts with the line end; skip it (CRLF counts once).
                    let skip = match tail {
                        [b'\r', b'\n', ..] => 2,
                        [b'\r'] => {
                            self.pending_cr = true;
                            1
                        }
                        _ => 1,
                    };
                    piece = tail.get(skip..).unwrap_or_default();
                    if self.line.is_empty() {
                        self.check_line_len(head.len())?;
                        if let Some(after) = self.dispatch_in_place(head, piece, on_item)? {
                            piece = after;
                            continue;
                        }
                        self.process_line(head, on_item)?;
                    } else {
                        self.carry(head)?;
                        let line = std::mem::take(&mut self.line);
                        let result = self.process_line(&line, on_item);
                        self.line = line;
                        self.line.clear();
                        result?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The usual event, one `data:` line and the blank line after it in
    /// the same piece: dispatched from the piece, not copied into `data`
    /// first. What follows the blank line, or `None` (nothing done) for
    /// anything else, which the line-by-line path then takes.
    fn dispatch_in_place<'p, F>(
        &mut self,
        line: &[u8],
        rest: &'p [u8],
        on_item: &mut F,
    ) -> Result<Option<&'p [u8]>, SseError>
    where
        F: FnMut(SseItem<'_>),
    {
        if self.has_data || self.first_line {
            return Ok(None);
        }
        let Some(value) = line.strip_prefix(b"data:") else {
            return Ok(None);
        };
        let after: &'p [u8] = match rest {
            [b'\n', after @ ..] | [b'\r', b'\n', after @ ..] => after,
            [b'\r'] => {
                // A blank line ended by CR at the piece's end: an LF that
                // starts the next piece belongs to it.
                self.pending_cr = true;
                &[]
            }
            [b'\r', after @ ..] => after,
            _ => return Ok(None),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if value.len().saturating_add(1) > self.limits.max_event_bytes {
            return Err(self.fail(SseError::EventTooLarge));
        }
        let event = self.event.get(..self.event_len).unwrap_or_default();
        on_item(SseItem::Event { event, data: value });
        self.event_len = 0;
        Ok(Some(after))
    }

    fn check_line_len(&mut self, len: usize) -> Result<(), SseError> {
        if len > self.limits.max_line_bytes {
            return Err(self.fail(SseError::LineTooLong));
        }
        Ok(())
    }

    fn carry(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        self.check_line_len(self.line.len().saturating_add(bytes.len()))?;
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn fail(&mut self, e: SseError) -> SseError {
        self.failed = Some(e);
        // Release the memory at once: a failed decoder never needs it again.
        self.line = Vec::new();
        self.data = Vec::new();
        e
    }

    fn process_line<F>(&mut self, mut line: &[u8], on_item: &mut F) -> Result<(), SseError>
    where
        F: FnMut(SseItem<'_>),
    {
        if self.first_line {
            self.first_line = false;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
            }
        }
        if line.is_empty() {
            self.dispatch(on_item);
            return Ok(());
        }
        if let Some(comment) = line.strip_prefix(b":") {
            on_item(SseItem::Comment(comment));
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let (field, rest) = line.split_at(colon);
                let value = rest.get(1..).unwrap_or_default();
                (field, value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                let needed = self
                    .data
                    .len()
                    .saturating_add(value.len())
                    .saturating_add(1);
                if needed > self.limits.max_event_bytes {
                    return Err(self.fail(SseError::EventTooLarge));
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.has_data = true;
            }
            b"event" => {
                let n = value.len().min(MAX_EVENT_NAME);
                if let (Some(dst), Some(src)) = (self.event.get_mut(..n), value.get(..n)) {
                    dst.copy_from_slice(src);
                    self.event_len = n;
                }
            }
            // `id`, `retry` and unknown fields do not matter for measuring.
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_item: &mut F)
    where
        F: FnMut(SseItem<'_>),
    {
        if self.has_data {
            let data = self.data.strip_suffix(b"\n").unwrap_or(&self.data);
            let event = self.event.get(..self.event_len).unwrap_or_default();
            on_item(SseItem::Event { event, data });
        }
        self.data.clear();
        self.has_data = false;
        self.event_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SseLimits = SseLimits {
        max_line_bytes: 1024,
        max_event_bytes: 4096,
    };

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        Event(String, String),
        Comment(String),
    }

    fn decode(pieces: &[&[u8]]) -> (Vec<Owned>, Option<SseError>) {
        let mut d = SseDecoder::new(LIMITS);
        let mut out = Vec::new();
        for p in pieces {
            let _ = d.feed(p, &mut |item| {
                out.push(match item {
                    SseItem::Event { event, data } => Owned::Event(
                        String::from_utf8_lossy(event).into_owned(),
                        String::from_utf8_lossy(data).into_owned(),
                    ),
                    SseItem::Comment(c) => Owned::Comment(String::from_utf8_lossy(c).into_owned()),
                })
            });
        }
        (out, d.failed())
    }

    fn ev(e: &str, d: &str) -> Owned {
        Owned::Event(e.into(), d.into())
    }

    #[test]
    fn openai_style_events() {
        let (out, err) = decode(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(out, vec![ev("", "{\"a\":1}"), ev("", "[DONE]")]);
        assert_eq!(err, None);
    }

    #[test]
    fn all_line_endings_and_split_crlf() {
        let (out, _) = decode(&[b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]);
        assert_eq!(out, vec![ev("", "a"), ev("", "b"), ev("", "c")]);
        // CR at the end of one piece, LF at the start of the next: one line end.
        let (out, _) = decode(&[b"data: a\r", b"\n\r", b"\n"]);
        assert_eq!(out, vec![ev("", "a")]);
    }

    #[test]
    fn multiline_data_event_names_comments_and_space_rules() {
        let (out, _) = decode(&[b": keep-alive\nevent: ping\ndata:x\ndata:  y\n\n"]);
        assert_eq!(
            out,
            vec![Owned::Comment(" keep-alive".into()), ev("ping", "x\n y")]
        );
    }

    #[test]
    fn no_data_means_no_dispatch_and_empty_data_dispatches() {
        let (out, _) = decode(&[b"event: x\n\ndata\n\n"]);
        assert_eq!(out, vec![ev("", "")]);
    }

    #[test]
    fn bom_is_ignored_once_and_unfinished_event_is_dropped() {
        let (out, _) = decode(&[b"\xEF\xBB\xBFdata: a\n\ndata: b\n"]);
        assert_eq!(out, vec![ev("", "a")]);
    }

    #[test]
    fn split_anywhere_equals_whole() {
        let whole: &[u8] =
            b": c\r\ndata: one\r\n\r\nevent: e\rdata: two\rdata: three\r\rdata: [DONE]\n\n";
        let (expected, _) = decode(&[whole]);
        for i in 0..whole.len() {
            for j in i..whole.len() {
                let (a, rest) = whole.split_at(i);
                let (b, c) = rest.split_at(j - i);
                let (out, _) = decode(&[a, b, c]);
                assert_eq!(out, expected, "split at {i},{j}");
            }
        }
    }

    /// Fed a byte at a time, no event is ever dispatched in place: the two
    /// paths must say the same, line ends, names, BOM and caps included.
    #[test]
    fn in_place_dispatch_says_what_the_line_by_line_path_says() {
        let inputs: [&[u8]; 8] = [
            b"data: {\"a\":1}\n\ndata: [DONE]\n\n",
            b"\xEF\xBB\xBFdata: a\n\ndata: b\r\n\r\ndata:c\r\rdata:  d\r\r\n",
            b"event: e\ndata: x\n\ndata: y\n\nevent: f\r\ndata: z\r\n\r\n",
            b"data: one\ndata: two\n\ndata: three\n\n",
            b": c\ndata: a\r\r\ndata: b\n\r\n",
            b"data\n\ndata:\n\ndata: \n\nid: 1\ndata: q\n\n",
            b"data: a\r",
            b"data: 0123456789\n\ndata: ok\n\n",
        ];
        for whole in inputs {
            for limits in [
                LIMITS,
                SseLimits {
                    max_line_bytes: 1024,
                    max_event_bytes: 10,
                },
            ] {
                let run = |pieces: &[&[u8]]| {
                    let mut d = SseDecoder::new(limits);
                    let mut out = Vec::new();
                    for p in pieces {
                        let _ = d.feed(p, &mut |item| out.push(format!("{item:?}")));
                    }
                    (out, d.failed())
                };
                let bytes: Vec<&[u8]> = whole.chunks(1).collect();
                assert_eq!(
                    run(&[whole]),
                    run(&bytes),
                    "{:?}",
                    String::from_utf8_lossy(whole)
                );
            }
        }
        // A blank line's CR at a piece's end, its LF starting the next.
        let (out, _) = decode(&[b"data: a\n\r", b"\ndata: b\n\n"]);
        assert_eq!(out, vec![ev("", "a"), ev("", "b")]);
    }

    proptest::proptest! {
        /// Streams made of SSE's own pieces (field names, line ends of
        /// every kind, BOMs, colons, spaces), cut anywhere: what whole
        /// pieces give (in place where they can) is what single bytes give.
        #[test]
        fn any_stream_cut_anywhere_says_what_its_bytes_one_by_one_say(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "data:", "data: ", "data", "event: e", "id: 1", ":", " ", "x", "{}",
                "\n", "\r", "\r\n", "\n\n", "\u{FEFF}",
            ]), 0..40),
            cuts in proptest::collection::vec(0usize..64, 0..8),
            small in proptest::bool::ANY,
        ) {
            let whole = parts.concat().into_bytes();
            let mut pieces = Vec::new();
            let mut rest = whole.as_slice();
            for c in cuts {
                let (a, b) = rest.split_at(c.min(rest.len()));
                pieces.push(a);
                rest = b;
            }
            pieces.push(rest);
            let limits = if small {
                SseLimits { max_line_bytes: 12, max_event_bytes: 10 }
            } else {
                LIMITS
            };
            let run = |pieces: &[&[u8]]| {
                let mut d = SseDecoder::new(limits);
                let mut out = Vec::new();
                for p in pieces {
                    if d.feed(p, &mut |item| out.push(format!("{item:?}"))).is_err() {
                        break;
                    }
                }
                (out, d.failed())
            };
            let bytes: Vec<&[u8]> = whole.chunks(1).collect();
            proptest::prop_assert_eq!(run(&pieces), run(&bytes));
        }
    }

    #[test]
    fn caps_fail_and_stop() {
        let long = vec![b'x'; 2000];
        let (out, err) = decode(&[b"data: ok\n\ndata: ", &long, b"\n\ndata: later\n\n"]);
        assert_eq!(out, vec![ev("", "ok")]);
        assert_eq!(err, Some(SseError::LineTooLong));

        let line = [b"data: ".as_slice(), &[b'y'; 1000], b"\n"].concat();
        let many: Vec<&[u8]> = std::iter::repeat_n(line.as_slice(), 5).collect();
        let (out, err) = decode(&many);
        assert!(out.is_empty());
        assert_eq!(err, Some(SseError::EventTooLarge));
    }

    #[test]
    fn line_cap_counts_carried_bytes() {
        let mut d = SseDecoder::new(LIMITS);
        let piece = vec![b'z'; 600];
        assert!(d.feed(&piece, &mut |_| {}).is_ok());
        assert_eq!(d.feed(&piece, &mut |_| {}), Err(SseError::LineTooLong));
    }
}
