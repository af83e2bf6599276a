//! What every layer knows about a tap: the boundary it sits in front of.
//! Names and addresses come from the proxy's config; the core only needs
//! the boundary (the correlator nests taps by it, labels carry it).

crate::names::label_enum! {
    /// Which system a tap sits in front of (methodology boundaries, plus
    /// the services a gateway or a compound system calls: `guardrail`,
    /// `tool` — MCP servers and plain HTTP tools — and `retrieval`).
    pub enum Boundary {
        Engine = "engine",
        Gateway = "gateway",
        Compound = "compound",
        Guardrail = "guardrail",
        Tool = "tool",
        Retrieval = "retrieval",
    }
}

impl Boundary {
    /// A service called on a request's behalf, timed per call (not an LLM
    /// layer that nests).
    pub fn is_service(self) -> bool {
        matches!(
            self,
            Boundary::Guardrail | Boundary::Tool | Boundary::Retrieval
        )
    }
}
