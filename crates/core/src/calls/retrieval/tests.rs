use super::*;
use serde_json::json;
use std::path::Path;

/// The Chroma Python client (1.5.9) against `chroma run`, recorded by a
/// logging proxy: (method, path, request body, status, response body).
fn chroma_capture() -> Vec<(String, String, String, u16, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/retrieval/chroma-1.5.9.log");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<(String, String, String, u16, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(">>> ") {
            if let Some((m, p)) = rest.split_once(' ') {
                if matches!(m, "GET" | "POST" | "PUT" | "DELETE") {
                    out.extend(cur.take());
                    cur = Some((m.into(), p.into(), String::new(), 0, String::new()));
                    continue;
                }
            }
            if let (Some(b), Some(c)) = (rest.strip_prefix("BODY "), cur.as_mut()) {
                c.2 = b.into();
            }
        } else if let Some(rest) = line.strip_prefix("<<< ") {
            let Some(c) = cur.as_mut() else { continue };
            if let Some(b) = rest.strip_prefix("BODY ") {
                c.4 = b.into();
            } else if let Some(code) = rest.split(' ').next().and_then(|s| s.parse().ok()) {
                c.3 = code;
            }
        }
    }
    out.extend(cur);
    out
}

#[test]
fn a_recorded_chroma_session_is_read_call_by_call() {
    let got: Vec<_> = chroma_capture()
        .iter()
        .map(|(m, p, req, _, resp)| {
            let r = route(m, p);
            (
                r.system,
                r.operation,
                read_request(r, req.as_bytes()),
                count_results(r, resp.as_bytes()).results,
            )
        })
        .collect();
    let ops: Vec<RetrievalOp> = got.iter().map(|g| g.1).collect();
    use RetrievalOp as O;
    assert_eq!(
        ops,
        [
            O::Other,
            O::Other,
            O::Other,
            O::Other,
            O::Other,
            O::Other,
            O::Write,
            O::Get,
            O::Search,
            O::Search,
            O::Get,
            O::Write,
            O::Write,
            O::Get
        ]
    );
    // The heartbeat and the like are Chroma's, unread; tenants too.
    // query: two query vectors, n_results 3, six results.
    let q = &got[8];
    assert_eq!(q.0, RetrievalSystem::Chroma);
    assert_eq!(
        q.2,
        Asked {
            top_k: Some(3),
            inputs: Some(2)
        }
    );
    assert_eq!(q.3, Some(6));
    // query2: one vector, n_results 2, a filter: two results.
    assert_eq!((got[9].2.top_k, got[9].3), (Some(2), Some(2)));
    // get by id: one record.
    assert_eq!(got[10].3, Some(1));
}

#[test]
fn routes_of_every_api() {
    use RetrievalOp as O;
    use RetrievalSystem as S;
    let r = |m, p| {
        let r = route(m, p);
        (r.system, r.operation, r.batch)
    };
    assert_eq!(
        r("POST", "/collections/docs/points/search"),
        (S::Qdrant, O::Search, false)
    );
    assert_eq!(
        r("POST", "/collections/docs/points/search/batch"),
        (S::Qdrant, O::Search, true)
    );
    assert_eq!(
        r("POST", "/collections/docs/points/query"),
        (S::Qdrant, O::Search, false)
    );
    assert_eq!(
        r("POST", "/collections/docs/points/query/groups"),
        (S::Qdrant, O::Search, false)
    );
    assert_eq!(
        r("POST", "/collections/docs/points/scroll"),
        (S::Qdrant, O::Get, false)
    );
    assert_eq!(
        r("PUT", "/collections/docs/points?wait=true"),
        (S::Qdrant, O::Write, false)
    );
    assert_eq!(r("POST", "/query"), (S::Pinecone, O::Search, false));
    assert_eq!(
        r("POST", "/records/namespaces/ns1/search"),
        (S::Pinecone, O::Search, false)
    );
    assert_eq!(r("POST", "/v1/graphql"), (S::Weaviate, O::Search, false));
    assert_eq!(
        r("POST", "/products/_search"),
        (S::Elasticsearch, O::Search, false)
    );
    assert_eq!(
        r("GET", "/_search?q=x"),
        (S::Elasticsearch, O::Search, false)
    );
    assert_eq!(
        r("POST", "/idx/_msearch"),
        (S::Elasticsearch, O::Search, true)
    );
    assert_eq!(r("POST", "/rerank"), (S::Tei, O::Rerank, false));
    assert_eq!(
        r("POST", "/v1/rerank"),
        (S::CohereCompatible, O::Rerank, false)
    );
    assert_eq!(
        r("POST", "/v2/rerank"),
        (S::CohereCompatible, O::Rerank, false)
    );
    assert_eq!(r("POST", "/score"), (S::CohereCompatible, O::Score, false));
    assert_eq!(r("POST", "/embed"), (S::Tei, O::Embeddings, false));
    assert_eq!(
        r("POST", "/v2/embed"),
        (S::CohereCompatible, O::Embeddings, false)
    );
    assert_eq!(
        r("POST", "/v1/embeddings"),
        (S::OpenaiCompatible, O::Embeddings, false)
    );
    assert_eq!(r("POST", "/search-the-web"), (S::Http, O::Other, false));
}

