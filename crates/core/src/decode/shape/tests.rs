//! `Shape` must say exactly what the dialect's `classify_event` says
//! (OpenAI's, Anthropic's), event by event: over every captured stream, over generated streams whose texts
//! hold quotes, escapes, control characters and broken UTF-8, and over
//! events mutated byte by byte. And it must match where it should: most
//! token events of a real stream are classified without a parse.

use super::*;
use crate::decode::event::{EventSummary, Raw};
use crate::decode::sse::{SseDecoder, SseItem, SseLimits};
use proptest::prelude::*;
use std::path::Path;

/// Everything a summary says, comparable.
fn said(s: &Result<EventSummary<'_>, Malformed>) -> String {
    match s {
        Ok(s) => format!(
            "{:?} {} {:?} {} {:?} {:?} {:?} {:?} {:?}",
            s.kind,
            s.token_choices,
            s.output,
            s.visible,
            s.finish,
            s.usage,
            s.model.map(Raw::get),
            s.engine,
            s.text.map(Raw::get)
        ),
        Err(_) => "malformed".to_owned(),
    }
}

/// Classifies `event` both ways; panics where they differ; true if the
/// shape matched (no parse).
fn check(shape: &mut Shape, event: &[u8], data: &[u8]) -> bool {
    check_in(Dialect::OpenAi, shape, event, data)
}

fn check_in(dialect: Dialect, shape: &mut Shape, event: &[u8], data: &[u8]) -> bool {
    let learned = shape.dialect == Some(dialect) && shape.event == event;
    let hit = learned && shape.matched(data, Wanted::Model).is_some();
    let want = dialect.classify_event(event, data);
    let got = shape.classify(dialect, event, data);
    assert_eq!(
        said(&got),
        said(&want),
        "shape and classifier differ on {:?}",
        String::from_utf8_lossy(data)
    );
    hit
}

fn events(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut d = SseDecoder::new(SseLimits {
        max_line_bytes: 1 << 20,
        max_event_bytes: 1 << 20,
    });
    let mut out = Vec::new();
    d.feed(body, &mut |item| {
        if let SseItem::Event { event, data } = item {
            out.push((event.to_vec(), data.to_vec()));
        }
    })
    .unwrap();
    out
}

#[test]
fn every_captured_openai_and_anthropic_stream_is_classified_as_the_classifier_does() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/captured");
    let mut streams = 0;
    let mut hits = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.join("meta.json").exists() {
            continue;
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.join("meta.json")).unwrap()).unwrap();
        let dialect = match meta["dialect"].as_str() {
            Some("openai-chat" | "openai-completions") => Dialect::OpenAi,
            Some("anthropic-messages") => Dialect::Anthropic,
            _ => continue,
        };
        if meta["streaming"] != true {
            continue;
        }
        streams += 1;
        let mut shape = Shape::default();
        let (mut hit, mut tokens) = (0, 0);
        for (event, data) in events(&std::fs::read(path.join("body.bin")).unwrap()) {
            hit += usize::from(check_in(dialect, &mut shape, &event, &data));
            let kind = dialect.classify_event(&event, &data).map(|s| s.kind);
            tokens += usize::from(kind == Ok(EventKind::Token));
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        hits.insert(name, (hit, tokens));
    }
    eprintln!("(matched, token events) per stream: {hits:?}");
    assert!(
        streams >= 15,
        "{streams} OpenAI and Anthropic streams in {dir:?}"
    );
    // Streams whose token events differ only in their text and padding:
    // all but the first of them (and those with a \u escape or a
    // different shape) skip the parse.
    for name in [
        "openai-chat-gpt4omini-text-include-usage",
        "openai-chat-gpt5-reasoning-moderation",
        "vllm-opt125m-chat",
        "vllm-opt125m-completions",
        "deepseek-reasoner-reasoning-content",
        "tgi-hf-router-llama31-chat",
        "mistral-tiny-usage-padding",
        "groq-llama3-x-groq-usage",
        "openai-completions-davinci002",
        "anthropic-sonnet4-thinking",
        "anthropic-sonnet35-prompt-cache-read",
    ] {
        let (hit, tokens) = hits[name];
        assert!(
            tokens >= 2 && hit * 10 >= (tokens - 1) * 7,
            "{name}: {hit} of {tokens} token events matched the shape ({hits:?})"
        );
    }
}

/// An OpenAI chat chunk (or a completions one) around a raw text.
fn chunk(text: &str, pad: Option<&str>, completions: bool, model: &str) -> Vec<u8> {
    chunk_with(text, pad.map(|p| ("obfuscation", p)), completions, model)
}

