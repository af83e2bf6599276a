//! What every layer knows about a tap: the boundary it sits in front of.
//! Names and addresses come from the proxy's config; the core only needs
//! the boundary (the correlator nests taps by it, labels carry it).

crate::names::label_enum! {
    /// Which system a tap sits in front of (methodology boundaries, plus
    /// tokentap's `guardrail`).
    pub enum Boundary {
        Engine = "engine",
        Gateway = "gateway",
        Compound = "compound",
        Guardrail = "guardrail",
    }
}
