use super::*;
use crate::record::Outcome;

#[test]
fn a_set_gives_its_labels_and_values_in_one_order() {
    let tap = TapLabels {
        tap: "t".into(),
        boundary: crate::tap::Boundary::Gateway,
    };
    let s = tap
        .per_model(&"m".into(), crate::decode::Operation::Chat)
        .stream(true)
        .outcome(Outcome::HttpError);
    let names: Vec<_> = PerRequest::LABELS.iter().map(|l| l.as_str()).collect();
    assert_eq!(
        names,
        ["tap", "boundary", "model", "operation", "stream", "outcome"]
    );
    assert_eq!(
        s.values().as_ref(),
        ["t", "gateway", "m", "chat", "true", "http_error"]
    );
    assert!(NoLabels {}.values().as_ref().is_empty());
}

#[test]
fn an_enum_lists_every_variant_and_the_docs_list_them() {
    assert_eq!(Outcome::ALL.len(), 6);
    assert_eq!(list::<Outcome>().matches('`').count(), 12);
    let doc = documented(Label::Outcome);
    for o in Outcome::ALL {
        assert!(doc.contains(&format!("`{}`", o.as_str())), "{doc}");
    }
}
