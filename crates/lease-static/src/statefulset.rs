//! The StatefulSet strategy: the machine ID is the pod ordinal, read from an environment variable.

use std::env::VarError;

use lease_core::{ErrorKind, LeaseError, MachineId};

/// The floor file, here too for `with_floor_file`.
pub use crate::floor_file::{FloorFile, FloorFileError};

/// The variable read by [`StatefulSetStrategy::from_env`]: the pod name, which ends in the ordinal.
pub const DEFAULT_VARIABLE: &str = "POD_NAME";

/// Why the StatefulSet strategy could not derive a machine ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatefulSetLeaseError {
    /// The variable is not set.
    #[error(
        "environment variable {variable} is not set; set it to the pod name, for example with \
         the Downward API (valueFrom.fieldRef.fieldPath: metadata.name)"
    )]
    MissingVariable {
        /// The variable's name.
        variable: String,
    },
    /// The variable is set but not valid Unicode.
    #[error("environment variable {variable} is not valid unicode; set it to the pod name")]
    NotUnicode {
        /// The variable's name.
        variable: String,
    },
    /// The value does not end in digits.
    #[error(
        "value {value:?} of {variable} does not end in digits; expected a StatefulSet pod name \
         such as nonce-worker-7"
    )]
    NoTrailingDigits {
        /// The variable's name.
        variable: String,
        /// Its value.
        value: String,
    },
    /// The ordinal plus the offset is above 511.
    #[error(
        "ordinal {ordinal} of {variable} plus offset {offset} is outside the machine ids \
         0..={max}; lower the offset or the StatefulSet's replica count",
        max = MachineId::MAX
    )]
    OutOfRange {
        /// The variable's name.
        variable: String,
        /// The trailing digits of its value.
        ordinal: String,
        /// The configured offset.
        offset: u16,
    },
}

impl LeaseError for StatefulSetLeaseError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Misconfigured
    }
}

/// Machine ID = offset + the trailing digits of an environment variable, typically a
/// StatefulSet pod's name (`nonce-worker-7` → 7). Deterministic.
///
/// See the crate docs for the force-delete caveat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetStrategy {
    id: MachineId,
    variable: String,
    floor: Option<crate::FloorFile>,
    timing: crate::Timing,
}

impl StatefulSetStrategy {
    /// Reads `variable` from the environment, with no offset.
    ///
    /// # Errors
    /// A [`StatefulSetLeaseError`] saying what to fix.
    pub fn from_env(variable: &str) -> Result<Self, StatefulSetLeaseError> {
        Self::from_env_with_offset(variable, 0)
    }

    /// Reads `variable` from the environment and adds `offset` to its ordinal, so several
    /// StatefulSets can share the ID space (for example offsets 0 and 256).
    ///
    /// # Errors
    /// A [`StatefulSetLeaseError`] saying what to fix.
    pub fn from_env_with_offset(
        variable: &str,
        offset: u16,
    ) -> Result<Self, StatefulSetLeaseError> {
        let named = variable.to_owned();
        Err(match std::env::var(variable) {
            Ok(value) => return Self::from_value(variable, &value, offset),
            Err(VarError::NotPresent) => StatefulSetLeaseError::MissingVariable { variable: named },
            Err(VarError::NotUnicode(_)) => StatefulSetLeaseError::NotUnicode { variable: named },
        })
    }

    /// Derives the ID from `value`, as if read from `variable` (named in errors and logs).
    ///
    /// # Errors
    /// A [`StatefulSetLeaseError`] saying what to fix.
    pub fn from_value(
        variable: &str,
        value: &str,
        offset: u16,
    ) -> Result<Self, StatefulSetLeaseError> {
        let id = ordinal_id(value, offset).map_err(|digits| match digits {
            None => StatefulSetLeaseError::NoTrailingDigits {
                variable: variable.to_owned(),
                value: value.to_owned(),
            },
            Some(ordinal) => StatefulSetLeaseError::OutOfRange {
                variable: variable.to_owned(),
                ordinal,
                offset,
            },
        })?;
        Ok(Self {
            id,
            variable: variable.to_owned(),
            floor: None,
            timing: crate::Timing::default(),
        })
    }

