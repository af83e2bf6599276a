//! File-descriptor headroom for `tokentap run`, set once at start.
//!
//! Owns: raising the soft `RLIMIT_NOFILE` to the hard limit, and growing
//! the process's file-descriptor table once, before any stream is open,
//! to the size the open streams may need (capped at [`TABLE_CAP`]).
//!
//! Must not touch: sockets, listeners or anything per request.
//!
//! Why the table: Linux sizes a process's fd table by powers of two and
//! grows it when a new descriptor's number reaches its size. In a process
//! with more than one thread, that growth waits for an RCU grace period
//! (`expand_fdtable` calls `synchronize_rcu`), which on a 2-vCPU VM takes
//! 10–20 ms; the `accept4` or `socket` that crossed the size blocks that
//! long, and with it every stream on that runtime thread. tokentap has
//! several threads, so without this every doubling (at 256, 512, 1,024,
//! … descriptors: 128, 256, 512 streams) stalled all open streams once
//! (`perf trace`: `accept4` 19 ms returning fd 256, 13 ms returning 512;
//! BENCHMARKS.md, "After O"). nginx's workers are single-threaded
//! processes and never pay it. A grown table never shrinks, so one
//! descriptor opened at `size − 1` and closed at once sizes it for the
//! process's life.
//!
//! Why the limit: a relay holds two descriptors per stream; a soft limit
//! of 1,024 (systemd's default) would cap tokentap near 500 streams while
//! the hard limit allows far more. tokentap uses epoll only, so `select`'s
//! 1,024 bound, the reason for the low soft default, does not apply. This
//! is what Go's runtime does at start too.

use std::os::fd::AsFd;

/// The largest fd table sized at start: 65,536 descriptors (32,768
/// streams), 512 KiB of kernel memory (one pointer per slot, plus bitmaps);
/// not part of the process's RSS. A process that goes beyond grows its
/// table as before.
pub const TABLE_CAP: u64 = 65_536;

/// What `prepare` did, for the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    /// The soft limit before (`None`: unlimited).
    pub soft_before: Option<u64>,
    /// The soft limit now.
    pub soft: Option<u64>,
    /// The hard limit.
    pub hard: Option<u64>,
    /// The fd table's size asked for (`None`: it could not be grown).
    pub table: Option<u64>,
}

/// Raises the soft descriptor limit to the hard one, then sizes the fd
/// table for it (at most [`TABLE_CAP`]). Best effort: a failure leaves the
/// process as it was and is said in the result (`table: None`).
pub fn prepare() -> Headroom {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: before.maximum,
        maximum: before.maximum,
    };
    let soft = if raised.current != before.current && setrlimit(Resource::Nofile, raised).is_ok() {
        raised.current
    } else {
        before.current
    };
    let table = table_size(soft).and_then(|n| grow_table(n).then_some(n));
    Headroom {
        soft_before: before.current,
        soft,
        hard: before.maximum,
        table,
    }
}

/// The fd table size to ask for under a soft limit (`None`: unlimited).
pub fn table_size(soft: Option<u64>) -> Option<u64> {
    let n = soft.map_or(TABLE_CAP, |s| s.min(TABLE_CAP));
    (n > 1).then_some(n)
}

/// Opens a descriptor numbered at least `size − 1` and closes it: the
/// table grows to hold it and keeps that size. False when the descriptor
/// could not be opened (the limit is lower, or the number is taken and
/// the ones above are not free: the table is then at least that large
/// anyway).
pub fn grow_table(size: u64) -> bool {
    let Ok(top) = i32::try_from(size.saturating_sub(1)) else {
        return false;
    };
    let stderr = std::io::stderr();
    rustix::io::fcntl_dupfd_cloexec(stderr.as_fd(), top).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process's fd table size, from `/proc/self/status` (`FDSize`).
    fn table_now() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn the_table_size_follows_the_soft_limit_up_to_the_cap() {
        assert_eq!(table_size(Some(1_024)), Some(1_024));
        assert_eq!(table_size(Some(20_000)), Some(20_000));
        assert_eq!(table_size(Some(1 << 20)), Some(TABLE_CAP));
        assert_eq!(table_size(None), Some(TABLE_CAP));
        assert_eq!(table_size(Some(1)), None);
        assert_eq!(table_size(Some(0)), None);
    }

    #[test]
    fn a_grown_table_keeps_its_size_after_the_descriptor_closes() {
        let before = table_now().unwrap_or(0);
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        // Twice the table's size now, so the test sees it grow.
        let want = (before * 2).max(2_048);
        assert!(
            want <= soft,
            "the soft limit {soft} leaves no room above FDSize {before}"
        );
        assert!(
            grow_table(want),
            "a descriptor at {} could not be opened",
            want - 1
        );
        let now = table_now().unwrap_or(0);
        assert!(now >= want, "FDSize {now} after growing {before} to {want}");
    }

    #[test]
    fn a_number_beyond_the_limit_grows_nothing() {
        assert!(!grow_table(u64::MAX));
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        if let Some(h) = hard.filter(|h| *h < i32::MAX as u64) {
            assert!(!grow_table(h + 2));
        }
    }
}
