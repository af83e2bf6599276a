//! Retrieval APIs read without their content: which API and operation a
//! path names, the top-k a request asks for (or the API's documented
//! default), how many inputs it carries (query vectors, documents, texts)
//! and how many results came back.
//!
//! Counted from typed views whose unread parts are skipped
//! (`IgnoredAny`): no vector, document or text is kept or even allocated.
//! An API this module does not know is an opaque call (`http`, `other`).
//!
//! Sources: Chroma 1.5's `/api/v2` routes (and v1's), Qdrant 1.19's
//! `points/search|query[/batch|/groups]|scroll`, Pinecone's data plane
//! (`/query`, `/records/namespaces/{ns}/search`), Weaviate's `/v1/graphql`,
//! Elasticsearch/OpenSearch `_search` and `_msearch`, TEI's `/rerank` and
//! `/embed`, the Cohere-shaped `/v1/rerank` and `/v2/rerank` (Cohere, Jina,
//! vLLM), vLLM's `/score`, OpenAI-shaped `/v1/embeddings`.

mod count;

use crate::record::Outcome;
pub use count::{count_results, read_request};

crate::names::label_enum! {
    /// The API a retrieval call spoke (by its shape, not its vendor).
    pub enum RetrievalSystem {
        Chroma = "chroma",
        Qdrant = "qdrant",
        Pinecone = "pinecone",
        Weaviate = "weaviate",
        Elasticsearch = "elasticsearch",
        /// Hugging Face text-embeddings-inference (`/rerank`, `/embed`).
        Tei = "tei",
        /// Cohere's rerank shape (Cohere, Jina, vLLM): `documents`, `results`.
        CohereCompatible = "cohere_compatible",
        /// OpenAI's embeddings shape (OpenAI, vLLM, TEI, LiteLLM, ...).
        OpenaiCompatible = "openai_compatible",
        /// Anything else: timed, not read.
        Http = "http",
    }
}

crate::names::label_enum! {
    /// What a retrieval call did (`gen_ai.operation.name` is `retrieval`
    /// for the searches, `embeddings` for embeddings).
    pub enum RetrievalOp {
        /// Nearest neighbours of query vectors (Chroma query, Qdrant
        /// search/query, Pinecone query, Weaviate `Get`, `_search`).
        Search = "search",
        /// Records by id or filter, no ranking (Chroma get, Qdrant scroll).
        Get = "get",
        /// Adding, updating or deleting records.
        Write = "write",
        Rerank = "rerank",
        /// Pairwise scores (vLLM `/score`).
        Score = "score",
        Embeddings = "embeddings",
        Other = "other",
    }
}

/// What a path (and HTTP method) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub system: RetrievalSystem,
    pub operation: RetrievalOp,
    /// Qdrant's and Pinecone's batch forms, `_msearch`.
    pub batch: bool,
}

impl Route {
    const OPAQUE: Route = Route {
        system: RetrievalSystem::Http,
        operation: RetrievalOp::Other,
        batch: false,
    };

    fn of(system: RetrievalSystem, operation: RetrievalOp) -> Route {
        Route {
            system,
            operation,
            batch: false,
        }
    }
}

/// Classifies a request path (query string ignored).
pub fn route(method: &str, path: &str) -> Route {
    use RetrievalOp as O;
    use RetrievalSystem as S;
    let path = path
        .split('?')
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let last = segs.last().copied().unwrap_or_default();
    let before = |n: usize| {
        segs.len()
            .checked_sub(n + 1)
            .and_then(|i| segs.get(i))
            .copied()
            .unwrap_or_default()
    };
    let chroma = segs.first() == Some(&"api") && segs.contains(&"collections");
    if chroma {
        let op = match last {
            "query" => O::Search,
            "search" => O::Search,
            "get" | "count" => O::Get,
            "add" | "upsert" | "update" | "delete" => O::Write,
            _ => return Route::of(S::Chroma, O::Other),
        };
        return Route::of(S::Chroma, op);
    }
    if segs.first() == Some(&"collections") && segs.contains(&"points") {
        let (op, batch) = match (before(1), last) {
            ("points", "search") | ("points", "query") => (O::Search, false),
            ("search", "batch") | ("query", "batch") => (O::Search, true),
            ("query", "groups") | ("search", "groups") => (O::Search, false),
            ("points", "scroll") => (O::Get, false),
            (_, "points") if method != "GET" => (O::Write, false),
            _ => (O::Other, false),
        };
        return Route {
            system: S::Qdrant,
            operation: op,
            batch,
        };
    }
    match (segs.as_slice(), last) {
        (["query"], _) => Route::of(S::Pinecone, O::Search),
        (["records", "namespaces", _, "search"], _) => Route::of(S::Pinecone, O::Search),
        (["vectors", "upsert" | "delete" | "update"], _) => Route::of(S::Pinecone, O::Write),
        (["vectors", "fetch"], _) => Route::of(S::Pinecone, O::Get),
        (["v1", "graphql"], _) => Route::of(S::Weaviate, O::Search),
        (["v1", "graphql", "batch"], _) => Route {
            batch: true,
            ..Route::of(S::Weaviate, O::Search)
        },
        (_, "_search") => Route::of(S::Elasticsearch, O::Search),
        (_, "_msearch") => Route {
            batch: true,
            ..Route::of(S::Elasticsearch, O::Search)
        },
        (["rerank"], _) => Route::of(S::Tei, O::Rerank),
        (["v1" | "v2", "rerank"], _) => Route::of(S::CohereCompatible, O::Rerank),
        (["score"] | ["v1", "score"], _) => Route::of(S::CohereCompatible, O::Score),
        (["embed"], _) => Route::of(S::Tei, O::Embeddings),
        (["v1" | "v2", "embed"], _) => Route::of(S::CohereCompatible, O::Embeddings),
        (_, "embeddings") => Route::of(S::OpenaiCompatible, O::Embeddings),
        _ => Route::OPAQUE,
    }
}

/// What a request body asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub top_k: Option<u64>,
    pub inputs: Option<u64>,
}

/// What a response body returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Returned {
    pub results: Option<u64>,
    /// A 200 answer that reports an error (Weaviate's GraphQL `errors`).
    pub error: bool,
}

/// The outcome of an exchange from its status and whether its body
/// reported an error.
pub fn outcome(status: Option<u16>, reported_error: bool) -> Outcome {
    match status {
        Some(s) if s >= 400 => Outcome::HttpError,
        _ if reported_error => Outcome::UpstreamError,
        _ => Outcome::Ok,
    }
}

#[cfg(test)]
mod tests;
