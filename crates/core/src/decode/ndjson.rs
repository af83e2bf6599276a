//! Newline-delimited JSON framing (Ollama's streams): incremental, capped.
//!
//! Feeds arbitrary pieces and calls back once per complete, non-blank line
//! (without its `\n` or `\r\n`). A line arriving whole inside one piece is
//! handed over in place; only a line split across pieces is copied, into a
//! buffer capped at `max_line` bytes. A line over the cap is an error: the
//! decoder stops and the caller marks the record unmeasured.

/// A line was longer than the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong;

#[derive(Debug)]
pub struct NdjsonDecoder {
    partial: Vec<u8>,
    max_line: usize,
}

impl NdjsonDecoder {
    pub fn new(max_line: usize) -> Self {
        NdjsonDecoder {
            partial: Vec::new(),
            max_line,
        }
    }

    /// Feeds a piece; calls `on_line` for every line it completes.
    pub fn feed(
        &mut self,
        piece: &[u8],
        on_line: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LineTooLong> {
        let mut rest = piece;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            let (head, tail) = rest.split_at(i);
            rest = tail.get(1..).unwrap_or_default();
            if self.partial.is_empty() {
                emit(head, on_line);
            } else {
                self.push(head)?;
                let line = std::mem::take(&mut self.partial);
                emit(&line, on_line);
                // Keep the allocation for the next split line.
                self.partial = line;
                self.partial.clear();
            }
        }
        if !rest.is_empty() {
            self.push(rest)?;
        }
        Ok(())
    }

    /// The body ended: a last line without a newline still counts.
    pub fn finish(&mut self, on_line: &mut dyn FnMut(&[u8])) {
        let line = std::mem::take(&mut self.partial);
        emit(&line, on_line);
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), LineTooLong> {
        if self.partial.len().saturating_add(bytes.len()) > self.max_line {
            self.partial = Vec::new();
            return Err(LineTooLong);
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }
}

fn emit(line: &[u8], on_line: &mut dyn FnMut(&[u8])) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if !line.trim_ascii().is_empty() {
        on_line(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(pieces: &[&[u8]], max: usize) -> (Vec<Vec<u8>>, Result<(), LineTooLong>) {
        let mut d = NdjsonDecoder::new(max);
        let mut out = Vec::new();
        let mut r = Ok(());
        for p in pieces {
            r = d.feed(p, &mut |l| out.push(l.to_vec()));
            if r.is_err() {
                return (out, r);
            }
        }
        d.finish(&mut |l| out.push(l.to_vec()));
        (out, r)
    }

    #[test]
    fn splits_and_blank_lines() {
        let (out, r) = lines(&[b"{\"a\":1}\n{\"b\"", b":2}\r\n\n", b"{\"c\":3}"], 100);
        assert!(r.is_ok());
        assert_eq!(
            out,
            vec![
                b"{\"a\":1}".to_vec(),
                b"{\"b\":2}".to_vec(),
                b"{\"c\":3}".to_vec()
            ]
        );
        let (_, r) = lines(&[b"0123456789", b"0123456789"], 15);
        assert_eq!(r, Err(LineTooLong));
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_lines(cuts in proptest::collection::vec(0usize..200, 0..6)) {
            let body = b"{\"message\":{\"content\":\"a\"}}\n{\"message\":{\"content\":\"b\"}}\r\n{\"done\":true}\n".to_vec();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain(std::iter::once(body.len())) {
                pieces.push(&body[start..c]);
                start = c;
            }
            let (out, r) = lines(&pieces, 1024);
            prop_assert!(r.is_ok());
            prop_assert_eq!(out.len(), 3);
        }
    }
}
