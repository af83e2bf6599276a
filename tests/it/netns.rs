//! Several "machines" on one: network namespaces (`ip netns`, as root), each
//! with one veth on a bridge in a switch namespace of its own, all in one
//! private /24 that exists only while the test runs; the test process (in
//! the root namespace) reaches them through one more veth on the bridge.
//! Everything is removed on drop, also when the test fails.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};

pub struct Netns {
    prefix: String,
    hosts: Vec<String>,
    root_if: String,
    /// The test process's address on the bridge.
    pub root: Ipv4Addr,
    subnet: u8,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn in_ns(ns: &str, args: &[&str]) {
    let mut all = vec!["netns", "exec", ns, "ip"];
    all.extend_from_slice(args);
    ip(&all);
}

impl Netns {
    /// Namespaces for `hosts` (short names, up to 8).
    pub fn new(hosts: &[&str]) -> Netns {
        assert!(
            nix_is_root(),
            "the multi-machine tests need root (ip netns); run them as root"
        );
        let pid = std::process::id();
        let subnet = 100 + (pid % 100) as u8;
        let prefix = format!("tt{}", pid % 100_000);
        let n = Netns {
            hosts: hosts.iter().map(|h| format!("{prefix}-{h}")).collect(),
            root_if: format!("{prefix}r"),
            prefix: prefix.clone(),
            root: Ipv4Addr::new(10, subnet, 0, 254),
            subnet,
        };
        n.teardown(); // leftovers of a killed run
        let switch = format!("{prefix}-sw");
        ip(&["netns", "add", &switch]);
        in_ns(&switch, &["link", "add", "br0", "type", "bridge"]);
        in_ns(&switch, &["link", "set", "br0", "up"]);
        let attach = |inside: &str, outside: &str| {
            ip(&[
                "link", "add", inside, "type", "veth", "peer", "name", outside,
            ]);
            ip(&["link", "set", outside, "netns", &switch]);
            in_ns(&switch, &["link", "set", outside, "master", "br0"]);
            in_ns(&switch, &["link", "set", outside, "up"]);
        };
        for (i, ns) in n.hosts.iter().enumerate() {
            ip(&["netns", "add", ns]);
            let inside = format!("{prefix}h{i}");
            attach(&inside, &format!("{prefix}s{i}"));
            ip(&["link", "set", &inside, "netns", ns]);
            let addr = format!("{}/24", n.addr(i));
            in_ns(ns, &["addr", "add", &addr, "dev", &inside]);
            in_ns(ns, &["link", "set", &inside, "up"]);
            in_ns(ns, &["link", "set", "lo", "up"]);
        }
        attach(&n.root_if, &format!("{prefix}sr"));
        ip(&["addr", "add", &format!("{}/24", n.root), "dev", &n.root_if]);
        ip(&["link", "set", &n.root_if, "up"]);
        n
    }

    /// The address of host `i`.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 0, 1 + i as u8)
    }

    pub fn sock(&self, i: usize, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.addr(i)), port)
    }

    pub fn root_sock(&self, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.root), port)
    }

    /// Runs `program args` inside host `i`'s namespace.
    pub fn spawn(&self, i: usize, program: &str, args: &[&str]) -> Child {
        let mut all = vec!["netns", "exec", self.hosts[i].as_str(), program];
        all.extend_from_slice(args);
        Command::new("ip")
            .args(&all)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec")
    }

    /// Runs `program args` inside host `i`'s namespace, its output to
    /// `log` (read it when something fails).
    pub fn spawn_logged(
        &self,
        i: usize,
        program: &str,
        args: &[&str],
        log: &std::path::Path,
    ) -> Child {
        let mut all = vec!["netns", "exec", self.hosts[i].as_str(), program];
        all.extend_from_slice(args);
        let out = std::fs::File::create(log).expect("a log file");
        Command::new("ip")
            .args(&all)
            .stdout(out.try_clone().expect("a log file"))
            .stderr(out)
            .spawn()
            .expect("ip netns exec")
    }

    /// Waits until something listens on `port` of host `i`'s own loopback
    /// (a service its sidecar tap fronts), up to `secs`.
    pub fn wait_local_port(&self, i: usize, port: u16, secs: u32) {
        let script = format!(
            "for n in $(seq {}); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && exit 0; sleep 0.1; done; exit 1",
            secs * 10
        );
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                self.hosts[i].as_str(),
                "bash",
                "-c",
                &script,
            ])
            .status()
            .expect("ip netns exec bash")
            .success();
        assert!(
            ok,
            "nothing listened on 127.0.0.1:{port} of {}",
            self.hosts[i]
        );
    }

    fn teardown(&self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip").args(args).output();
        };
        quiet(&["link", "del", &self.root_if]);
        for ns in self
            .hosts
            .iter()
            .chain(std::iter::once(&format!("{}-sw", self.prefix)))
        {
            quiet(&["netns", "del", ns]);
        }
    }
}

/// Processes killed on drop (before the namespaces they run in go: keep
/// them after the `Netns` they run in).
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
