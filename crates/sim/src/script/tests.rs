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
