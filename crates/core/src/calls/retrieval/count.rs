//! Reading a retrieval request's top-k and inputs and counting a
//! response's results, each API from a typed view (nothing but numbers and
//! lengths is read; the rest is skipped unallocated).

use super::{Asked, RetrievalOp as O, RetrievalSystem as S, Returned, Route};
use serde::de::IgnoredAny;
use serde::Deserialize;

type Skip = IgnoredAny;

/// A JSON array's length without reading its items.
#[derive(Debug, Default)]
struct Len(u64);

impl<'de> Deserialize<'de> for Len {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<Skip> = Vec::deserialize(d)?;
        Ok(Len(v.len() as u64))
    }
}

/// A string is one input, an array of them many.
#[derive(Debug)]
struct Inputs(u64);

impl<'de> Deserialize<'de> for Inputs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum One {
            Many(Vec<Skip>),
            One(Skip),
        }
        Ok(match One::deserialize(d)? {
            One::Many(v) => Inputs(v.len() as u64),
            One::One(_) => Inputs(1),
        })
    }
}

fn json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

/// Top-k and inputs of a request body.
pub fn read_request(route: Route, body: &[u8]) -> Asked {
    match (route.system, route.operation) {
        (S::Chroma, O::Search) => {
            #[derive(Deserialize)]
            struct Q {
                query_embeddings: Option<Len>,
                n_results: Option<u64>,
                searches: Option<Len>,
            }
            json::<Q>(body).map_or_else(Asked::default, |q| Asked {
                // Chroma's server default is 10 (`n_results.unwrap_or(10)`).
                top_k: q.n_results.or(q.query_embeddings.as_ref().map(|_| 10)),
                inputs: q.query_embeddings.or(q.searches).map(|l| l.0),
            })
        }
        (S::Chroma, O::Get) => {
            #[derive(Deserialize)]
            struct G {
                limit: Option<u64>,
            }
            Asked {
                top_k: json::<G>(body).and_then(|g| g.limit),
                inputs: None,
            }
        }
        (S::Qdrant, O::Search) if route.batch => {
            #[derive(Deserialize)]
            struct B {
                searches: Vec<L>,
            }
            #[derive(Deserialize)]
            struct L {
                #[serde(alias = "top")]
                limit: Option<u64>,
            }
            json::<B>(body).map_or_else(Asked::default, |b| Asked {
                top_k: b.searches.first().map(|s| s.limit.unwrap_or(10)),
                inputs: Some(b.searches.len() as u64),
            })
        }
        (S::Qdrant, O::Search | O::Get) => {
            #[derive(Deserialize)]
            struct L {
                #[serde(alias = "top")]
                limit: Option<u64>,
            }
            Asked {
                // Qdrant's DEFAULT_LIMIT is 10.
                top_k: json::<L>(body).map(|l| l.limit.unwrap_or(10)),
                inputs: Some(1),
            }
        }
        (S::Pinecone, O::Search) => {
            #[derive(Deserialize)]
            struct P {
                #[serde(rename = "topK")]
                top_k: Option<u64>,
                queries: Option<Len>,
                query: Option<R>,
            }
            #[derive(Deserialize)]
            struct R {
                top_k: Option<u64>,
            }
            json::<P>(body).map_or_else(Asked::default, |p| Asked {
                top_k: p.top_k.or(p.query.and_then(|q| q.top_k)),
                inputs: Some(p.queries.map_or(1, |q| q.0)),
            })
        }
        (S::Weaviate, O::Search) if !route.batch => {
            #[derive(Deserialize)]
            struct G {
                query: String,
            }
            Asked {
                top_k: json::<G>(body).and_then(|g| graphql_limit(&g.query)),
                inputs: Some(1),
            }
        }
        (S::Elasticsearch, O::Search) if !route.batch => {
            #[derive(Deserialize)]
            struct E {
                size: Option<u64>,
                knn: Option<Knn>,
            }
            #[derive(Deserialize)]
            #[serde(untagged)]
            #[allow(dead_code)]
            enum Knn {
                One { k: Option<u64> },
                Many(Vec<Skip>),
            }
            let e = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                json::<E>(body)
            };
            let size = e.as_ref().and_then(|e| e.size).unwrap_or(10);
            let k = match e.as_ref().and_then(|e| e.knn.as_ref()) {
                Some(Knn::One { k }) => Some(k.unwrap_or(size).min(size)),
                _ => None,
            };
            Asked {
                top_k: Some(k.unwrap_or(size)),
                inputs: Some(1),
            }
        }
        (S::Elasticsearch, O::Search) => Asked {
            top_k: None,
            // NDJSON: a header line and a body line per search.
            inputs: Some(
                (body
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                    .count()
                    / 2) as u64,
            ),
        },
        (S::Tei, O::Rerank) => {
            #[derive(Deserialize)]
            struct T {
                texts: Option<Len>,
            }
            let n = json::<T>(body).and_then(|t| t.texts).map(|l| l.0);
            Asked {
                top_k: n,
                inputs: n,
            }
        }
        (S::CohereCompatible, O::Rerank) => {
            #[derive(Deserialize)]
            struct C {
                documents: Option<Len>,
                top_n: Option<u64>,
            }
            json::<C>(body).map_or_else(Asked::default, |c| {
                let docs = c.documents.map(|d| d.0);
                Asked {
                    // Absent (or vLLM's 0): every document.
                    top_k: c.top_n.filter(|n| *n > 0).or(docs),
                    inputs: docs,
                }
            })
        }
        (_, O::Embeddings) => {
            #[derive(Deserialize)]
            struct E {
                #[serde(alias = "inputs", alias = "texts")]
                input: Option<Inputs>,
            }
            Asked {
                top_k: None,
                inputs: json::<E>(body).and_then(|e| e.input).map(|i| i.0),
            }
        }
        _ => Asked::default(),
    }
}

