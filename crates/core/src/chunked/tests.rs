use super::*;
use proptest::prelude::*;
use std::path::Path;

/// (payload, body bytes used, done) of `wire` fed in `pieces`.
fn scan(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), ChunkedError> {
    let mut s = ChunkedScan::default();
    let (mut out, mut used) = (Vec::new(), 0);
    for p in pieces {
        used += s.feed(p, |d| out.extend_from_slice(d))?;
    }
    assert_eq!(s.payload_len(), out.len() as u64);
    Ok((out, used, s.is_done()))
}

/// Chunked encoding of `chunks`, with an extension on odd chunks and,
/// if asked, a trailer.
fn encode(chunks: &[Vec<u8>], upper: bool, trailer: bool) -> Vec<u8> {
    let mut w = Vec::new();
    for (i, c) in chunks.iter().filter(|c| !c.is_empty()).enumerate() {
        let size = if upper {
            format!("{:X}", c.len())
        } else {
            format!("{:x}", c.len())
        };
        w.extend_from_slice(size.as_bytes());
        if i % 2 == 1 {
            w.extend_from_slice(b";name=\"v\"");
        }
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(c);
        w.extend_from_slice(b"\r\n");
    }
    w.extend_from_slice(b"0\r\n");
    if trailer {
        w.extend_from_slice(b"X-Checksum: abc\r\n");
    }
    w.extend_from_slice(b"\r\n");
    w
}

#[test]
fn every_split_of_a_body_gives_its_payload_and_its_end() {
    let wire: &[u8] =
        b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\nGET / HTTP/1.1\r\n";
    let end = wire.len() - b"GET / HTTP/1.1\r\n".len();
    for cut in 0..=wire.len() {
        let (a, b) = wire.split_at(cut);
        let (payload, used, done) = scan(&[a, b]).unwrap();
        assert_eq!(payload, b"hello, world", "cut {cut}");
        assert!(done, "cut {cut}");
        assert_eq!(used, end, "cut {cut}: the next message is not the body's");
    }
    // One byte at a time.
    let bytes: Vec<&[u8]> = wire.chunks(1).collect();
    assert_eq!(scan(&bytes).unwrap(), (b"hello, world".to_vec(), end, true));
}

#[test]
fn an_unfinished_body_is_not_done() {
    for wire in [
        &b"5\r\nhel"[..],
        b"5\r\nhello\r",
        b"0\r\n",
        b"0\r\nX: y\r\n",
        b"a",
    ] {
        let (_, used, done) = scan(&[wire]).unwrap();
        assert!(!done, "{wire:?}");
        assert_eq!(used, wire.len());
    }
}

#[test]
fn framing_two_parsers_could_read_apart_is_refused() {
    let cases: &[(&[u8], ChunkedError)] = &[
        // An empty size line (httparse alone reads it as 0: a last chunk).
        (b"\r\n", ChunkedError::Size),
        (b" 5\r\nhello\r\n", ChunkedError::Size),
        (b"5\nhello\r\n", ChunkedError::Size),
        (b"5;a\nb\r\nhello\r\n", ChunkedError::Size),
        (b"5;\x00\r\nhello\r\n", ChunkedError::Size),
        (b"-5\r\nhello\r\n", ChunkedError::Size),
        (b"0x5\r\nhello\r\n", ChunkedError::Size),
        (b"10000000000000000\r\n", ChunkedError::Size),
        (b"5\r\nhelloX\r\n", ChunkedError::DataEnd),
        (b"5\r\nhello\n", ChunkedError::DataEnd),
        (b"5\r\nhello\rX", ChunkedError::DataEnd),
        (b"0\r\nX: y\nZ: w\r\n\r\n", ChunkedError::Trailer),
        (b"0\r\n\rX", ChunkedError::Trailer),
        (b"0\r\nX:\x01\r\n\r\n", ChunkedError::Trailer),
    ];
    for (wire, want) in cases {
        for cut in 0..=wire.len() {
            let (a, b) = wire.split_at(cut);
            assert_eq!(scan(&[a, b]).map(|_| ()), Err(*want), "{wire:?} cut {cut}");
        }
    }
}

#[test]
fn a_failed_scan_stays_failed() {
    let mut s = ChunkedScan::default();
    assert_eq!(s.feed(b"zz\r\n", |_| {}), Err(ChunkedError::Size));
    assert_eq!(
        s.feed(b"5\r\nhello\r\n0\r\n\r\n", |_| {}),
        Err(ChunkedError::Size)
    );
    assert!(!s.is_done());
}

