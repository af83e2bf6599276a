//! Validation of one `taps[i]` entry: listen address, upstream (resolved,
//! TLS CA files read and parsed), timeouts, limits, trace mode, record log,
//! dialect and tokenizer — each failure naming its key.

use super::file::{BoundaryFile, TapFile, TraceModeFile};
use super::*;
use tokentap_telemetry::config::{listen_addr, resolve};

pub(super) fn validate_tap(key: &str, t: &TapFile, base: &Path) -> Result<TapConfig, ConfigError> {
    let name = label_name(&format!("{key}.name"), "tap", &t.name)?;
    let boundary = match t.boundary {
        BoundaryFile::Engine => Boundary::Engine,
        BoundaryFile::Gateway => Boundary::Gateway,
        BoundaryFile::Compound => Boundary::Compound,
        BoundaryFile::Guardrail => Boundary::Guardrail,
        BoundaryFile::Tool => Boundary::Tool,
        BoundaryFile::Retrieval => Boundary::Retrieval,
    };
    let hop = match (boundary, &t.hop) {
        (Boundary::Guardrail, Some(h)) => Some(label_name(&format!("{key}.hop"), "hop", h)?),
        (Boundary::Guardrail, None) => Some(name.clone()),
        (_, Some(_)) => {
            return Err(err(
                format!("{key}.hop"),
                "only taps with boundary `guardrail` have a hop",
            ))
        }
        (_, None) => None,
    };
    let provider = t
        .provider
        .as_deref()
        .map(|p| label_name(&format!("{key}.provider"), "provider", p))
        .transpose()?;
    let trace = match (t.trace, boundary) {
        (Some(TraceModeFile::Propagate), _) => TraceMode::Propagate,
        (Some(TraceModeFile::Create), _) => TraceMode::Create,
        (Some(TraceModeFile::Off), _) => TraceMode::Off,
        (None, Boundary::Compound | Boundary::Gateway) => TraceMode::Create,
        (None, _) => TraceMode::Propagate,
    };
    let listen = listen_addr(&format!("{key}.listen"), &t.listen)?;
    let upstream = upstream(key, t, base)?;
    let secs = |k: &str, v: f64| -> Result<Duration, ConfigError> {
        if v.is_finite() && v > 0.0 && v <= 86_400.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(err(
                format!("{key}.timeouts.{k}"),
                format!("{v} is not a number of seconds in (0, 86400]"),
            ))
        }
    };
    let timeouts = Timeouts {
        connect: secs("connect_seconds", t.timeouts.connect_seconds)?,
        first_byte: secs("first_byte_seconds", t.timeouts.first_byte_seconds)?,
        idle: secs("idle_seconds", t.timeouts.idle_seconds)?,
    };
    let cap = |k: &str, v: usize| -> Result<usize, ConfigError> {
        if (1024..=(1 << 30)).contains(&v) {
            Ok(v)
        } else {
            Err(err(
                format!("{key}.limits.{k}"),
                format!("{v} is outside 1024..=1073741824 bytes"),
            ))
        }
    };
    let limits = MeterLimits {
        request_body_bytes: cap("request_copy_bytes", t.limits.request_copy_bytes)?,
        json_body_bytes: cap("json_body_bytes", t.limits.json_body_bytes)?,
        sse: SseLimits {
            max_line_bytes: cap("sse_line_bytes", t.limits.sse_line_bytes)?,
            max_event_bytes: cap("sse_event_bytes", t.limits.sse_event_bytes)?,
        },
    };
    let count = |k: &str, v: usize, max: usize| -> Result<usize, ConfigError> {
        if (1..=max).contains(&v) {
            Ok(v)
        } else {
            Err(err(
                format!("{key}.limits.{k}"),
                format!("{v} is outside 1..={max}"),
            ))
        }
    };
    let clients = ClientLimits {
        header_timeout: secs("request_header_seconds", t.timeouts.request_header_seconds)?,
        keepalive: secs("keepalive_seconds", t.timeouts.keepalive_seconds)?,
        write_timeout: secs("client_write_seconds", t.timeouts.client_write_seconds)?,
        // pingora itself stops at 1 MiB and 256 headers (400).
        max_header_bytes: count("max_header_bytes", t.limits.max_header_bytes, 1 << 20)?,
        max_headers: count("max_headers", t.limits.max_headers, 256)?,
        max_uri_bytes: count("max_uri_bytes", t.limits.max_uri_bytes, 1 << 20)?,
        max_connections: count("max_connections", t.limits.max_connections, 1 << 24)?,
        max_streams: match t.limits.max_streams {
            None => None,
            Some(n) => Some(count("max_streams", n, 1 << 24)?),
        },
        h2_max_streams: count("h2_max_streams", t.limits.h2_max_streams as usize, 1 << 16)? as u32,
        reject: match t.limits.reject {
            file::RejectFile::Respond => Reject::Respond,
            file::RejectFile::Close => Reject::Close,
        },
    };
    Ok(TapConfig {
        name,
        boundary,
        hop,
        provider,
        trace,
        listen,
        upstream,
        h2c: t.h2c,
        accept_encoding_identity: t.accept_encoding_identity,
        timeouts,
        limits,
        clients,
        record_log: analysis::record_log(key, t.record_log.as_ref(), base)?,
        measure: t.measure,
        dialect: t.dialect,
        inject_usage: t.inject_usage,
        estimator: t
            .estimate_tokens
            .map(tokentap_core::decode::tokens::Estimator::new),
        access_log: match &t.access_log {
            None => None,
            Some(a) if a.sample > 0.0 && a.sample <= 1.0 => Some(a.sample),
            Some(a) => {
                return Err(err(
                    format!("{key}.access_log.sample"),
                    format!("{} is not in (0, 1]", a.sample),
                ))
            }
        },
    })
}

