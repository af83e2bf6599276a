//! Typed label sets: every metric family's labels are one struct, so a
//! wrong number or order of label values does not compile, and Prometheus
//! and OpenTelemetry read the same set.
//!
//! Owns: the `LabelSet` trait (label names and values of one series, from
//! one struct), the `LabelKind` of each label (its name and the Rust type
//! of its value: `k::Outcome` takes a `record::Outcome`), the bounded value
//! enums that no other module owns (`values`), the bounded `model` label
//! (`model`), and the label values' documentation, generated from the
//! enums themselves (`documented`).
//!
//! Must not touch: an exporter. The proxy's sinks turn a set into a
//! Prometheus series or OpenTelemetry attributes.

mod kinds;
mod model;
mod sets;
mod values;

pub use kinds::{documented, k};
pub use model::{ModelLabel, ModelLabels, OTHER, UNKNOWN};
pub use sets::*;
pub use values::*;

use crate::names::Label;
pub use crate::names::{LabelEnum, LabelValue};

/// One label: its name (`LABEL`) and the type its values have.
pub trait LabelKind {
    const LABEL: Label;
    type Value: LabelValue;
}

/// The labels of one metric family: names and values come from the same
/// struct (see `label_set!`), so they always agree in number and order.
pub trait LabelSet {
    const LABELS: &'static [Label];
    /// The values, in the order of `LABELS`.
    fn values(&self) -> impl AsRef<[&str]>;
}

/// A label set: a struct whose fields name their label kinds (`k::*`);
/// each field's type is its kind's value type. A set may begin with
/// another set, `..tap: TapLabels`: its labels come first, composed, not
/// copied (`PerModel` is `TapLabels` plus `model` and `operation`).
macro_rules! label_set {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            ..$base:ident : $base_ty:ty
            $(, $(#[$fm:meta])* $field:ident : $kind:ident )* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name {
            pub $base: $base_ty,
            $( $(#[$fm])* pub $field: <$crate::labels::k::$kind as $crate::labels::LabelKind>::Value ),*
        }

        impl $crate::labels::LabelSet for $name {
            const LABELS: &'static [$crate::names::Label] = {
                const BASE: &[$crate::names::Label] =
                    <$base_ty as $crate::labels::LabelSet>::LABELS;
                const OWN: &[$crate::names::Label] = &[
                    $( <$crate::labels::k::$kind as $crate::labels::LabelKind>::LABEL ),*
                ];
                const ALL: [$crate::names::Label; BASE.len() + OWN.len()] =
                    $crate::labels::concat_labels(BASE, OWN);
                &ALL
            };

            #[allow(unused_imports)]
            fn values(&self) -> impl AsRef<[&str]> {
                use $crate::labels::LabelValue;
                const N: usize = <$name as $crate::labels::LabelSet>::LABELS.len();
                let base = $crate::labels::LabelSet::values(&self.$base);
                let own = [$( self.$field.label_value() ),*];
                let mut out: [&str; N] = [""; N];
                for (slot, v) in out.iter_mut().zip(base.as_ref().iter().chain(own.iter())) {
                    *slot = v;
                }
                out
            }
        }
    };
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* $field:ident : $kind:ident ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name {
            $( $(#[$fm])* pub $field: <$crate::labels::k::$kind as $crate::labels::LabelKind>::Value ),*
        }

        impl $crate::labels::LabelSet for $name {
            const LABELS: &'static [$crate::names::Label] = &[
                $( <$crate::labels::k::$kind as $crate::labels::LabelKind>::LABEL ),*
            ];

            #[allow(unused_imports)]
            fn values(&self) -> impl AsRef<[&str]> {
                use $crate::labels::LabelValue;
                let v: [&str; <[&str]>::len(&[$(stringify!($field)),*])] =
                    [$( self.$field.label_value() ),*];
                v
            }
        }
    };
}
pub(crate) use label_set;

/// `a` then `b`, as one array of `N` labels (a composed label set's
/// labels, at compile time).
// The lints against indexing guard the measuring path; this runs at
// compile time, where an index out of bounds is a build error.
#[allow(clippy::indexing_slicing)]
pub const fn concat_labels<const N: usize>(a: &[Label], b: &[Label]) -> [Label; N] {
    let mut out = [Label::Tap; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[i + j] = b[j];
        j += 1;
    }
    out
}

/// "`a`, `b`, `c`": the values of an enum, for the docs.
pub fn list<E: LabelEnum>() -> String {
    E::values()
        .iter()
        .map(|v| format!("`{}`", v.label_value()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
