//! The script planner without sockets: event shapes and times, splits,
//! faults, and the engine-derived numbers (prefill, batching, queue wait).

use super::*;

fn spec(stream: bool) -> RequestSpec {
    RequestSpec {
        operation: Operation::Chat,
        dialect: tokentap_core::decode::dialect::Dialect::OpenAi,
        stream,
        include_usage: true,
        continuous_usage: false,
        max_tokens: Some(5),
        prompt_tokens: 7,
        model: None,
        seq: 1,
        sched: Scheduling::default(),
        tool_call: None,
    }
}

fn marks(s: &Script) -> Vec<Mark> {
    s.steps.iter().filter_map(|s| s.mark).collect()
}

#[test]
fn stream_plan_has_the_expected_shape_and_times() {
    let p = Profile {
        ttft_ms: 100.0,
        itl_ms: 10.0,
        ..Profile::default()
    };
    let s = plan(&p, &spec(true));
    use Mark::*;
    assert_eq!(
        marks(&s),
        vec![Headers, Role, Token, Token, Token, Token, Token, Finish, Usage, Done, End]
    );
    let token_times: Vec<_> = s
        .steps
        .iter()
        .filter(|s| s.mark == Some(Token))
        .map(|s| s.at)
        .collect();
    assert_eq!(
        token_times,
        (0..5)
            .map(|i| Duration::from_millis(100 + 10 * i))
            .collect::<Vec<_>>()
    );
    assert_eq!(s.completion_tokens, 5);
}

#[test]
fn split_and_line_endings_keep_the_bytes() {
    let p = Profile {
        split: Split::Random,
        line_ending: LineEnding::Mixed,
        seed: 9,
        ..Profile::default()
    };
    let s = plan(&p, &spec(true));
    let tokens: u32 = s.steps.iter().map(|s| s.tokens).sum();
    assert_eq!(tokens, 5);
    assert!(s.steps.len() > marks(&s).len(), "some events were split");
}

#[test]
fn faults() {
    let p = Profile {
        fault: Fault::Reset(2),
        ..Profile::default()
    };
    let s = plan(&p, &spec(true));
    assert_eq!(
        s.steps.last().map(|s| s.action.clone()),
        Some(Action::Reset)
    );
    assert_eq!(s.completion_tokens, 2);
    let p = Profile {
        fault: Fault::Status(503),
        ..Profile::default()
    };
    let s = plan(&p, &spec(true));
    assert!(
        matches!(&s.steps[0].action, Action::Write(b) if b.starts_with(b"HTTP/1.1 503 Service Unavailable"))
    );
    let p = Profile {
        fault: Fault::Stall(1, 500),
        ttft_ms: 0.0,
        itl_ms: 10.0,
        ..Profile::default()
    };
    let t: Vec<_> = plan(&p, &spec(true))
        .steps
        .iter()
        .filter(|s| s.mark == Some(Mark::Token))
        .map(|s| s.at)
        .collect();
    assert_eq!(t[1] - t[0], Duration::from_millis(510));
}

#[test]
fn non_streaming_body_arrives_when_generation_ends() {
    let p = Profile {
        ttft_ms: 50.0,
        itl_ms: 10.0,
        ..Profile::default()
    };
    let s = plan(&p, &spec(false));
    assert_eq!(s.steps.len(), 1);
    assert_eq!(s.steps[0].at, Duration::from_millis(90));
}

fn close(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) < Duration::from_micros(1)
}

fn token_times(s: &Script) -> Vec<Duration> {
    s.steps
        .iter()
        .filter(|s| s.mark == Some(Mark::Token))
        .map(|s| s.at)
        .collect()
}