fn upstream(key: &str, t: &TapFile, base: &Path) -> Result<Upstream, ConfigError> {
    let ukey = format!("{key}.upstream");
    // Never echoed: it would print the credential.
    if t.upstream.split("://").nth(1).is_some_and(|rest| {
        rest.split(['/', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('@'))
    }) {
        return Err(err(
            &ukey,
            "credentials in the URL (`user:password@`) are not supported: tokentap forwards each client's own headers",
        ));
    }
    let uri: http::Uri = t
        .upstream
        .parse()
        .map_err(|e| err(&ukey, format!("`{}` is not a URL: {e}", t.upstream)))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(err(
                &ukey,
                format!("`{}`: the scheme must be http:// or https://", t.upstream),
            ))
        }
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| err(&ukey, format!("`{}` has no host", t.upstream)))?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(err(
            &ukey,
            format!(
                "`{}`: only scheme://host:port is supported (requests keep their own path)",
                t.upstream
            ),
        ));
    }
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let addr = resolve(host, port).map_err(|m| err(&ukey, m))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let tls = if https {
        let ca_der = match &t.tls.ca_file {
            None => None,
            Some(p) => Some(Arc::new(read_ca(
                &format!("{key}.tls.ca_file"),
                &base.join(p),
            )?)),
        };
        Some(UpstreamTls {
            sni: t.tls.sni.clone().unwrap_or_else(|| host.clone()),
            verify: t.tls.verify,
            ca_der,
        })
    } else {
        if t.tls.ca_file.is_some() || t.tls.sni.is_some() {
            return Err(err(
                format!("{key}.tls"),
                "TLS settings need an https:// upstream",
            ));
        }
        None
    };
    Ok(Upstream {
        url: t.upstream.clone(),
        host,
        port,
        addr,
        tls,
    })
}

/// Reads a PEM bundle; every certificate must parse (pingora would panic on
/// one that does not, so it is refused here).
fn read_ca(key: &str, path: &PathBuf) -> Result<Vec<Vec<u8>>, ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let iter = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(key, format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for c in iter {
        let c = c.map_err(|e| err(key, format!("{}: bad PEM: {e}", path.display())))?;
        x509_parser::parse_x509_certificate(c.as_ref())
            .map_err(|e| err(key, format!("{}: bad certificate: {e}", path.display())))?;
        out.push(c.as_ref().to_vec());
    }
    if out.is_empty() {
        return Err(err(
            key,
            format!("{}: no certificate found", path.display()),
        ));
    }
    Ok(out)
}
