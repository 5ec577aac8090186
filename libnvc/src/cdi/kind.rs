//! A spec's kind, `<vendor>/<class>`: the part of a fully qualified CDI device name before
//! `=`, checked as the CDI specification and the engines' CDI parser take it.
//!
//! The specification: the class (its "name segment") is at most 63 characters, letters,
//! digits, `-`, `_` and `.`, starting and ending with a letter or digit; the vendor (its
//! "prefix") is a DNS subdomain, dot-separated labels of lowercase letters, digits and
//! `-`, each starting and ending with a letter or digit and at most 63 characters long,
//! 253 in all. The parser the engines use (`tags.cncf.io/container-device-interface`)
//! also wants both to start with a letter. A kind is taken when both agree; a class with
//! a dot needs `cdiVersion` 0.6.0 ([`super::Spec::minimum_version`]).

use std::fmt;

/// The most characters a vendor may have (a DNS subdomain).
const VENDOR_MAX: usize = 253;
/// The most characters a class, or one label of a vendor, may have.
const LABEL_MAX: usize = 63;

/// A checked CDI kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    vendor: String,
    class: String,
}

impl Kind {
    /// The kind `vendor/class`, when CDI takes both.
    pub fn new(vendor: &str, class: &str) -> Result<Kind, KindError> {
        check_vendor(vendor)?;
        check_class(class)?;
        Ok(Kind {
            vendor: vendor.to_string(),
            class: class.to_string(),
        })
    }

    /// `nvidia.com/gpu`, the kind of NVIDIA's own specs and nvc's default.
    pub fn nvidia() -> Kind {
        Kind {
            vendor: super::VENDOR.to_string(),
            class: super::CLASS.to_string(),
        }
    }

    /// The vendor: `nvidia.com`.
    pub fn vendor(&self) -> &str {
        &self.vendor
    }

    /// The class: `gpu`.
    pub fn class(&self) -> &str {
        &self.class
    }
}

impl Default for Kind {
    fn default() -> Self {
        Kind::nvidia()
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.vendor, self.class)
    }
}

/// Which half of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The vendor, before `/`.
    Vendor,
    /// The class, after `/`.
    Class,
}

impl Part {
    /// The rule the part follows, in words.
    pub fn rule(self) -> &'static str {
        match self {
            Part::Vendor => {
                "a CDI vendor is a DNS subdomain that starts with a letter: labels of \
                 lowercase letters, digits and '-' joined by '.', each starting and ending \
                 with a letter or digit and at most 63 characters long, 253 in all"
            }
            Part::Class => {
                "a CDI class is at most 63 letters, digits, '-', '_' and '.', starting with \
                 a letter and ending with a letter or digit"
            }
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Vendor => "vendor",
            Part::Class => "class",
        })
    }
}

/// What is wrong with a vendor or class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flaw {
    /// Nothing was given.
    Empty,
    /// More characters than the part may have.
    TooLong(usize),
    /// The first character is no letter.
    FirstNotLetter,
    /// The last character is neither a letter nor a digit.
    LastNotAlphanumeric,
    /// A character the part may not hold.
    Character(char),
    /// A label of the vendor that is no DNS label (empty, too long, or starting or ending
    /// with `-`).
    Label(String),
}

impl fmt::Display for Flaw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Flaw::Empty => f.write_str("it is empty"),
            Flaw::TooLong(max) => write!(f, "it is longer than {max} characters"),
            Flaw::FirstNotLetter => f.write_str("it does not start with a letter"),
            Flaw::LastNotAlphanumeric => f.write_str("it does not end with a letter or digit"),
            Flaw::Character(c) => write!(f, "{c:?} is not allowed"),
            Flaw::Label(label) => write!(f, "its label {label:?} is no DNS label"),
        }
    }
}

/// A vendor or class that CDI does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CDI {part} {name:?}: {flaw} ({})", part.rule())]
pub struct KindError {
    /// Which half.
    pub part: Part,
    /// What was given.
    pub name: String,
    /// What is wrong with it.
    pub flaw: Flaw,
}

impl KindError {
    /// The flaw and the rule, without the name: for a command line's own error, which
    /// names the value already.
    pub fn reason(&self) -> String {
        format!("{} ({})", self.flaw, self.part.rule())
    }
}

/// Checks a vendor: `nvidia.com`, `k8s.device-plugin.nvidia.com`.
pub fn check_vendor(vendor: &str) -> Result<(), KindError> {
    let fail = |flaw| KindError {
        part: Part::Vendor,
        name: vendor.to_string(),
        flaw,
    };
    if vendor.is_empty() {
        return Err(fail(Flaw::Empty));
    }
    if vendor.len() > VENDOR_MAX {
        return Err(fail(Flaw::TooLong(VENDOR_MAX)));
    }
    if let Some(c) = vendor
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Err(fail(Flaw::Character(c)));
    }
    if !vendor.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(fail(Flaw::FirstNotLetter));
    }
    for label in vendor.split('.') {
        let ok = !label.is_empty()
            && label.len() <= LABEL_MAX
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(fail(Flaw::Label(label.to_string())));
        }
    }
    Ok(())
}

