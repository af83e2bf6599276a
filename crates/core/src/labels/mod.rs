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

use crate::table::Label;
use std::sync::Arc;

/// One label value as it appears in a series.
pub trait LabelValue {
    fn label_value(&self) -> &str;
}

/// A value type with a closed list of values (an enum): the docs list them.
pub trait LabelEnum: LabelValue + Sized + 'static {
    fn values() -> &'static [Self];
}

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

impl LabelValue for Arc<str> {
    fn label_value(&self) -> &str {
        self
    }
}

impl LabelValue for &'static str {
    fn label_value(&self) -> &str {
        self
    }
}

impl LabelValue for bool {
    fn label_value(&self) -> &str {
        if *self {
            "true"
        } else {
            "false"
        }
    }
}

/// A bounded enum with its label values, `ALL` (every variant, in order)
/// and `as_str`, from one list: a new variant is in `ALL` and in the docs
/// without anyone remembering to add it.
macro_rules! label_enum {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vm:meta])* $variant:ident = $s:literal ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vm])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; <[&str]>::len(&[$(stringify!($variant)),+])] =
                [$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $s ),+
                }
            }

            /// The value whose label is `s`.
            pub fn from_label(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl $crate::labels::LabelValue for $name {
            fn label_value(&self) -> &str {
                self.as_str()
            }
        }

        impl $crate::labels::LabelEnum for $name {
            fn values() -> &'static [Self] {
                &Self::ALL
            }
        }
    };
}
pub(crate) use label_enum;

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
            const LABELS: &'static [$crate::table::Label] = {
                const BASE: &[$crate::table::Label] =
                    <$base_ty as $crate::labels::LabelSet>::LABELS;
                const OWN: &[$crate::table::Label] = &[
                    $( <$crate::labels::k::$kind as $crate::labels::LabelKind>::LABEL ),*
                ];
                const ALL: [$crate::table::Label; BASE.len() + OWN.len()] =
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
            const LABELS: &'static [$crate::table::Label] = &[
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
