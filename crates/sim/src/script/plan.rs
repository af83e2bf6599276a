//! `plan`: one request's response as timed steps — the status fault, the
//! token event times (TTFT, gaps, jitter, stalls), then the OpenAI body or
//! stream (role delta, keep-alives, continuous usage, the huge-line and
//! mid-stream faults), or another dialect's (`dialects`).

use super::*;

/// Plans the response to one request.
pub fn plan(p: &Profile, req: &RequestSpec) -> Script {
    let mut b = Builder {
        steps: Vec::new(),
        rng: StdRng::seed_from_u64(p.seed.wrapping_add(req.seq)),
        split: p.split,
        line_ending: p.line_ending,
    };
    let model = req.model.clone().unwrap_or_else(|| p.model.clone());
    let id = format!("sim-{}", req.seq);
    let wait = req.sched.queue_wait;
    let t_head = wait + ms(p.header_delay_ms);
    let n_tokens = output_tokens(p, req.max_tokens);
    let prompt_tokens = req.prompt_tokens;
    let cached_tokens = req.sched.cached_tokens.min(prompt_tokens);
    let gap_ms = mean_gap_ms(p, req.sched.running);

    if let Fault::Status(code) = p.fault {
        let body = json!({"error": {"message": format!("simulated {code}"), "type": "sim_error", "code": code}}).to_string();
        let reason = http::StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        let mut bytes = head(
            code,
            reason,
            &[
                ("content-type", "application/json".into()),
                ("content-length", body.len().to_string()),
            ],
        );
        bytes.extend_from_slice(body.as_bytes());
        b.raw(t_head, bytes, Some(Mark::Body), 0);
        return b.done(prompt_tokens, 0, false);
    }

    // Token event times: first at TTFT (never before the headers), then gaps.
    let per_event = p.tokens_per_event.max(1);
    let n_events = n_tokens.div_ceil(per_event);
    let mut times = Vec::with_capacity(n_events as usize);
    let mut t = (wait + ttft(p, prompt_tokens, cached_tokens)).max(t_head);
    for i in 0..n_events {
        if let Fault::Stall(k, extra) = p.fault {
            if k == i {
                t += Duration::from_millis(extra);
            }
        }
        times.push(t);
        let jitter = if p.itl_jitter_ms > 0.0 {
            b.rng.random_range(-p.itl_jitter_ms..=p.itl_jitter_ms)
        } else {
            0.0
        };
        t += ms(gap_ms + jitter);
    }
    let t_last = times.last().copied().unwrap_or(t_head);
    let reasoning = p.reasoning_tokens.min(n_tokens);
    let usage = |completion: u32| {
        let mut u = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion, "prompt_tokens_details": {"cached_tokens": cached_tokens}});
        if reasoning > 0 {
            if let Some(obj) = u.as_object_mut() {
                obj.insert(
                    "completion_tokens_details".into(),
                    json!({"reasoning_tokens": reasoning.min(completion)}),
                );
            }
        }
        u
    };
    // Tokens `first..first + k`: random words, or their numbers with
    // `--numbered` (so a client can spot lost, repeated or reordered tokens
    // whatever a proxy does to the framing).
    let numbered = p.numbered;
    let text_of = |rng: &mut StdRng, first: u32, k: u32| -> String {
        (first..first + k)
            .map(|i| {
                if numbered {
                    format!("{i} ")
                } else {
                    format!(
                        "{} ",
                        WORDS.get(rng.random_range(0..WORDS.len())).unwrap_or(&"x")
                    )
                }
            })
            .collect()
    };
    if req.operation == Operation::Embeddings {
        let at = (wait + ttft(p, prompt_tokens, cached_tokens)).max(t_head);
        return dialects::embeddings(b, &model, at, prompt_tokens);
    }
    let tool_dialect = matches!(
        req.dialect,
        Dialect::OpenAi | Dialect::Responses | Dialect::Anthropic
    );
    if let Some(call) = req.tool_call.as_ref().filter(|_| tool_dialect) {
        let texts = tools::pieces(&call.arguments, times.len());
        let mut times = times;
        times.truncate(texts.len());
        let shape = dialects::Shape {
            dialect: req.dialect,
            stream: req.stream,
            model,
            id,
            t_head,
            tokens: vec![1; texts.len()],
            times,
            texts,
            prompt_tokens,
            cached_tokens,
            chat: true,
        };
        return tools::plan(b, &shape, call);
    }
    if req.dialect != Dialect::OpenAi {
        let (mut texts, mut tokens, mut sent) = (Vec::new(), Vec::new(), 0u32);
        for _ in &times {
            let k = per_event.min(n_tokens - sent);
            texts.push(text_of(&mut b.rng, sent, k));
            tokens.push(k);
            sent += k;
        }
        let shape = dialects::Shape {
            dialect: req.dialect,
            stream: req.stream,
            model,
            id,
            t_head,
            times,
            texts,
            tokens,
            prompt_tokens,
            cached_tokens,
            chat: req.operation == Operation::Chat,
        };
        return dialects::plan(b, &shape);
    }
    let chat = req.operation == Operation::Chat;
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };

    if !req.stream {
        let text = (0..n_events)
            .map(|e| text_of(&mut b.rng, e * per_event, per_event))
            .collect::<String>();
        let choice = if chat && reasoning > 0 {
            json!({"index": 0, "message": {"role": "assistant", "reasoning_content": "thinking", "content": text}, "finish_reason": "length"})
        } else if chat {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        } else {
            json!({"index": 0, "text": text, "finish_reason": "length"})
        };
        let body = json!({"id": id, "object": if chat {"chat.completion"} else {"text_completion"}, "created": 0, "model": model,
            "choices": [choice], "usage": usage(n_tokens)}).to_string();
        let headers = [
            ("content-type", "application/json".to_string()),
            ("content-length", body.len().to_string()),
        ];
        let mut bytes = head(200, "OK", &headers);
        let split_at = bytes.len();
        bytes.extend_from_slice(body.as_bytes());
        // Non-streaming bodies arrive when generation is done.
        match p.split {
            Split::None => b.raw(t_last, bytes, Some(Mark::Body), n_tokens),
            Split::Random => {
                let mut cuts: Vec<usize> =
                    (0..3).map(|_| b.rng.random_range(1..bytes.len())).collect();
                cuts.push(split_at);
                cuts.sort_unstable();
                cuts.dedup();
                let mut start = 0;
                let last = cuts.len();
                for (i, end) in cuts
                    .into_iter()
                    .chain(std::iter::once(bytes.len()))
                    .enumerate()
                {
                    let piece = bytes.get(start..end).unwrap_or_default().to_vec();
                    start = end;
                    let done = i == last;
                    b.raw(
                        t_last,
                        piece,
                        done.then_some(Mark::Body),
                        if done { n_tokens } else { 0 },
                    );
                }
            }
        }
        return b.done(prompt_tokens, n_tokens, false);
    }

    let headers = [
        ("content-type", "text/event-stream".to_string()),
        ("cache-control", "no-cache".to_string()),
        ("transfer-encoding", "chunked".to_string()),
        ("x-sim-request", req.seq.to_string()),
    ];
    b.raw(t_head, head(200, "OK", &headers), Some(Mark::Headers), 0);
    let chunk = |choice: serde_json::Value, usage: Option<serde_json::Value>| {
        let mut v =
            json!({"id": id, "object": object, "created": 0, "model": model, "choices": [choice]});
        if let (Some(u), Some(obj)) = (usage, v.as_object_mut()) {
            obj.insert("usage".into(), u);
        }
        v.to_string()
    };
    if chat && p.role_delta {
        let data = chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}),
            None,
        );
        b.event(t_head, &data, Mark::Role, 0);
    }
    if let Fault::HugeLine(n) = p.fault {
        let mut left = n;
        let mut first = true;
        while left > 0 {
            let take = left.min(64 * 1024);
            let mut piece = if first {
                b"data: ".to_vec()
            } else {
                Vec::new()
            };
            first = false;
            piece.resize(piece.len() + take, b'x');
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            b.raw(t_head, framed, None, 0);
            left -= take;
        }
        b.raw(t_head, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
        return b.done(prompt_tokens, 0, false);
    }
    if p.keepalive_ms > 0.0 {
        let every = ms(p.keepalive_ms);
        let mut k = t_head + every;
        let first = times.first().copied().unwrap_or(t_head);
        while k < first {
            let eol = b.eol();
            let bytes = format!(": keep-alive{eol}{eol}");
            b.chunked(k, bytes.as_bytes(), Mark::KeepAlive, 0);
            k += every;
        }
    }
    let continuous = p.continuous_usage || req.continuous_usage;
    let mut sent = 0u32;
    for (i, at) in times.iter().copied().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        match p.fault {
            Fault::Reset(k) if k == i => {
                b.steps.push(Step {
                    at,
                    action: Action::Reset,
                    mark: Some(Mark::Reset),
                    tokens: 0,
                });
                return b.done(prompt_tokens, sent, true);
            }
            Fault::Close(k) if k == i => {
                b.steps.push(Step {
                    at,
                    action: Action::Close,
                    mark: Some(Mark::Close),
                    tokens: 0,
                });
                return b.done(prompt_tokens, sent, true);
            }
            Fault::Eof(k) if k == i => {
                b.raw(at, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
                return b.done(prompt_tokens, sent, false);
            }
            Fault::Error(k) if k == i => {
                let err = json!({"error": {"message": "simulated in-stream error", "type": "server_error"}}).to_string();
                b.event(at, &err, Mark::Error, 0);
                b.event(at, "[DONE]", Mark::Done, 0);
                b.raw(at, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
                return b.done(prompt_tokens, sent, false);
            }
            Fault::Malformed(k) if k == i => {
                b.event(
                    at,
                    "{\"choices\":[{\"delta\":{\"content\":\"broken",
                    Mark::Malformed,
                    0,
                );
                continue;
            }
            _ => {}
        }
        let k = per_event.min(n_tokens - sent);
        sent += k;
        let text = text_of(&mut b.rng, sent - k, k);
        let choice = if chat && sent - k < reasoning {
            json!({"index": 0, "delta": {"reasoning_content": text}, "finish_reason": null})
        } else if chat {
            json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
        } else {
            json!({"index": 0, "text": text, "finish_reason": null})
        };
        let data = chunk(choice, continuous.then(|| usage(sent)));
        b.event(at, &data, Mark::Token, k);
    }
    let finish = if chat {
        json!({"index": 0, "delta": {}, "finish_reason": "length"})
    } else {
        json!({"index": 0, "text": "", "finish_reason": "length"})
    };
    let data = chunk(finish, continuous.then(|| usage(sent)));
    b.event(t_last, &data, Mark::Finish, 0);
    if req.include_usage || p.force_usage {
        let data = json!({"id": id, "object": object, "created": 0, "model": model, "choices": [], "usage": usage(sent)}).to_string();
        b.event(t_last, &data, Mark::Usage, 0);
    }
    b.event(t_last, "[DONE]", Mark::Done, 0);
    b.raw(t_last, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
    b.done(prompt_tokens, sent, false)
}