/// Checks a class: `gpu`.
pub fn check_class(class: &str) -> Result<(), KindError> {
    let fail = |flaw| KindError {
        part: Part::Class,
        name: class.to_string(),
        flaw,
    };
    if class.is_empty() {
        return Err(fail(Flaw::Empty));
    }
    if class.len() > LABEL_MAX {
        return Err(fail(Flaw::TooLong(LABEL_MAX)));
    }
    if let Some(c) = class
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(fail(Flaw::Character(c)));
    }
    if !class.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(fail(Flaw::FirstNotLetter));
    }
    if !class.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(fail(Flaw::LastNotAlphanumeric));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn vendors_cdi_takes_and_those_it_does_not() {
        let long_label = "a".repeat(64);
        let long = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(62),
        ]
        .join(".");
        assert_eq!(long.len(), 254);
        let cases: Vec<(&str, Option<Flaw>)> = vec![
            ("nvidia.com", None),
            ("k8s.device-plugin.nvidia.com", None),
            ("example", None),
            ("a1-b.c2", None),
            ("", Some(Flaw::Empty)),
            (&long, Some(Flaw::TooLong(253))),
            ("Nvidia.com", Some(Flaw::Character('N'))),
            ("nvidia_com", Some(Flaw::Character('_'))),
            ("nvidia.com/gpu", Some(Flaw::Character('/'))),
            ("nvidia com", Some(Flaw::Character(' '))),
            ("névidia.com", Some(Flaw::Character('é'))),
            // DNS allows it; the engines' parser does not
            ("3com.com", Some(Flaw::FirstNotLetter)),
            ("-nvidia.com", Some(Flaw::FirstNotLetter)),
            ("nvidia..com", Some(Flaw::Label(String::new()))),
            ("nvidia.com.", Some(Flaw::Label(String::new()))),
            ("nvidia-.com", Some(Flaw::Label("nvidia-".into()))),
            ("nvidia.-com", Some(Flaw::Label("-com".into()))),
        ];
        for (vendor, want) in cases {
            assert_eq!(check_vendor(vendor).err().map(|e| e.flaw), want, "{vendor}");
        }
        let label = format!("{long_label}.com");
        assert_eq!(
            check_vendor(&label).unwrap_err().flaw,
            Flaw::Label(long_label)
        );
        let max = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(max.len(), 253);
        assert!(check_vendor(&max).is_ok());
    }

    #[test]
    fn classes_cdi_takes_and_those_it_does_not() {
        let cases: Vec<(String, Option<Flaw>)> = vec![
            ("gpu".into(), None),
            ("GPU".into(), None),
            ("mig-1g.10gb".into(), None),
            ("foo-bar123.B_az".into(), None),
            ("a".into(), None),
            ("x".repeat(63), None),
            ("x".repeat(64), Some(Flaw::TooLong(63))),
            (String::new(), Some(Flaw::Empty)),
            ("0gpu".into(), Some(Flaw::FirstNotLetter)),
            ("_gpu".into(), Some(Flaw::FirstNotLetter)),
            ("gpu-".into(), Some(Flaw::LastNotAlphanumeric)),
            ("gpu.".into(), Some(Flaw::LastNotAlphanumeric)),
            ("gpu/0".into(), Some(Flaw::Character('/'))),
            ("gpu=0".into(), Some(Flaw::Character('='))),
            ("g pu".into(), Some(Flaw::Character(' '))),
        ];
        for (class, want) in cases {
            assert_eq!(check_class(&class).err().map(|e| e.flaw), want, "{class}");
        }
    }

    #[test]
    fn a_kind_is_vendor_slash_class() {
        assert_eq!(Kind::default().to_string(), "nvidia.com/gpu");
        assert_eq!(Kind::nvidia(), Kind::new("nvidia.com", "gpu").unwrap());
        let plugin = Kind::new(super::super::DEVICE_PLUGIN_VENDOR, "gpu").unwrap();
        assert_eq!(plugin.to_string(), "k8s.device-plugin.nvidia.com/gpu");
        assert_eq!(plugin.vendor(), "k8s.device-plugin.nvidia.com");
        assert_eq!(plugin.class(), "gpu");
        // The vendor is checked first; the error names the part, the value and the rule.
        let err = Kind::new("Nvidia.com", "g/pu").unwrap_err();
        assert_eq!(err.part, Part::Vendor);
        assert_eq!(
            err.to_string(),
            format!(
                "invalid CDI vendor \"Nvidia.com\": 'N' is not allowed ({})",
                Part::Vendor.rule()
            )
        );
        let err = Kind::new("nvidia.com", "g/pu").unwrap_err();
        assert_eq!(
            err.reason(),
            format!("'/' is not allowed ({})", Part::Class.rule())
        );
    }
}
