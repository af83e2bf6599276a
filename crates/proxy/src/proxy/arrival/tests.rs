//! `arrival`: the mapping of stamps, and a stamped read on loopback.

use super::*;

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

const WALL: Duration = Duration::from_secs(1_800_000_000);

fn wall(ms_before: i64) -> SystemTime {
    let w = SystemTime::UNIX_EPOCH + WALL;
    if ms_before >= 0 {
        w - Duration::from_millis(ms_before.unsigned_abs())
    } else {
        w + Duration::from_millis(ms_before.unsigned_abs())
    }
}

#[test]
fn a_stamp_is_its_age_before_now() {
    let base = Instant::now();
    let mut a = Arrivals::new(base);
    let got = a.at(Some(wall(30)), at(base, 100), wall(0));
    assert_eq!(got, (at(base, 70), None));
}

#[test]
fn no_stamp_is_the_read_time_and_not_counted() {
    let base = Instant::now();
    let mut a = Arrivals::new(base);
    assert_eq!(a.at(None, at(base, 100), wall(0)), (at(base, 100), None));
}

#[test]
fn a_contradicted_stamp_is_the_read_time_with_its_reason() {
    let base = Instant::now();
    let now = at(base, 100);
    // In the future: the wall clock was stepped back.
    let mut a = Arrivals::new(base);
    assert_eq!(
        a.at(Some(wall(-5)), now, wall(0)),
        (now, Some(StampFallback::Later))
    );
    // Over a minute old.
    let mut a = Arrivals::new(base);
    assert_eq!(
        a.at(Some(wall(61_000)), now, wall(0)),
        (now, Some(StampFallback::TooOld))
    );
    // Before the request started: stepped forward. Never a TTFT of 0.
    let mut a = Arrivals::new(at(base, 90));
    assert_eq!(
        a.at(Some(wall(30)), now, wall(0)),
        (now, Some(StampFallback::Earlier))
    );
}

/// A wall clock stepped forward by a second between two pieces of a
/// stream: the piece whose stamp and read straddle the step maps a second
/// early, far before the piece before it, and is timed at its read; the
/// pieces after it (stamp and read both after the step) are exact again.
#[test]
fn a_step_between_two_pieces_costs_one_piece_its_stamp() {
    let base = Instant::now();
    let mut a = Arrivals::new(base);
    // Piece 1 arrived at 100 ms, read at 101 ms.
    assert_eq!(a.at(Some(wall(1)), at(base, 101), wall(0)).0, at(base, 100));
    // Piece 2 arrived at 120 ms; the wall clock stepped +1 s before the
    // read at 121 ms: its age looks like 1,001 ms.
    let step = Duration::from_secs(1);
    let w2 = wall(0) + step;
    let got = a.at(Some(wall(0) - Duration::from_millis(1)), at(base, 121), w2);
    assert_eq!(got, (at(base, 121), Some(StampFallback::Earlier)));
    // Piece 3: stamped and read after the step.
    let got = a.at(Some(w2 - Duration::from_millis(1)), at(base, 141), w2);
    assert_eq!(got, (at(base, 140), None));
}

#[test]
fn arrivals_never_go_backwards() {
    let base = Instant::now();
    let mut a = Arrivals::new(base);
    // Piece 1 had no stamp: its read time, 100 ms.
    assert_eq!(a.at(None, at(base, 100), wall(0)).0, at(base, 100));
    // Piece 2's bytes came 3 ms before that read finished (a burst):
    // within the slack, clamped to the previous piece, not counted.
    let got = a.at(Some(wall(4)), at(base, 101), wall(0));
    assert_eq!(got, (at(base, 100), None));
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_stamped_read_gets_the_bytes_and_when_they_arrived_not_when_they_were_read() {
    use tokio::io::{AsyncWriteExt, ReadBuf};
    use tokio::net::TcpStream;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
    let (c, mut s) = (c.unwrap(), s.unwrap().0);
    assert!(enable(&c));
    // The kernel turns stamping on for the whole host asynchronously: the
    // first segments after the first socket asked may go unstamped.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut cmsg = cmsg_space();
    s.write_all(b"data: 1\n\n").await.unwrap();
    let sent = SystemTime::now();
    // Read 50 ms later: the stamp is the arrival, not the read.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut space = [0u8; 64];
    let mut buf = ReadBuf::new(&mut space);
    let stamp = std::future::poll_fn(|cx| read_stamped(&c, &mut cmsg, cx, &mut buf))
        .await
        .unwrap()
        .expect("the kernel stamped the segment");
    assert_eq!(buf.filled(), b"data: 1\n\n");
    let read = SystemTime::now();
    let early = read.duration_since(stamp).unwrap();
    assert!(
        early >= Duration::from_millis(45),
        "stamp {early:?} before the read"
    );
    assert!(sent.duration_since(stamp).unwrap_or_default() < Duration::from_millis(5));
    // End of stream: zero bytes, like read.
    drop(s);
    let mut space = [0u8; 64];
    let mut buf = ReadBuf::new(&mut space);
    std::future::poll_fn(|cx| read_stamped(&c, &mut cmsg, cx, &mut buf))
        .await
        .unwrap();
    assert!(buf.filled().is_empty());
}
