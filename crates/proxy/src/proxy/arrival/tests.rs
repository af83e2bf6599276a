//! `arrival`: the mapping of stamps, and a stamped read on loopback.

use super::*;

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn a_stamp_is_its_age_before_now() {
    let base = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let now = at(base, 100);
    let rx = wall - Duration::from_millis(30);
    assert_eq!(arrival(Some(rx), now, wall, base), at(base, 70));
}

#[test]
fn no_stamp_or_a_contradicted_one_is_the_read_time() {
    let base = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let now = at(base, 100);
    assert_eq!(arrival(None, now, wall, base), now);
    // In the future: the wall clock was stepped back.
    assert_eq!(
        arrival(Some(wall + Duration::from_millis(5)), now, wall, base),
        now
    );
    // Older than a minute: stepped forward.
    assert_eq!(
        arrival(Some(wall - Duration::from_secs(61)), now, wall, base),
        now
    );
}

#[test]
fn never_before_the_request_started() {
    let base = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let now = at(base, 100);
    let floor = at(base, 90);
    assert_eq!(
        arrival(Some(wall - Duration::from_millis(30)), now, wall, floor),
        floor
    );
    // A floor after now (cannot happen) does not move past now.
    assert_eq!(
        arrival(
            Some(wall - Duration::from_millis(30)),
            now,
            wall,
            at(base, 200)
        ),
        now
    );
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
