//! The demo's compound system: the reference app (`tokentap app`: an LLM
//! call answered with a tool call, the MCP tool, the answer's LLM call
//! streamed back) behind a compound tap, its LLM calls through the demo's
//! engine tap, its MCP calls through a tool tap to the simulator's MCP
//! server; a slow stream of questions to it; and the table's line of where
//! its requests' time went, from the registry as a dashboard would read it
//! (`tokentap_compound_part_seconds`, E2E, per request over the interval).

use prometheus::Registry;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokentap_core::correlate::compound::Part;
use tokentap_core::table;
use tokentap_net::client;
use tokio::sync::watch;

/// The compound tap's name in the demo.
pub const TAP: &str = "app";

/// Per part, the E2E seconds summed; and the requests counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parts {
    pub seconds: BTreeMap<&'static str, f64>,
    pub requests: u64,
}

impl Parts {
    pub fn take(registry: &Registry) -> Parts {
        let mut p = Parts::default();
        for f in registry
            .gather()
            .iter()
            .filter(|f| f.name() == table::COMPOUND_PART.name)
        {
            for m in f.get_metric() {
                let label = |k: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == k)
                        .map(|l| l.value().to_owned())
                };
                if label("tap").as_deref() != Some(TAP) || label("window").as_deref() != Some("e2e")
                {
                    continue;
                }
                let Some(part) = label("part").and_then(|v| Part::from_label(&v)) else {
                    continue;
                };
                let h = m.get_histogram();
                *p.seconds.entry(part.as_str()).or_default() += h.get_sample_sum();
                if part == Part::Residual {
                    p.requests += h.get_sample_count();
                }
            }
        }
        p
    }
}

/// "app (compound): 3 requests, E2E mean 131.2 ms = llm 60.1 + tool 51.0 +
/// residual 20.1" over the interval, or `None` without requests.
pub fn line(prev: &Parts, cur: &Parts) -> Option<String> {
    let n = cur.requests.saturating_sub(prev.requests);
    if n == 0 {
        return None;
    }
    let mean = |k: &str| {
        let d = cur.seconds.get(k).copied().unwrap_or(0.0)
            - prev.seconds.get(k).copied().unwrap_or(0.0);
        d / n as f64 * 1e3
    };
    let parts: Vec<String> = Part::ALL
        .iter()
        .map(|p| (p.as_str(), mean(p.as_str())))
        .filter(|(_, v)| *v >= 0.05)
        .map(|(k, v)| format!("{k} {v:.1}"))
        .collect();
    let total: f64 = Part::ALL.iter().map(|p| mean(p.as_str())).sum();
    Some(format!(
        "  {TAP} (compound): {n} request{}, E2E mean {total:.1} ms = {}",
        if n == 1 { "" } else { "s" },
        parts.join(" + ")
    ))
}

/// One question at a time to the app's tap, every `every`, until `stop`.
pub async fn traffic(app_tap: SocketAddr, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut i = 0u64;
    loop {
        i += 1;
        let body = json!({"model": "sim-model", "stream": true,
            "messages": [{"role": "user", "content": format!("Weather in city {}?", i % 7)}]})
        .to_string();
        let _ = client::send(
            app_tap,
            "POST",
            "/v1/chat/completions",
            &[("content-type", "application/json")],
            body.as_bytes(),
        )
        .await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_the_mean_per_request_over_the_interval() {
        let prev = Parts {
            seconds: [("llm", 0.1), ("tool", 0.05), ("residual", 0.01)].into(),
            requests: 1,
        };
        let cur = Parts {
            seconds: [("llm", 0.3), ("tool", 0.15), ("residual", 0.03)].into(),
            requests: 3,
        };
        assert_eq!(
            line(&prev, &cur).unwrap(),
            "  app (compound): 2 requests, E2E mean 160.0 ms = llm 100.0 + tool 50.0 + residual 10.0"
        );
        assert_eq!(line(&cur, &cur), None);
    }
}
