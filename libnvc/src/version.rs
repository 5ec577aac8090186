//! Dotted numeric versions: driver versions (`580.159.04`), CUDA versions (`13.0`),
//! compute capabilities (`9.0`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A version made of dot-separated numbers. Missing trailing parts compare as zero,
/// so `13.0` equals `13` and `13.0.0`.
#[derive(Debug, Clone, Eq)]
pub struct Version {
    parts: Vec<u64>,
    text: String,
}

/// A string that is not a dotted numeric version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a version (expected numbers separated by dots, such as 12.4)")]
pub struct BadVersion(pub String);

impl Version {
    /// The numeric parts.
    pub fn parts(&self) -> &[u64] {
        &self.parts
    }

    /// The major part.
    pub fn major(&self) -> u64 {
        self.parts.first().copied().unwrap_or(0)
    }

    /// The minor part (0 when absent).
    pub fn minor(&self) -> u64 {
        self.parts.get(1).copied().unwrap_or(0)
    }

    /// A CUDA version from the integer `cuDriverGetVersion` reports (`13000` is 13.0).
    pub fn from_cuda_int(v: i32) -> Version {
        let v = v.max(0) as u64;
        let (major, minor) = (v / 1000, (v % 1000) / 10);
        Version {
            parts: vec![major, minor],
            text: format!("{major}.{minor}"),
        }
    }
}

impl FromStr for Version {
    type Err = BadVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(s.to_string());
        if s.is_empty() {
            return Err(bad());
        }
        let parts = s
            .split('.')
            .map(|p| {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    Err(bad())
                } else {
                    p.parse::<u64>().map_err(|_| bad())
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Version {
            parts,
            text: s.to_string(),
        })
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.parts.len().max(other.parts.len());
        (0..n)
            .map(|i| {
                let a = self.parts.get(i).copied().unwrap_or(0);
                let b = other.parts.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn compares_numerically() {
        assert!(v("580.159.04") > v("580.65.06"));
        assert!(v("13.0") == v("13"));
        assert!(v("12.10") > v("12.9"));
        assert!(v("9.0") < v("10.0"));
        assert_eq!(v("580.159.04").to_string(), "580.159.04");
    }

    #[test]
    fn rejects_non_versions() {
        for s in ["", "1..2", "a.b", "1.2-beta", " 1.2", "1.", ".1"] {
            assert!(s.parse::<Version>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn cuda_ints() {
        assert_eq!(Version::from_cuda_int(13000).to_string(), "13.0");
        assert_eq!(Version::from_cuda_int(12040).to_string(), "12.4");
        assert_eq!(Version::from_cuda_int(99010).to_string(), "99.1");
    }
}
