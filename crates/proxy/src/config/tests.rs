use super::*;
use tokentap_core::trace::TraceMode;

const MINIMAL: &str = "
admin:
  listen: 127.0.0.1:9464
taps:
  - name: engine
    boundary: engine          # engine | gateway | compound | guardrail
    listen: 127.0.0.1:8080
    upstream: http://127.0.0.1:8000   # http:// or https:// host:port
";

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(yaml, Path::new("."))
}

#[test]
fn minimal_file_loads_with_stream_friendly_defaults() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.admin_listen, "127.0.0.1:9464".parse().unwrap());
    let t = &c.taps[0];
    assert_eq!(&*t.name, "engine");
    assert_eq!(t.boundary, Boundary::Engine);
    assert_eq!(t.upstream.addr, "127.0.0.1:8000".parse().unwrap());
    assert!(t.upstream.tls.is_none());
    assert_eq!(t.timeouts.connect, Duration::from_secs(5));
    assert_eq!(t.timeouts.first_byte, Duration::from_secs(600));
    assert_eq!(t.timeouts.idle, Duration::from_secs(600));
    assert!(t.h2c && t.accept_encoding_identity);
    assert_eq!(c.max_models, 50);
    assert_eq!(t.trace, TraceMode::Propagate, "engine taps propagate");
    assert!(c.correlation.is_none(), "one tap: nothing to join");
}

#[test]
fn trace_hop_and_correlation_defaults() {
    let yaml = format!(
        "{MINIMAL}  - name: gw\n    boundary: gateway\n    listen: 127.0.0.1:8081\n    upstream: http://127.0.0.1:8080\n  - name: guard\n    boundary: guardrail\n    listen: 127.0.0.1:8082\n    upstream: http://127.0.0.1:9000\n"
    );
    let c = load(&yaml).unwrap();
    assert_eq!(c.taps[1].trace, TraceMode::Create);
    assert_eq!(c.taps[2].hop.as_deref(), Some("guard"));
    let corr = c.correlation.unwrap();
    assert_eq!(corr.settle, Duration::from_secs(2));
    assert_eq!(corr.max_events, 2048);
    let e = load(&format!("{MINIMAL}    hop: x\n")).unwrap_err();
    assert_eq!(e.key, "taps[0].hop");
    let e = load(&format!("{MINIMAL}correlation:\n  buffered_share: 2\n")).unwrap_err();
    assert_eq!(e.key, "correlation.buffered_share");
    let off = load(&format!("{yaml}correlation:\n  enabled: false\n")).unwrap();
    assert!(off.correlation.is_none());
    let e = load(&MINIMAL.replace(
        "boundary: engine ",
        "boundary: engine\n    trace: sometimes\n   ",
    ))
    .unwrap_err();
    assert!(e.key.starts_with("taps[0]"), "{e}");
}

#[test]
fn unknown_keys_are_named() {
    let e = load(&MINIMAL.replace("upstream:", "upsteam:")).unwrap_err();
    assert_eq!(e.key, "taps[0]");
    assert!(e.message.contains("unknown field `upsteam`"), "{e}");
    let e = load(&format!("{MINIMAL}\nextra: 1\n")).unwrap_err();
    assert!(e.to_string().contains("unknown field `extra`"), "{e}");
}

#[test]
fn bad_values_name_their_key() {
    let cases = [
        (
            MINIMAL.replace("boundary: engine", "boundary: edge"),
            "taps[0].boundary",
            "unknown variant `edge`",
        ),
        (
            MINIMAL.replace("http://127.0.0.1:8000", "ftp://x:1"),
            "taps[0].upstream",
            "scheme",
        ),
        (
            MINIMAL.replace("http://127.0.0.1:8000", "http://user:s3cret@127.0.0.1:8000"),
            "taps[0].upstream",
            "credentials in the URL",
        ),
        (
            MINIMAL.replace("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
            "taps[0].upstream",
            "only scheme://host:port",
        ),
        (
            MINIMAL.replace("http://127.0.0.1:8000", "http://no-such-host.invalid:8000"),
            "taps[0].upstream",
            "cannot resolve host `no-such-host.invalid`",
        ),
        (
            MINIMAL.replace("127.0.0.1:8080", "127.0.0.1:99999"),
            "taps[0].listen",
            "not a port",
        ),
        (
            MINIMAL.replace("127.0.0.1:8080", "nonsense"),
            "taps[0].listen",
            "not an address",
        ),
        (
            MINIMAL.replace("127.0.0.1:8080", "127.0.0.1:9464"),
            "taps[0].listen",
            "already used",
        ),
        (
            MINIMAL.replace("name: engine", "name: \"a b\""),
            "taps[0].name",
            "not a tap name",
        ),
        (
            format!("{MINIMAL}    timeouts:\n      idle_seconds: -1\n"),
            "taps[0].timeouts.idle_seconds",
            "not a number of seconds",
        ),
        (
            format!("{MINIMAL}    limits:\n      sse_line_bytes: 10\n"),
            "taps[0].limits.sse_line_bytes",
            "outside",
        ),
        (
            format!("{MINIMAL}    tls:\n      sni: x\n"),
            "taps[0].tls",
            "https://",
        ),
        ("taps: []\n".to_string(), "taps", "at least one"),
    ];
    for (yaml, key, needle) in cases {
        let e = load(&yaml).expect_err(key);
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains(needle), "{e} should contain {needle}");
    }
}

#[test]
fn https_upstream_reads_its_ca_and_defaults_sni_to_the_host() {
    let dir = std::env::temp_dir().join(format!("tokentap-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = MINIMAL.replace("http://127.0.0.1:8000", "https://localhost:8443")
        + "    tls:\n      ca_file: ca.pem\n";
    std::fs::write(dir.join("ca.pem"), "not a pem").unwrap();
    let e = Config::from_yaml(&yaml, &dir).unwrap_err();
    assert_eq!(e.key, "taps[0].tls.ca_file");
    let e = Config::from_yaml(&yaml.replace("ca.pem", "missing.pem"), &dir).unwrap_err();
    assert!(e.message.contains("cannot read"), "{e}");
    let c = Config::from_yaml(
        &MINIMAL.replace("http://127.0.0.1:8000", "https://localhost:8443"),
        &dir,
    )
    .unwrap();
    let tls = c.taps[0].upstream.tls.as_ref().unwrap();
    assert_eq!(tls.sni, "localhost");
    assert!(tls.verify);
    assert_eq!(c.taps[0].upstream.port, 8443);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_credential_in_the_upstream_url_is_refused_without_echoing_it() {
    let e = load(&MINIMAL.replace(
        "http://127.0.0.1:8000",
        "https://user:s3cret@127.0.0.1:8000",
    ))
    .unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[test]
fn a_config_dump_never_shows_collector_header_values() {
    let yaml = MINIMAL.replace(
        "taps:",
        "otlp:\n  endpoint: http://127.0.0.1:4318\n  headers:\n    authorization: Bearer s3cret-token\ntaps:",
    );
    let c = load(&yaml).unwrap();
    let dump = format!("{c:?}");
    assert!(dump.contains("authorization"), "{dump}");
    assert!(!dump.contains("s3cret"), "{dump}");
}
