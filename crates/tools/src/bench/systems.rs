//! The systems under test, each started as its own process in front of the
//! benchmark's simulator, pinned to one core when the machine has two or
//! more (the driver and the simulator keep core 0): tokentap with
//! measurement on and off, nginx and HAProxy from the system packages, and
//! the LiteLLM proxy from `.venv-bench` when installed. Their configs are
//! written to the run's directory, so a result names exactly what ran.

use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    Direct,
    Tokentap,
    TokentapOff,
    Nginx,
    Haproxy,
    Litellm,
}

impl System {
    /// Rows of every table, in this order.
    pub const ROWS: [System; 6] = [
        System::Direct,
        System::Tokentap,
        System::TokentapOff,
        System::Nginx,
        System::Haproxy,
        System::Litellm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            System::Direct => "direct",
            System::Tokentap => "tokentap",
            System::TokentapOff => "tokentap (measure off)",
            System::Nginx => "nginx",
            System::Haproxy => "haproxy (http-no-delay)",
            System::Litellm => "litellm",
        }
    }

    pub fn parse(s: &str) -> Option<System> {
        Some(match s {
            "direct" => System::Direct,
            "tokentap" => System::Tokentap,
            "tokentap-off" => System::TokentapOff,
            "nginx" => System::Nginx,
            "haproxy" => System::Haproxy,
            "litellm" => System::Litellm,
            _ => return None,
        })
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A running system: where to send requests, and its process.
pub struct Running {
    pub system: System,
    pub addr: SocketAddr,
    child: Option<Child>,
    /// Extra processes to count (LiteLLM's workers).
    pub version: String,
}

impl Running {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Running {
    /// Kills the system's whole process tree: a killed nginx master leaves
    /// its workers running (and serving) otherwise.
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let descendants = tree(c.id());
            let _ = c.kill();
            for p in descendants.into_iter().skip(1) {
                if let Ok(p) = i32::try_from(p) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            let _ = c.wait();
        }
    }
}

fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    names
        .iter()
        .flat_map(|n| dirs.iter().map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// Pins this process (every thread, and the ones it starts later) to core
/// 0, where the driver and the simulator run; `false` when `taskset` is
/// missing or refuses.
pub fn pin_self_to_core0() -> bool {
    which(&["taskset"]).is_some()
        && Command::new("taskset")
            .args(["-a", "-p", "-c", "0"])
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The command, pinned to core 1 when there is one.
fn pinned(program: &Path, pin: bool) -> Command {
    if pin && which(&["taskset"]).is_some() {
        let mut c = Command::new("taskset");
        c.arg("-c").arg("1").arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(std::io::Error::other(format!("{what} exited: {status}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(std::io::Error::other(format!(
        "{what} did not listen on {addr}"
    )))
}

fn version_of(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// Whether this system can run here (its program is installed).
pub fn available(system: System, dir: &Path) -> bool {
    match system {
        System::Direct | System::Tokentap | System::TokentapOff => true,
        System::Nginx => which(&["nginx"]).is_some(),
        System::Haproxy => which(&["haproxy"]).is_some(),
        System::Litellm => litellm_bin(dir).is_some(),
    }
}

/// `.venv-bench/bin/litellm` in the working directory or above, or above
/// the results directory.
fn litellm_bin(dir: &Path) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok();
    cwd.iter()
        .flat_map(|c| c.ancestors())
        .chain(dir.ancestors())
        .map(|a| a.join(".venv-bench/bin/litellm"))
        .find(|p| p.is_file())
}

/// Starts `system` in front of `upstream`; `dir` holds its config and logs.
pub fn start(
    system: System,
    upstream: SocketAddr,
    dir: &Path,
    tokentap: &Path,
    pin: bool,
    litellm_models: &str,
) -> std::io::Result<Running> {
    if system == System::Direct {
        return Ok(Running {
            system,
            addr: upstream,
            child: None,
            version: "—".into(),
        });
    }
    let addr = free_port()?;
    let slug = format!("{system:?}").to_lowercase();
    let log = std::fs::File::create(dir.join(format!("{slug}.log")))?;
    let (cmd, version) = match system {
        System::Tokentap | System::TokentapOff => {
            let tap = format!("    measure: {}\n", system == System::Tokentap);
            tokentap_cmd(
                &dir.join(format!("{slug}.yaml")),
                addr,
                upstream,
                &tap,
                tokentap,
                pin,
            )?
        }
        System::Nginx => {
            let bin = which(&["nginx"]).ok_or_else(|| std::io::Error::other("no nginx"))?;
            let d = dir.display();
            let cfg = dir.join("nginx.conf");
            std::fs::write(
                &cfg,
                format!(
                    "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\nevents {{ worker_connections 16384; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/nginx-body;\n  proxy_temp_path {d}/nginx-proxy;\n  fastcgi_temp_path {d}/nginx-fastcgi;\n  uwsgi_temp_path {d}/nginx-uwsgi;\n  scgi_temp_path {d}/nginx-scgi;\n  upstream up {{ server {upstream}; keepalive 256; }}\n  server {{\n    listen {addr};\n    location / {{\n      proxy_pass http://up;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_read_timeout 600s;\n    }}\n  }}\n}}\n"
                ),
            )?;
            let mut c = pinned(&bin, pin);
            c.arg("-c")
                .arg(&cfg)
                .arg("-e")
                .arg(dir.join("nginx-error.log"));
            (c, version_of(&bin, "-v"))
        }
        System::Haproxy => {
            let bin = which(&["haproxy"]).ok_or_else(|| std::io::Error::other("no haproxy"))?;
            let cfg = dir.join(format!("{slug}.cfg"));
            std::fs::write(
                &cfg,
                haproxy_cfg(addr, upstream, "  option http-no-delay\n"),
            )?;
            let mut c = pinned(&bin, pin);
            c.arg("-f").arg(&cfg);
            (c, version_of(&bin, "-v"))
        }
        System::Litellm => {
            let bin = litellm_bin(dir).ok_or_else(|| std::io::Error::other("no litellm"))?;
            let cfg = dir.join("litellm.yaml");
            std::fs::write(
                &cfg,
                format!(
                    "model_list:\n{litellm_models}litellm_settings:\n  num_retries: 0\n  callbacks: []\n  drop_params: true\n"
                ),
            )?;
            let mut c = pinned(&bin, pin);
            c.arg("--config")
                .arg(&cfg)
                .args(["--host", "127.0.0.1", "--port"])
                .arg(addr.port().to_string())
                .args(["--num_workers", "1"]);
            (c, version_of(&bin, "--version"))
        }
        System::Direct => unreachable_direct()?,
    };
    launch(system, cmd, addr, log, version)
}

fn launch(
    system: System,
    mut cmd: Command,
    addr: SocketAddr,
    log: std::fs::File,
    version: String,
) -> std::io::Result<Running> {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::from(log)).spawn()?;
    wait_listening(addr, &mut child, system.name())?;
    Ok(Running {
        system,
        addr,
        child: Some(child),
        version,
    })
}

/// `tokentap run` with one engine tap at `addr` in front of `upstream`;
/// `tap_extra` are further keys of the tap (indented four spaces).
fn tokentap_cmd(
    cfg: &Path,
    addr: SocketAddr,
    upstream: SocketAddr,
    tap_extra: &str,
    tokentap: &Path,
    pin: bool,
) -> std::io::Result<(Command, String)> {
    let admin = free_port()?;
    std::fs::write(
        cfg,
        format!(
            "admin:\n  listen: {admin}\nserver:\n  threads: 1\ntaps:\n  - name: bench\n    boundary: engine\n    listen: {addr}\n    upstream: http://{upstream}\n{tap_extra}"
        ),
    )?;
    let mut c = pinned(tokentap, pin);
    c.args(["run", "--log", "warn", "-c"]).arg(cfg);
    Ok((c, format!("tokentap {}", env!("CARGO_PKG_VERSION"))))
}

fn haproxy_cfg(addr: SocketAddr, upstream: SocketAddr, options: &str) -> String {
    format!(
        "global\n  nbthread 1\n  maxconn 9000\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 600s\n  timeout server 600s\n  http-reuse always\n{options}frontend f\n  bind {addr}\n  default_backend b\nbackend b\n  server s1 {upstream}\n"
    )
}

/// The accuracy cell's tokentap: measuring, with its record log (one JSON
/// line per request, the figures S6 compares) at `record_log`.
pub fn start_recording_tokentap(
    upstream: SocketAddr,
    dir: &Path,
    tokentap: &Path,
    pin: bool,
    record_log: &Path,
) -> std::io::Result<Running> {
    let addr = free_port()?;
    let log = std::fs::File::create(dir.join("tokentap-recording.log"))?;
    let tap = format!("    record_log:\n      path: {}\n", record_log.display());
    let (cmd, version) = tokentap_cmd(
        &dir.join("tokentap-recording.yaml"),
        addr,
        upstream,
        &tap,
        tokentap,
        pin,
    )?;
    launch(System::Tokentap, cmd, addr, log, version)
}

/// HAProxy as Debian configures nothing: its default buffering (no
/// `http-no-delay`), which coalesces a stream's events — the accuracy
/// cell's hostile middlebox between tokentap and the client.
pub fn start_haproxy_defaults(
    upstream: SocketAddr,
    dir: &Path,
    pin: bool,
) -> std::io::Result<Running> {
    let bin = which(&["haproxy"]).ok_or_else(|| std::io::Error::other("no haproxy"))?;
    let addr = free_port()?;
    let cfg = dir.join("haproxy-defaults.cfg");
    std::fs::write(&cfg, haproxy_cfg(addr, upstream, ""))?;
    let log = std::fs::File::create(dir.join("haproxy-defaults.log"))?;
    let mut c = pinned(&bin, pin);
    c.arg("-f").arg(&cfg);
    launch(System::Haproxy, c, addr, log, version_of(&bin, "-v"))
}

/// Whether HAProxy is installed (the accuracy cell's hostile variant).
pub fn haproxy_available() -> bool {
    which(&["haproxy"]).is_some()
}

fn unreachable_direct() -> std::io::Result<(Command, String)> {
    Err(std::io::Error::other("direct has no process"))
}

/// A process and all its descendants (nginx's and LiteLLM's workers).
fn tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| {
                    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    // `pid (comm) state ppid ...`; comm may hold spaces.
                    let after = stat.rsplit_once(')')?.1;
                    let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
                    Some((p, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = vec![pid];
    let mut i = 0;
    while let Some(&p) = out.get(i) {
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// CPU time (user + system) of a process tree and its threads, in
/// nanoseconds, from `/proc/PID/task/*/schedstat` (nanosecond resolution,
/// unlike the 10 ms ticks of `/proc/PID/stat`).
pub fn cpu_ns(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/task")).ok())
        .flat_map(|tasks| tasks.filter_map(Result::ok))
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Resident memory of a process tree, KiB (shared pages counted once per
/// process).
pub fn rss_kib(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_system_kills_its_whole_process_tree() {
        // A shell whose child keeps running when only the shell is killed,
        // as nginx's workers do when only the master is.
        let child = Command::new("sh")
            .args(["-c", "sleep 60 & wait"])
            .spawn()
            .unwrap_or_else(|e| panic!("sh: {e}"));
        let pid = child.id();
        let started = Instant::now();
        let grandchild = loop {
            if let Some(&g) = tree(pid).get(1) {
                break g;
            }
            assert!(started.elapsed().as_secs() < 5, "sh started no child");
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(Running {
            system: System::Nginx,
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            child: Some(child),
            version: String::new(),
        });
        // Killed, and reaped by init: gone within a second.
        let gone = (0..100).any(|_| {
            let alive =
                std::fs::read_to_string(format!("/proc/{grandchild}/stat")).is_ok_and(|s| {
                    !s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                });
            if alive {
                std::thread::sleep(Duration::from_millis(10));
            }
            !alive
        });
        assert!(gone, "the grandchild {grandchild} outlived its system");
    }
}
