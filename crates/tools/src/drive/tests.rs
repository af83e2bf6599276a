//! The driver against the in-repo simulator, in-process on port 0: every
//! load model completes, and what the driver reports agrees with the
//! simulator's truth (prefix-cache hits on later conversation turns).

use super::*;
use tokentap_sim::{EngineArgs, Profile, SimArgs, Simulator};

fn sim(prefix_cache: bool) -> Simulator {
    Simulator::spawn(&SimArgs {
        profile: Profile {
            ttft_ms: 5.0,
            itl_ms: 0.5,
            output_tokens: 100_000,
            ..Profile::default()
        },
        engine: EngineArgs {
            prefix_cache,
            ..EngineArgs::default()
        },
        ..SimArgs::default()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversation_against_the_simulator_hits_its_prefix_cache() {
    let s = sim(true);
    let args = DriveArgs {
        workload: Workload::Conversation,
        concurrency: Some(4),
        requests: Some(20),
        tenants: 3,
        ..DriveArgs::new(format!("http://{}", s.addr))
    };
    let summary = drive(&args).await.unwrap();
    assert_eq!(summary.requests, 20);
    assert_eq!(summary.outcomes.ok, 20, "{summary:?}");
    assert_eq!(summary.ttft_ms.count, 20);
    assert_eq!(summary.load, LoadModel::Closed { concurrency: 4 });
    let mut later_turns = 0;
    for r in &summary.results {
        let t = s
            .truth
            .wait_for(&r.id, Duration::from_secs(5))
            .await
            .unwrap();
        // The driver read the same numbers the simulator decided.
        assert_eq!(r.prompt_tokens, Some(u64::from(t.prompt_tokens)));
        assert_eq!(r.cached_tokens, Some(u64::from(t.cached_tokens)));
        assert_eq!(r.completion_tokens, u64::from(r.planned_output_tokens));
        assert_eq!(t.prompt_tokens, r.planned_input_tokens);
        assert_eq!(t.tenant, format!("tenant-{}-key", r.tenant));
        let (session, turn) = r.session.unwrap();
        if turn > 0 {
            later_turns += 1;
            assert!(t.cached_tokens > 0, "turn {turn} of {session} missed");
            // Turn k hits about all of turn k-1's prompt: its full blocks.
            let prev = summary
                .results
                .iter()
                .find(|p| p.session == Some((session, turn - 1)))
                .unwrap();
            let prev_tokens = prev.planned_input_tokens;
            let full_blocks = (prev_tokens * 4 - 1) / 256;
            assert!(t.cached_tokens >= full_blocks * 64, "{t:?} after {prev:?}");
            assert!(t.cached_tokens <= prev_tokens, "{t:?} after {prev:?}");
        }
    }
    assert!(later_turns >= 10);
    assert!(summary.cached_tokens > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_and_sweep_complete() {
    let s = sim(false);
    let url = format!("http://{}", s.addr);
    let open = DriveArgs {
        workload: Workload::Skewed,
        rate: Some(100.0),
        requests: Some(30),
        max_context: 2048,
        ..DriveArgs::new(url.clone())
    };
    let summary = drive(&open).await.unwrap();
    assert_eq!((summary.requests, summary.outcomes.ok), (30, 30));
    assert_eq!(
        summary.load,
        LoadModel::Open {
            rate_per_second: 100.0,
            arrivals: Arrivals::Bursty
        }
    );

    let sweep = DriveArgs {
        workload: Workload::Code,
        concurrency_steps: vec![1, 3],
        step_duration: Duration::from_millis(300),
        headers: vec![("x-sim".into(), "ttft-ms=20".into())],
        ..DriveArgs::new(url)
    };
    let summary = drive(&sweep).await.unwrap();
    assert_eq!(summary.steps.len(), 2);
    assert!(summary
        .steps
        .iter()
        .all(|st| st.requests > 0 && st.ok == st.requests));
    assert!(summary.steps[1].requests > summary.steps[0].requests);
    assert!(summary.ttft_ms.p50.unwrap() >= 20.0, "x-sim was applied");
    assert!(summary.elapsed_seconds < 2.0);
}