#[test]
fn ttft_grows_with_uncached_prompt_tokens() {
    let p = Profile {
        ttft_ms: 50.0,
        prefill_ms_per_1k: 20.0,
        itl_ms: 10.0,
        ..Profile::default()
    };
    let mut req = spec(true);
    req.prompt_tokens = 3000;
    // 50 + 20 × 3000/1000 = 110 ms.
    assert!(close(
        token_times(&plan(&p, &req))[0],
        Duration::from_millis(110)
    ));
    // 2048 of them cached: 50 + 20 × 952/1000 = 69.04 ms.
    req.sched.cached_tokens = 2048;
    let s = plan(&p, &req);
    assert!(close(token_times(&s)[0], Duration::from_micros(69_040)));
    let usage = s
        .steps
        .iter()
        .find(|s| s.mark == Some(Mark::Usage))
        .unwrap();
    let Action::Write(bytes) = &usage.action else {
        panic!("usage is written")
    };
    let text = String::from_utf8_lossy(bytes);
    assert!(
        text.contains(r#""prompt_tokens_details":{"cached_tokens":2048}"#),
        "{text}"
    );
    // Non-streaming bodies report it too.
    let mut req = req.clone();
    req.stream = false;
    let body = plan(&p, &req);
    let Action::Write(bytes) = &body.steps[0].action else {
        panic!("body is written")
    };
    assert!(String::from_utf8_lossy(bytes).contains(r#""cached_tokens":2048"#));
}

#[test]
fn gaps_stretch_with_the_batch_and_the_queue_wait_shifts_everything() {
    let p = Profile {
        ttft_ms: 30.0,
        itl_ms: 10.0,
        batch_slowdown: 0.5,
        header_delay_ms: 5.0,
        fault: Fault::Stall(2, 100),
        ..Profile::default()
    };
    let mut req = spec(true);
    req.sched = Scheduling {
        cached_tokens: 0,
        running: 3,
        queue_wait: Duration::from_millis(400),
    };
    let s = plan(&p, &req);
    assert_eq!(s.steps[0].mark, Some(Mark::Headers));
    assert!(close(s.steps[0].at, Duration::from_millis(405)));
    // Gap = 10 × (1 + 0.5 × 2) = 20 ms; the stall before token 2 adds 100 ms unscaled.
    let t = token_times(&s);
    let ms = |v: u64| Duration::from_millis(v);
    let want = [430, 450, 570, 590, 610].map(ms);
    assert!(t.iter().zip(want).all(|(a, b)| close(*a, b)), "{t:?}");
    assert_eq!(t.len(), 5);
    // Alone (running 1, or 0 when unknown) the gap is itl-ms.
    for running in [0, 1] {
        req.sched.running = running;
        let t = token_times(&plan(&p, &req));
        assert!(close(t[1] - t[0], ms(10)));
    }
}

/// The body of a planned response, de-chunked when chunked.
fn body_of(s: &Script) -> Vec<u8> {
    let all: Vec<u8> = s
        .steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Write(b) => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (head, mut rest) = all.split_at(split);
    if !head.windows(7).any(|w| w == b"chunked") {
        return rest.to_vec();
    }
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
        rest = &rest[eol + 4 + n..];
    }
}

#[test]
fn a_request_offering_tools_is_answered_with_a_call_tokentap_reads_in_every_dialect() {
    use tokentap_core::decode::dialect::Dialect;
    use tokentap_core::links::{self, AnswerDialect, ToolCallCollector};
    let requests = [
        (
            Dialect::OpenAi,
            AnswerDialect::Chat,
            r#"{"model":"m","messages":[{"role":"user","content":"Paris?"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}"#,
        ),
        (
            Dialect::Responses,
            AnswerDialect::Responses,
            r#"{"model":"m","input":[{"role":"user","content":"Paris?"}],"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}"#,
        ),
        (
            Dialect::Anthropic,
            AnswerDialect::Anthropic,
            r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"text","text":"Paris?"}]}],"tools":[{"name":"lookup","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}"#,
        ),
    ];
    let want = links::call("lookup", Some(&serde_json::json!({"city": "Paris?"})));
    for (dialect, answer, body) in requests {
        let call = tools::wants_tool_call(body.as_bytes(), dialect).expect("a call");
        assert_eq!(call.name, "lookup");
        for stream in [true, false] {
            let mut req = spec(stream);
            req.dialect = dialect;
            req.tool_call = Some(call.clone());
            let s = plan(&Profile::default(), &req);
            let body = body_of(&s);
            let mut c = ToolCallCollector::default();
            if stream {
                for event in body
                    .split(|b| *b == b'\n')
                    .collect::<Vec<_>>()
                    .split(|l| l.is_empty())
                {
                    let field = |name: &[u8]| {
                        event
                            .iter()
                            .find_map(|l| l.strip_prefix(name))
                            .map(|v| v.strip_prefix(b" ").unwrap_or(v))
                            .unwrap_or_default()
                    };
                    c.feed_event(answer, field(b"event:"), field(b"data:"));
                }
            } else {
                c.feed_body(answer, &body);
            }
            assert!(
                c.finish().contains(want),
                "{dialect:?} stream={stream}: {}",
                String::from_utf8_lossy(&body)
            );
            assert!(s.completion_tokens >= 1);
        }
    }
    // A conversation that ends in the tool's result gets the answer.
    let done = r#"{"model":"m","messages":[{"role":"user","content":"Paris?"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"lookup","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"Sunny"}],"tools":[{"type":"function","function":{"name":"lookup"}}]}"#;
    assert_eq!(
        tools::wants_tool_call(done.as_bytes(), Dialect::OpenAi),
        None
    );
    let no_tools = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        tools::wants_tool_call(no_tools.as_bytes(), Dialect::OpenAi),
        None
    );
}