    /// The machine ID this node uses.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.id
    }

    /// The variable the ID came from.
    #[must_use]
    pub fn variable(&self) -> &str {
        &self.variable
    }
}

/// `offset` + the trailing ASCII digits of `value`. `Err(None)`: no trailing digits;
/// `Err(Some(digits))`: out of range.
fn ordinal_id(value: &str, offset: u16) -> Result<MachineId, Option<String>> {
    let prefix = value.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &value[prefix.len()..];
    if digits.is_empty() {
        return Err(None);
    }
    // Too many digits for a u16 is out of range like any other large ordinal.
    digits
        .parse::<u16>()
        .ok()
        .and_then(|ordinal| ordinal.checked_add(offset))
        .and_then(|id| MachineId::new(id).ok())
        .ok_or_else(|| Some(digits.to_owned()))
}

fixed_id_strategy!(StatefulSetStrategy, "statefulset");

#[cfg(test)]
mod tests {
    use super::*;

    fn id(value: &str, offset: u16) -> Result<u16, StatefulSetLeaseError> {
        StatefulSetStrategy::from_value("POD_NAME", value, offset).map(|s| s.machine_id().get())
    }

    #[test]
    fn takes_the_trailing_digits_plus_the_offset() {
        assert_eq!(id("nonce-worker-7", 0), Ok(7));
        assert_eq!(id("nonce-worker-007", 0), Ok(7));
        assert_eq!(id("web-2-3", 0), Ok(3));
        assert_eq!(id("42", 0), Ok(42));
        assert_eq!(id("nonce-worker-7", 256), Ok(263));
        assert_eq!(id("nonce-worker-511", 0), Ok(511));
        assert_eq!(id("nonce-worker-0", 511), Ok(511));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = id("nonce-worker", 0).unwrap_err();
        assert!(matches!(
            err,
            StatefulSetLeaseError::NoTrailingDigits { .. }
        ));
        assert_eq!(
            err.to_string(),
            "value \"nonce-worker\" of POD_NAME does not end in digits; expected a StatefulSet \
             pod name such as nonce-worker-7"
        );
        // Non-ASCII digits are not ordinals.
        for value in ["", "worker-٣"] {
            let err = id(value, 0).unwrap_err();
            assert!(
                matches!(err, StatefulSetLeaseError::NoTrailingDigits { .. }),
                "{value}: {err}"
            );
        }

        let err = id("nonce-worker-512", 0).unwrap_err();
        assert_eq!(
            err,
            StatefulSetLeaseError::OutOfRange {
                variable: "POD_NAME".into(),
                ordinal: "512".into(),
                offset: 0
            }
        );
        assert!(
            err.to_string()
                .contains("lower the offset or the StatefulSet's replica count")
        );
        for (value, offset) in [
            ("w-300", 212),
            ("w-99999999999999999999", 0),
            ("w-1", u16::MAX),
        ] {
            let err = id(value, offset).unwrap_err();
            assert!(
                matches!(err, StatefulSetLeaseError::OutOfRange { .. }),
                "{value} + {offset}: {err}"
            );
        }
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
    }

    #[test]
    fn reads_the_environment_and_reports_a_missing_variable_with_a_fix() {
        let variable = "LEASE_STATIC_TEST_SURELY_UNSET_VARIABLE";
        let err = StatefulSetStrategy::from_env(variable).unwrap_err();
        assert_eq!(
            err,
            StatefulSetLeaseError::MissingVariable {
                variable: variable.into()
            }
        );
        assert!(
            err.to_string()
                .starts_with(&format!("environment variable {variable} is not set"))
        );
        assert!(err.to_string().contains("Downward API"));

        // Cargo sets its package variables for test runs too; edition 2024 makes `set_var`
        // unsafe, so these stand in for POD_NAME.
        let minor: u16 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
        let strategy =
            StatefulSetStrategy::from_env_with_offset("CARGO_PKG_VERSION_MINOR", 3).unwrap();
        assert_eq!(strategy.machine_id().get(), minor + 3);
        assert_eq!(strategy.variable(), "CARGO_PKG_VERSION_MINOR");
        let err = StatefulSetStrategy::from_env("CARGO_PKG_NAME").unwrap_err();
        assert!(
            matches!(err, StatefulSetLeaseError::NoTrailingDigits { .. }),
            "{err}"
        );
    }
}