#[test]
fn size_lines_and_trailers_are_capped() {
    let long = [b"5;".as_slice(), &vec![b'e'; MAX_LINE], b"\r\n"].concat();
    assert_eq!(scan(&[&long]).map(|_| ()), Err(ChunkedError::TooLong));
    // Split so that no piece holds the line's end.
    let pieces: Vec<&[u8]> = long.chunks(100).collect();
    assert_eq!(scan(&pieces).map(|_| ()), Err(ChunkedError::TooLong));
    let trailers = [
        b"0\r\n".as_slice(),
        &b"X: y\r\n".repeat(MAX_LINE / 3),
        b"\r\n",
    ]
    .concat();
    assert_eq!(scan(&[&trailers]).map(|_| ()), Err(ChunkedError::TooLong));
    // Just under the cap is a line like any other.
    let fits = [
        b"5;".as_slice(),
        &vec![b'e'; MAX_LINE - 6],
        b"\r\nhello\r\n0\r\n\r\n",
    ]
    .concat();
    assert_eq!(scan(&[&fits]).unwrap().0, b"hello");
}

/// Real answers (tests/fixtures/captured), chunked one SSE event or JSON
/// body per chunk as engines send them, read in pieces of every size up
/// to 64 bytes: the payload is the body as recorded.
#[test]
fn captured_bodies_chunked_per_event_come_back_whole() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/captured");
    let mut bodies = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path().join("body.bin");
        let Ok(body) = std::fs::read(&path) else {
            continue;
        };
        bodies += 1;
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            let end = memchr::memmem::find(rest, b"\n\n").map_or(rest.len(), |i| i + 2);
            let (event, after) = rest.split_at(end);
            chunks.push(event.to_vec());
            rest = after;
        }
        let wire = encode(&chunks, bodies % 2 == 0, false);
        for piece in 1..=64 {
            let pieces: Vec<&[u8]> = wire.chunks(piece).collect();
            let (payload, used, done) = scan(&pieces).unwrap();
            assert!(
                payload == body && done && used == wire.len(),
                "{path:?}, pieces of {piece}"
            );
        }
    }
    assert!(bodies >= 25, "only {bodies} captured bodies");
}

proptest! {
    /// Any chunks, any case of hex, any extension or trailer, fed in any
    /// pieces: the payload is theirs, the body ends where it ends, and what
    /// follows it is left alone.
    #[test]
    fn any_chunking_in_any_pieces(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12),
        upper: bool,
        trailer: bool,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut wire = encode(&chunks, upper, trailer);
        let end = wire.len();
        wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        at.push(0);
        at.push(wire.len());
        at.sort_unstable();
        let pieces: Vec<&[u8]> = at.windows(2).map(|w| &wire[w[0]..w[1]]).collect();
        let (payload, used, done) = scan(&pieces).unwrap();
        prop_assert_eq!(payload, chunks.concat());
        prop_assert!(done);
        prop_assert_eq!(used, end);
    }

    /// Whatever the bytes, a scan never panics, never says more bytes are
    /// the body's than it was given, and never hands out more payload than
    /// it was given.
    #[test]
    fn arbitrary_bytes_never_panic(pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut s = ChunkedScan::default();
        let mut given = 0;
        for p in &pieces {
            given += p.len();
            match s.feed(p, |_| {}) {
                Ok(used) => prop_assert!(used <= p.len()),
                Err(_) => break,
            }
        }
        prop_assert!(s.payload_len() as usize <= given);
    }
}

proptest! {
    /// The plain-line fast path never disagrees with httparse: where it
    /// answers, httparse gives the same size.
    #[test]
    fn plain_size_lines_read_as_httparse_reads_them(
        digits in "[0-9a-fA-F]{1,17}",
        junk in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let line = format!("{digits}\r\n");
        let fast = plain_size(line.as_bytes());
        prop_assert_eq!(fast.is_some(), digits.len() <= 16);
        if let Some(n) = fast {
            prop_assert_eq!(httparse_size(line.as_bytes()), Some(n));
        }
        let mut any = junk;
        any.extend_from_slice(b"\r\n");
        if let Some(n) = plain_size(&any) {
            prop_assert_eq!(httparse_size(&any), Some(n));
        }
    }
}