fn chunk_with(text: &str, pad: Option<(&str, &str)>, completions: bool, model: &str) -> Vec<u8> {
    let choice = if completions {
        format!(r#"{{"text":"{text}","index":0,"logprobs":null,"finish_reason":null}}"#)
    } else {
        format!(
            r#"{{"index":0,"delta":{{"content":"{text}"}},"logprobs":null,"finish_reason":null}}"#
        )
    };
    let pad = pad
        .map(|(k, p)| format!(r#","{k}":"{p}""#))
        .unwrap_or_default();
    // Where the model stands: before the holes (every real stream), after
    // the text, after both.
    match model.strip_prefix('>') {
        Some(m) if pad.is_empty() => format!(r#"{{"choices":[{choice}],"model":{m}}}"#),
        Some(m) => format!(r#"{{"choices":[{choice}],"model":{m}{pad},"model2":{m}}}"#),
        None => format!(
            r#"{{"id":"c-1","object":"x","created":1,"model":{model},"choices":[{choice}],"usage":null{pad}}}"#
        ),
    }
    .into_bytes()
}

/// Texts as they appear between a JSON string's quotes: escaped ones,
/// and raw ones that may not be valid JSON at all.
fn raw_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,6}",
        any::<String>().prop_map(|s| {
            let q = serde_json::to_string(&s).unwrap();
            q[1..q.len() - 1].to_owned()
        }),
        "[\"\\\\\\x00-\\x1fu0-9a-fD\u{e9}\u{1F600} ]{0,6}",
        // Escape-like runs: valid, invalid and half escapes.
        "(\\\\[u\"\\\\/bfnrtx0]|[0-9a-fA-FD]){0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_streams_are_classified_as_the_classifier_does(
        texts in prop::collection::vec((raw_text(), prop::option::of(raw_text())), 1..12),
        completions in any::<bool>(),
        model in prop_oneof![
            Just(r#""m-1""#), Just(r#""m\u002d1""#), Just("null"), Just("7"), Just(r#">"m-1""#),
            Just("[1, 2]"), Just(">[1,  2]")
        ],
        error_at in prop::option::of(0usize..12),
        pad_key in prop_oneof![Just("obfuscation"), Just("p"), Just("q")],
    ) {
        let mut shape = Shape::default();
        for (i, (text, pad)) in texts.iter().enumerate() {
            let pad = pad.as_deref().map(|p| (pad_key, p));
            let data = chunk_with(text, pad, completions, model);
            let event: &[u8] = if error_at == Some(i) { b"error" } else { b"" };
            check(&mut shape, event, &data);
        }
    }

    #[test]
    fn generated_anthropic_streams_are_classified_as_the_classifier_does(
        deltas in prop::collection::vec(
            (raw_text(), 0usize..4, "[ \t\n\r]{0,3}", "[ \t\n\rx]{0,12}"),
            1..12,
        ),
    ) {
        let mut shape = Shape::default();
        // Anthropic pads with whitespace before the last brace; elsewhere
        // too here, and with bytes that are no whitespace (`x`).
        for (text, kind, inner, pad) in &deltas {
            let (name, delta) = match kind {
                0 => ("content_block_delta", format!(r#"{{"type":"text_delta","text":"{text}"}}"#)),
                1 => ("content_block_delta", format!(r#"{{"type":"thinking_delta","thinking":"{text}"}}"#)),
                2 => ("content_block_delta", format!(r#"{{"type":"input_json_delta","partial_json":"{text}"}}"#)),
                _ => ("error", format!(r#"{{"type":"text_delta","text":"{text}"}}"#)),
            };
            let data = format!(r#"{{"type":"content_block_delta","index":{inner}1,"delta":{delta}{pad}}}"#);
            check_in(Dialect::Anthropic, &mut shape, name.as_bytes(), data.as_bytes());
        }
    }

    #[test]
    fn an_event_changed_anywhere_is_classified_as_the_classifier_does(
        first in "[a-z]{1,4}",
        at in any::<prop::sample::Index>(),
        byte in prop_oneof![Just(b'"'), Just(b'\\'), Just(b'}'), Just(b','), Just(0u8), Just(0xC3), any::<u8>()],
        insert in any::<bool>(),
        pad in any::<bool>(),
    ) {
        let pad = pad.then_some("pad");
        let mut shape = Shape::default();
        check(&mut shape, b"", &chunk(&first, pad, false, r#""m""#));
        let mut next = chunk("next", pad, false, r#""m""#);
        let i = at.index(next.len());
        if insert { next.insert(i, byte) } else { next[i] = byte }
        check(&mut shape, b"", &next);
        // Back to the unchanged shape: learned again once, then matched.
        check(&mut shape, b"", &chunk("again", pad, false, r#""m""#));
        prop_assert!(check(&mut shape, b"", &chunk("more", pad, false, r#""m""#)));
    }
}

#[test]
fn what_is_not_a_plain_token_event_is_never_matched() {
    let mut shape = Shape::default();
    check(&mut shape, b"", &chunk("a", Some("xy"), false, r#""m""#));
    assert!(check(
        &mut shape,
        b"",
        &chunk("b c", Some(""), false, r#""m""#)
    ));
    // An empty text is no token: parsed, and found to be Empty.
    assert!(!check(
        &mut shape,
        b"",
        &chunk("", Some("xy"), false, r#""m""#)
    ));
    // A finish, usage, an escape, a longer model: parsed.
    let finish = br#"{"id":"c-1","object":"x","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"xy"}"#;
    assert!(!check(&mut shape, b"", finish));
    // One-letter escapes match; a \u escape is parsed.
    assert!(check(
        &mut shape,
        b"",
        &chunk(r#"a\nb\"\\"#, Some("xy"), false, r#""m""#)
    ));
    assert!(!check(
        &mut shape,
        b"",
        &chunk(r"a\u00e9", Some("xy"), false, r#""m""#)
    ));
    assert!(!check(
        &mut shape,
        b"",
        &chunk("a", Some("xy"), false, r#""mm""#)
    ));
    // The finish event did not replace the shape; the last token event did.
    assert!(check(
        &mut shape,
        b"",
        &chunk("z", Some("q"), false, r#""mm""#)
    ));
    assert!(!check(&mut shape, b"", b"[DONE]"));
    // An event type other than the default is always parsed.
    assert!(!check(
        &mut shape,
        b"error",
        &chunk("z", Some("q"), false, r#""mm""#)
    ));
    // Too long to keep: never a shape.
    let mut long = Shape::default();
    let big = "x".repeat(MAX_SHAPE_BYTES);
    check(&mut long, b"", &chunk(&big, None, false, r#""m""#));
    assert!(!check(&mut long, b"", &chunk(&big, None, false, r#""m""#)));
}

#[test]
fn its_debug_shows_no_completion_text() {
    let mut shape = Shape::default();
    check(
        &mut shape,
        b"",
        &chunk("secret words", None, false, r#""m""#),
    );
    let shown = format!("{shape:?}");
    assert!(
        shape.said.is_some() && !shown.contains("secret") && !shown.contains("115, 101"),
        "{shown}"
    );
}

#[test]
fn a_summary_it_gives_shows_no_completion_text_either() {
    let mut shape = Shape::default();
    let event = chunk("secret words", None, false, r#""m""#);
    check(&mut shape, b"", &event);
    let again = chunk("secret again", None, false, r#""m""#);
    let s = shape.classify(Dialect::OpenAi, b"", &again);
    let shown = format!("{s:?}");
    assert!(
        matches!(&s, Ok(s) if s.text.map(Raw::get) == Some("\"secret again\""))
            && !shown.contains("secret"),
        "{shown}"
    );
}

#[test]
fn a_caller_that_has_the_model_gets_a_match_without_it_and_the_rest_unchanged() {
    let mut shape = Shape::default();
    check(&mut shape, b"", &chunk("one", None, false, r#""m-1""#));
    let again = chunk("two", None, false, r#""m-1""#);
    let with = shape.classify_wanting(Dialect::OpenAi, b"", &again, Wanted::Model);
    let without = shape.classify_wanting(Dialect::OpenAi, b"", &again, Wanted::NoModel);
    let (Ok(with), Ok(without)) = (with, without) else {
        panic!("both classified");
    };
    assert_eq!(with.model.map(Raw::get), Some("\"m-1\""));
    assert_eq!(without.model, None);
    assert_eq!(
        said(&Ok(EventSummary {
            model: None,
            ..with
        })),
        said(&Ok(without))
    );
    // A parsed event (here: another model, so no match) says its model anyway.
    let other = chunk("three", None, false, r#""m-2""#);
    let parsed = shape.classify_wanting(Dialect::OpenAi, b"", &other, Wanted::NoModel);
    assert!(matches!(parsed, Ok(s) if s.model.map(Raw::get) == Some("\"m-2\"")));
}
