//! An `https://` upstream: the CA comes from the tap's config, SNI is sent,
//! and certificate verification is on unless switched off.

use crate::support::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::path::Path;
use std::time::Duration;
use tokentap_core::record::{ErrorType, Outcome};
use tokentap_sim::{Profile, SimArgs, Simulator};

/// Writes `ca.pem`, `server.pem`, `server.key` (a leaf for `localhost`) into `dir`.
fn make_pki(dir: &Path) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tokentap test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("server.key"), leaf_key.serialize_pem()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_configured_ca_streams_byte_exact() {
    let _g = serial().await;
    let scratch = scratch("tls");
    let dir = scratch.path();
    make_pki(dir);
    let profile = Profile {
        ttft_ms: 5.0,
        itl_ms: 2.0,
        output_tokens: 30,
        ..Profile::default()
    };
    let tls_sim = Simulator::spawn(&SimArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_cert: Some(dir.join("server.pem")),
        tls_key: Some(dir.join("server.key")),
        ground_truth: None,
        engine: Default::default(),
        profile: profile.clone(),
    })
    .unwrap();
    let plain = sim(profile);
    let upstream = format!("https://localhost:{}", tls_sim.addr.port());

    let tap = Tap::start_with(&upstream, "    tls:\n      ca_file: ca.pem\n", dir);
    for i in 0..3 {
        let id = format!("tls-{i}");
        let h = [
            ("content-type", "application/json"),
            ("x-request-id", id.as_str()),
        ];
        let direct = post(plain.addr, &h, &chat(true, true)).await;
        let via = post(tap.addr, &h, &chat(true, true)).await;
        assert_eq!(via.status, 200);
        assert!(via.complete);
        assert_eq!(via.body, direct.body, "{id}: byte-exact over TLS");
        let rec = tap.records.wait(&id).await;
        assert_eq!(rec.outcome, Outcome::Ok);
        assert_eq!(rec.output_tokens, Some(30));
        let truth = tls_sim
            .truth
            .wait_for(&id, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            truth.sni.as_deref(),
            Some("localhost"),
            "SNI is the upstream host"
        );
    }
    drop(tap);

    // Without the CA (system roots only) the self-signed chain is refused.
    let strict = Tap::start_with(&upstream, "", dir);
    let r = post(
        strict.addr,
        &[("x-request-id", "tls-untrusted")],
        &chat(true, false),
    )
    .await;
    assert_eq!(r.status, 502);
    let rec = strict.records.wait("tls-untrusted").await;
    assert_eq!(
        (rec.outcome, rec.error_type),
        (Outcome::UpstreamError, Some(ErrorType::Tls))
    );
    drop(strict);

    // Verification can be switched off explicitly.
    let lax = Tap::start_with(&upstream, "    tls:\n      verify: false\n", dir);
    let r = post(lax.addr, &[("x-request-id", "tls-lax")], &chat(true, false)).await;
    assert_eq!(r.status, 200);
}
