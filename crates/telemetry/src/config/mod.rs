//! The config pieces every tokentap program shares (the tap process and
//! the joiner): the error that names its key, `${VAR}` interpolation,
//! listen addresses, and the `otlp`, `correlation` and `admin` sections
//! (`file`: as written; `sections`: validated).

pub mod file;
pub mod sections;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

/// A config problem, with the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Path of the key (`taps[0].upstream`), or empty for the file itself.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

pub fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

/// Replaces `${VAR}` with the environment's value (secrets stay out of
/// config files); an unset variable is an error.
pub fn interpolate(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(rest.get(..start).unwrap_or_default());
        let after = rest.get(start + 2..).unwrap_or_default();
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed `${{` in `{s}`"))?;
        let name = after.get(..end).unwrap_or_default();
        let value =
            std::env::var(name).map_err(|_| format!("environment variable `{name}` is not set"))?;
        out.push_str(&value);
        rest = after.get(end + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

/// `ip:port`, or `host:port` resolved now.
pub fn listen_addr(key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| {
        err(
            key,
            format!("`{s}` is not an address (expected ip:port or host:port)"),
        )
    })?;
    let port: u16 = port
        .parse()
        .map_err(|_| err(key, format!("`{s}`: `{port}` is not a port number")))?;
    resolve(host, port).map_err(|m| err(key, m))
}

pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host `{host}`: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("host `{host}` resolved to no address"))
}