fn asked(m: &str, p: &str, body: serde_json::Value) -> Asked {
    read_request(route(m, p), body.to_string().as_bytes())
}

fn returned(m: &str, p: &str, body: serde_json::Value) -> Option<u64> {
    count_results(route(m, p), body.to_string().as_bytes()).results
}

/// Shapes from each API's reference (Qdrant 1.19 OpenAPI, Pinecone
/// 2026-04, Weaviate, Elasticsearch, TEI, Cohere v2, vLLM, OpenAI).
#[test]
fn top_k_and_results_of_every_api() {
    let p = "/collections/c/points/search";
    assert_eq!(
        asked("POST", p, json!({"vector": [0.1], "limit": 5})).top_k,
        Some(5)
    );
    assert_eq!(
        asked("POST", p, json!({"vector": [0.1], "top": 4})).top_k,
        Some(4)
    );
    assert_eq!(
        returned(
            "POST",
            p,
            json!({"status": "ok", "result": [{"id": 1, "score": 0.9}, {"id": 2, "score": 0.8}]})
        ),
        Some(2)
    );
    let b = "/collections/c/points/search/batch";
    assert_eq!(
        asked(
            "POST",
            b,
            json!({"searches": [{"vector": [1], "limit": 3}, {"vector": [2], "limit": 3}]})
        ),
        Asked {
            top_k: Some(3),
            inputs: Some(2)
        }
    );
    assert_eq!(
        returned(
            "POST",
            b,
            json!({"result": [[{"id": 1}], [{"id": 2}, {"id": 3}]]})
        ),
        Some(3)
    );
    let q = "/collections/c/points/query";
    assert_eq!(
        asked("POST", q, json!({"query": [0.1]})).top_k,
        Some(10),
        "Qdrant's default"
    );
    assert_eq!(
        returned(
            "POST",
            q,
            json!({"result": {"points": [{"id": 1}, {"id": 2}]}})
        ),
        Some(2)
    );
    let g = "/collections/c/points/query/groups";
    assert_eq!(
        returned(
            "POST",
            g,
            json!({"result": {"groups": [{"id": 1, "hits": [{"id": 1}, {"id": 2}]}, {"id": 2, "hits": [{"id": 3}]}]}})
        ),
        Some(3)
    );
    assert_eq!(
        asked("POST", "/query", json!({"vector": [0.1], "topK": 7})).top_k,
        Some(7)
    );
    assert_eq!(
        returned(
            "POST",
            "/query",
            json!({"matches": [{"id": "a", "score": 1.0}], "namespace": ""})
        ),
        Some(1)
    );
    let ps = "/records/namespaces/ns/search";
    assert_eq!(
        asked(
            "POST",
            ps,
            json!({"query": {"top_k": 4, "inputs": {"text": "x"}}})
        )
        .top_k,
        Some(4)
    );
    assert_eq!(
        returned(
            "POST",
            ps,
            json!({"result": {"hits": [{"_id": "a"}, {"_id": "b"}]}})
        ),
        Some(2)
    );
    let w = "/v1/graphql";
    assert_eq!(
        asked(
            "POST",
            w,
            json!({"query": "{ Get { Article(limit: 5, nearVector: {vector: [0.1]}) { title } } }"})
        )
        .top_k,
        Some(5)
    );
    assert_eq!(
        returned(
            "POST",
            w,
            json!({"data": {"Get": {"Article": [{"title": "a"}, {"title": "b"}]}}})
        ),
        Some(2)
    );
    let err = count_results(
        route("POST", w),
        br#"{"data":{"Get":{"Article":null}},"errors":[{"message":"x"}]}"#,
    );
    assert!(err.error);
    assert_eq!(
        outcome(Some(200), err.error),
        crate::record::Outcome::UpstreamError
    );
    let es = "/idx/_search";
    assert_eq!(
        asked("POST", es, json!({"query": {"match_all": {}}})).top_k,
        Some(10),
        "size's default"
    );
    assert_eq!(
        asked(
            "POST",
            es,
            json!({"knn": {"field": "v", "query_vector": [1], "k": 5}})
        )
        .top_k,
        Some(5)
    );
    assert_eq!(
        asked(
            "POST",
            es,
            json!({"size": 3, "knn": {"field": "v", "k": 5}})
        )
        .top_k,
        Some(3),
        "min(size, k)"
    );
    assert_eq!(
        returned(
            "POST",
            es,
            json!({"hits": {"total": {"value": 100}, "hits": [{"_id": 1}, {"_id": 2}]}})
        ),
        Some(2)
    );
    let ms = read_request(
        route("POST", "/_msearch"),
        b"{}\n{\"query\":{}}\n{\"index\":\"i\"}\n{\"query\":{}}\n",
    );
    assert_eq!(ms.inputs, Some(2));
    assert_eq!(
        returned(
            "POST",
            "/_msearch",
            json!({"responses": [{"hits": {"hits": [1, 2]}}, {"hits": {"hits": [3]}}]})
        ),
        Some(3)
    );
    assert_eq!(
        asked(
            "POST",
            "/rerank",
            json!({"query": "q", "texts": ["a", "b", "c"]})
        ),
        Asked {
            top_k: Some(3),
            inputs: Some(3)
        }
    );
    assert_eq!(
        returned(
            "POST",
            "/rerank",
            json!([{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}])
        ),
        Some(2)
    );
    assert_eq!(
        asked(
            "POST",
            "/v2/rerank",
            json!({"model": "m", "query": "q", "documents": ["a", "b", "c"], "top_n": 2})
        ),
        Asked {
            top_k: Some(2),
            inputs: Some(3)
        }
    );
    assert_eq!(
        asked(
            "POST",
            "/v1/rerank",
            json!({"query": "q", "documents": ["a", "b"], "top_n": 0})
        )
        .top_k,
        Some(2),
        "vLLM's 0: all"
    );
    assert_eq!(
        returned(
            "POST",
            "/v2/rerank",
            json!({"id": "x", "results": [{"index": 1, "relevance_score": 0.5}]})
        ),
        Some(1)
    );
    assert_eq!(
        returned(
            "POST",
            "/score",
            json!({"data": [{"index": 0, "score": 0.5}, {"index": 1, "score": 0.2}]})
        ),
        Some(2)
    );
    assert_eq!(
        asked(
            "POST",
            "/v1/embeddings",
            json!({"model": "m", "input": ["a", "b"]})
        )
        .inputs,
        Some(2)
    );
    assert_eq!(
        asked(
            "POST",
            "/v1/embeddings",
            json!({"model": "m", "input": "a"})
        )
        .inputs,
        Some(1)
    );
    assert_eq!(
        asked("POST", "/embed", json!({"inputs": ["a", "b", "c"]})).inputs,
        Some(3)
    );
    assert_eq!(returned("POST", "/embed", json!([[0.1], [0.2]])), Some(2));
    assert_eq!(
        returned(
            "POST",
            "/v1/embeddings",
            json!({"data": [{"embedding": [0.1]}], "model": "m"})
        ),
        Some(1)
    );
    assert_eq!(
        returned(
            "POST",
            "/v2/embed",
            json!({"embeddings": {"float": [[0.1], [0.2]]}})
        ),
        Some(2)
    );
    // Something else at a known path: nothing counted, nothing broken.
    assert_eq!(
        returned("POST", "/query", json!({"unexpected": true})),
        None
    );
    assert_eq!(
        count_results(route("POST", "/query"), b"\xff\xfe").results,
        None
    );
}
