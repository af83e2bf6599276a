//! What every layer knows about a tap: the boundary it sits in front of.
//! Names and addresses come from the proxy's config; the core only needs
//! the boundary (the correlator nests taps by it, labels carry it).

/// Which system a tap sits in front of (methodology boundaries, plus
/// tokentap's `guardrail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Boundary {
    Engine,
    Gateway,
    Compound,
    Guardrail,
}

impl Boundary {
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::Engine => "engine",
            Boundary::Gateway => "gateway",
            Boundary::Compound => "compound",
            Boundary::Guardrail => "guardrail",
        }
    }
}
