//! `series`: one series per key, the bound, and the exposition unchanged.

use super::*;
use crate::alloc_tests::finished_non_streamed as record;

fn tap() -> TapLabels {
    TapLabels {
        tap: Arc::from("t"),
        boundary: Boundary::Engine,
    }
}

fn exposition(m: &Metrics) -> String {
    String::from_utf8(m.prom.encode()).unwrap()
}

fn series_lines(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn one_series_per_tap_model_and_operation() {
    let m = Metrics::new(10, Default::default()).unwrap();
    let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
    let s1 = m.series(&tap(), &a, Operation::Chat);
    assert!(Arc::ptr_eq(
        &s1,
        &m.series(&tap(), &Arc::from("a"), Operation::Chat)
    ));
    assert!(!Arc::ptr_eq(&s1, &m.series(&tap(), &b, Operation::Chat)));
    assert!(!Arc::ptr_eq(
        &s1,
        &m.series(&tap(), &a, Operation::Embeddings)
    ));
    let other = TapLabels {
        tap: Arc::from("u"),
        boundary: Boundary::Engine,
    };
    assert!(!Arc::ptr_eq(&s1, &m.series(&other, &a, Operation::Chat)));
}

#[test]
fn the_cache_is_bounded_and_past_it_series_still_count() {
    let m = Metrics::new(10, Default::default()).unwrap();
    let cache = SeriesCache::with_max(2);
    for model in ["a", "b", "c", "d"] {
        let s = cache.get(&m, &tap(), &Arc::from(model), Operation::Chat);
        s.record(&m, &record());
    }
    assert_eq!(cache.len(), 2);
    // An uncached series resolves the same Prometheus children.
    cache
        .get(&m, &tap(), &Arc::from("d"), Operation::Chat)
        .record(&m, &record());
    let text = exposition(&m);
    let d: Vec<_> = series_lines(&text, "tokentap_requests_total")
        .into_iter()
        .filter(|l| l.contains("model=\"d\""))
        .collect();
    assert_eq!(d.len(), 1, "{text}");
    assert!(d.iter().all(|l| l.ends_with(" 2")), "{d:?}");
}

#[test]
fn a_non_streamed_request_creates_only_the_series_it_observes() {
    let m = Metrics::new(10, Default::default()).unwrap();
    let model = m.model_label(Some("m"));
    let r = record();
    assert!(!r.stream && r.input_tokens == Some(9) && r.output_tokens == Some(2));
    m.record(&tap(), &model, &r);
    m.record(&tap(), &model, &r);
    let text = exposition(&m);
    let requests = series_lines(&text, "tokentap_requests_total");
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests.iter().all(|l| l.contains("outcome=\"ok\"")
        && l.contains("stream=\"false\"")
        && l.ends_with(" 2")));
    assert_eq!(series_lines(&text, "tokentap_input_tokens_total"), vec![
        "tokentap_input_tokens_total{boundary=\"engine\",model=\"m\",operation=\"chat\",tap=\"t\"} 18".to_owned()
    ]);
    // Streamed-only figures are never created for it.
    for absent in [
        table::TTFT.name,
        table::TPOT.name,
        table::CACHED_TOKENS.name,
    ] {
        assert!(series_lines(&text, absent).is_empty(), "{absent} in {text}");
    }
    // The per-event histograms exist from the series' creation (so the
    // first chunk allocates nothing), empty.
    let itl = series_lines(&text, &format!("{}_count", table::ITL.name));
    assert_eq!(itl.len(), 1, "{text}");
    assert!(itl.iter().all(|l| l.ends_with(" 0")), "{itl:?}");
}

#[test]
fn a_record_goes_to_the_resolved_series_only_when_it_is_its_own() {
    let m = Metrics::new(10, Default::default()).unwrap();
    let a = m.model_label(Some("a"));
    let b = m.model_label(Some("b"));
    let chat_a = m.series(&tap(), &a.value, Operation::Chat);
    let r = record();
    assert_eq!(r.operation, Operation::Chat);
    assert!(chat_a.is_for(&tap(), "a", Operation::Chat));
    assert!(!chat_a.is_for(&tap(), "b", Operation::Chat));
    assert!(!chat_a.is_for(&tap(), "a", Operation::Embeddings));
    let other_tap = TapLabels {
        tap: Arc::from("u"),
        boundary: Boundary::Engine,
    };
    assert!(!chat_a.is_for(&other_tap, "a", Operation::Chat));
    // Its own: counted under model a. Not its own (model b): counted
    // under b, never under a.
    m.record_in(Some(&chat_a), &tap(), &a, &r);
    m.record_in(Some(&chat_a), &tap(), &b, &r);
    let text = exposition(&m);
    let requests = series_lines(&text, "tokentap_requests_total");
    assert_eq!(requests.len(), 2, "{requests:?}");
    for model in ["a", "b"] {
        assert!(
            requests
                .iter()
                .any(|l| l.contains(&format!("model=\"{model}\"")) && l.ends_with(" 1")),
            "{requests:?}"
        );
    }
}