/// The first `limit: N` of a GraphQL query (Weaviate's `Get` arguments).
fn graphql_limit(q: &str) -> Option<u64> {
    let at = q.find("limit")?;
    let rest = q
        .get(at + "limit".len()..)?
        .trim_start()
        .strip_prefix(':')?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Results of a response body.
pub fn count_results(route: Route, body: &[u8]) -> Returned {
    let results = match (route.system, route.operation) {
        (S::Chroma, O::Search) => {
            #[derive(Deserialize)]
            struct Q {
                ids: Vec<Len>,
            }
            json::<Q>(body).map(|q| q.ids.iter().map(|l| l.0).sum())
        }
        (S::Chroma, O::Get) => {
            #[derive(Deserialize)]
            struct G {
                ids: Len,
            }
            json::<G>(body).map(|g| g.ids.0)
        }
        (S::Qdrant, O::Search | O::Get) => {
            #[derive(Deserialize)]
            struct R {
                result: Res,
            }
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Res {
                Batch(Vec<Vec<Skip>>),
                Points(Vec<PointsOrHits>),
                One(PointsOrHits),
            }
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum PointsOrHits {
                Points { points: Len },
                Groups { groups: Vec<Hits> },
                Point(Skip),
            }
            #[derive(Deserialize)]
            struct Hits {
                hits: Len,
            }
            fn n(p: &PointsOrHits) -> u64 {
                match p {
                    PointsOrHits::Points { points } => points.0,
                    PointsOrHits::Groups { groups } => groups.iter().map(|g| g.hits.0).sum(),
                    PointsOrHits::Point(_) => 1,
                }
            }
            json::<R>(body).map(|r| match r.result {
                Res::Batch(b) => b.iter().map(|v| v.len() as u64).sum(),
                Res::Points(v) => v.iter().map(n).sum(),
                Res::One(p) => n(&p),
            })
        }
        (S::Pinecone, O::Search) => {
            #[derive(Deserialize)]
            struct P {
                matches: Option<Len>,
                results: Option<Vec<M>>,
                result: Option<H>,
            }
            #[derive(Deserialize)]
            struct M {
                matches: Len,
            }
            #[derive(Deserialize)]
            struct H {
                hits: Len,
            }
            json::<P>(body).and_then(|p| {
                p.matches
                    .map(|m| m.0)
                    .or(p.results.map(|r| r.iter().map(|m| m.matches.0).sum()))
                    .or(p.result.map(|h| h.hits.0))
            })
        }
        (S::Weaviate, O::Search) => return weaviate(body),
        (S::Elasticsearch, O::Search) => {
            #[derive(Deserialize)]
            struct E {
                hits: Option<Hits>,
                responses: Option<Vec<E2>>,
            }
            #[derive(Deserialize)]
            struct E2 {
                hits: Option<Hits>,
            }
            #[derive(Deserialize)]
            struct Hits {
                hits: Len,
            }
            json::<E>(body).and_then(|e| {
                e.hits.map(|h| h.hits.0).or(e.responses.map(|r| {
                    r.iter()
                        .filter_map(|x| x.hits.as_ref())
                        .map(|h| h.hits.0)
                        .sum()
                }))
            })
        }
        (S::Tei, O::Rerank | O::Embeddings) => json::<Len>(body).map(|l| l.0),
        (S::CohereCompatible, O::Rerank) => {
            #[derive(Deserialize)]
            struct C {
                results: Len,
            }
            json::<C>(body).map(|c| c.results.0)
        }
        (_, O::Score) | (S::OpenaiCompatible, O::Embeddings) => {
            #[derive(Deserialize)]
            struct D {
                data: Len,
            }
            json::<D>(body).map(|d| d.data.0)
        }
        (S::CohereCompatible, O::Embeddings) => {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum E {
                Typed { embeddings: Typed },
                Plain { embeddings: Len },
            }
            #[derive(Deserialize)]
            struct Typed {
                float: Option<Len>,
                int8: Option<Len>,
            }
            json::<E>(body).and_then(|e| match e {
                E::Typed { embeddings } => embeddings.float.or(embeddings.int8).map(|l| l.0),
                E::Plain { embeddings } => Some(embeddings.0),
            })
        }
        _ => None,
    };
    Returned {
        results,
        error: false,
    }
}

/// Weaviate GraphQL: `data.Get.<Class>` arrays summed; `errors` reported.
fn weaviate(body: &[u8]) -> Returned {
    #[derive(Deserialize)]
    struct G {
        data: Option<D>,
        errors: Option<Len>,
    }
    #[derive(Deserialize)]
    struct D {
        #[serde(rename = "Get")]
        get: Option<std::collections::BTreeMap<String, Option<Len>>>,
    }
    let Some(g) = json::<G>(body) else {
        return Returned::default();
    };
    Returned {
        results: g
            .data
            .and_then(|d| d.get)
            .map(|m| m.values().flatten().map(|l| l.0).sum()),
        error: g.errors.is_some_and(|e| e.0 > 0),
    }
}
