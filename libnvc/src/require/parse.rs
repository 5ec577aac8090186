//! Reading one `NVIDIA_REQUIRE_*` value into a [`Requirement`]: alternatives separated by
//! whitespace, constraints joined by commas, each `key op value`.

use crate::version::{BadVersion, Version};

use super::{Constraint, Key, Op, Operand, Requirement};

const OPERATORS: &str = "=, ==, !=, <, <=, >, >=";
const KEYS: &str = "cuda, driver, arch or brand";

/// A `NVIDIA_REQUIRE_*` value that does not parse; each names the variable and the
/// constraint at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequireError {
    /// No operator, as in `cuda`.
    #[error("{variable}: {constraint:?} has no operator (expected one of {OPERATORS})")]
    NoOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
    },
    /// Nothing before the operator, as in `>=12`.
    #[error("{variable}: {constraint:?} has no key before the operator (expected {KEYS})")]
    NoKey {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
    },
    /// A key that is not `cuda`, `driver`, `arch` or `brand`.
    #[error("{variable}: unknown key {key:?} in {constraint:?} (expected {KEYS})")]
    UnknownKey {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The key as written.
        key: String,
    },
    /// An operator that is not one of `=`, `==`, `!=`, `<`, `<=`, `>`, `>=`.
    #[error("{variable}: unknown operator {op:?} in {constraint:?} (expected one of {OPERATORS})")]
    UnknownOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// Nothing after the operator, as in `cuda>=`.
    #[error("{variable}: {constraint:?} has no value after {op:?}")]
    NoValue {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// A `cuda`, `driver` or `arch` value that is not a version.
    #[error("{variable}: bad {key} version in {constraint:?}")]
    BadVersion {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The key whose value is bad.
        key: Key,
        /// Why the value is not a version.
        #[source]
        source: BadVersion,
    },
    /// A brand compared with something other than `=` or `!=`.
    #[error("{variable}: brands cannot be compared with {op:?} in {constraint:?} (use = or !=)")]
    BrandOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// A brand with characters no brand name has.
    #[error(
        "{variable}: bad brand {brand:?} in {constraint:?} (expected letters, digits, _ or -)"
    )]
    BadBrand {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The brand as written.
        brand: String,
    },
}

/// Parses the value of the `NVIDIA_REQUIRE_*` variable named `variable`.
pub fn parse(variable: &str, value: &str) -> Result<Requirement, RequireError> {
    let mut alternatives = Vec::new();
    for item in value.split_whitespace() {
        let alternative = item
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| parse_constraint(variable, c))
            .collect::<Result<Vec<_>, _>>()?;
        if !alternative.is_empty() {
            alternatives.push(alternative);
        }
    }
    Ok(Requirement {
        variable: variable.to_string(),
        alternatives,
    })
}

fn parse_constraint(variable: &str, text: &str) -> Result<Constraint, RequireError> {
    let variable = variable.to_string();
    let constraint = text.to_string();
    let is_op = |c: char| matches!(c, '=' | '!' | '<' | '>');
    let Some(op_start) = text.find(is_op) else {
        return Err(RequireError::NoOperator {
            variable,
            constraint,
        });
    };
    let (key_text, rest) = text.split_at(op_start);
    let op_len = rest.find(|c| !is_op(c)).unwrap_or(rest.len());
    let (op_text, value) = rest.split_at(op_len);
    if key_text.is_empty() {
        return Err(RequireError::NoKey {
            variable,
            constraint,
        });
    }
    let Some(key) = Key::from_name(key_text) else {
        return Err(RequireError::UnknownKey {
            variable,
            constraint,
            key: key_text.to_string(),
        });
    };
    let Some(op) = Op::from_symbol(op_text) else {
        return Err(RequireError::UnknownOperator {
            variable,
            constraint,
            op: op_text.to_string(),
        });
    };
    if value.is_empty() {
        return Err(RequireError::NoValue {
            variable,
            constraint,
            op: op_text.to_string(),
        });
    }
    let version = |value: &str| {
        value
            .parse::<Version>()
            .map_err(|source| RequireError::BadVersion {
                variable: variable.clone(),
                constraint: constraint.clone(),
                key,
                source,
            })
    };
    let operand = match key {
        Key::Cuda => Operand::Cuda(version(value)?),
        Key::Driver => Operand::Driver(version(value)?),
        Key::Arch => Operand::Arch(version(value)?),
        Key::Brand => {
            if !matches!(op, Op::Eq | Op::Ne) {
                return Err(RequireError::BrandOperator {
                    variable,
                    constraint,
                    op: op_text.to_string(),
                });
            }
            let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if !value.chars().all(valid) {
                return Err(RequireError::BadBrand {
                    variable,
                    constraint,
                    brand: value.to_string(),
                });
            }
            Operand::Brand(value.to_ascii_lowercase())
        }
    };
    Ok(Constraint { op, operand })
}
