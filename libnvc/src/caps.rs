//! Driver capabilities: the groups of driver files a container asks for with
//! `NVIDIA_DRIVER_CAPABILITIES`.

use std::fmt;
use std::str::FromStr;

/// One driver capability, as named in `NVIDIA_DRIVER_CAPABILITIES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// `nvidia-smi`, NVML.
    Utility,
    /// CUDA and OpenCL.
    Compute,
    /// Video encode and decode.
    Video,
    /// OpenGL, Vulkan, EGL, OptiX.
    Graphics,
    /// The X server's driver modules.
    Display,
    /// DLSS (NGX).
    Ngx,
    /// The 32-bit builds of the selected libraries.
    Compat32,
}

impl Capability {
    /// Every capability, in the order `all` expands to.
    pub const ALL: [Capability; 7] = [
        Capability::Utility,
        Capability::Compute,
        Capability::Video,
        Capability::Graphics,
        Capability::Display,
        Capability::Ngx,
        Capability::Compat32,
    ];

    /// The name used in `NVIDIA_DRIVER_CAPABILITIES`.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Utility => "utility",
            Capability::Compute => "compute",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Display => "display",
            Capability::Ngx => "ngx",
            Capability::Compat32 => "compat32",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl serde::Serialize for Capability {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Capability {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a driver capability.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown driver capability {0:?} (known: utility, compute, video, graphics, display, ngx, compat32, all)")]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCapability(s.to_string()))
    }
}

/// A set of capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapabilitySet(u8);

impl CapabilitySet {
    /// No capability.
    pub const fn empty() -> Self {
        CapabilitySet(0)
    }

    /// Every capability.
    pub fn all() -> Self {
        Capability::ALL.into_iter().collect()
    }

    /// Whether `cap` is in the set.
    pub fn contains(self, cap: Capability) -> bool {
        self.0 & cap.bit() != 0
    }

    /// Adds `cap`.
    pub fn insert(&mut self, cap: Capability) {
        self.0 |= cap.bit();
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The capabilities in both sets.
    pub fn intersection(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & other.0)
    }

    /// The capabilities in the set, in [`Capability::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }

    /// Parses a comma-separated list such as `utility,compute` or `all`.
    /// Blank items are ignored; an unknown name is an error naming it.
    pub fn parse_list(list: &str) -> Result<Self, UnknownCapability> {
        let mut set = CapabilitySet::empty();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                set = set.union(CapabilitySet::all());
            } else {
                set.insert(item.parse()?);
            }
        }
        Ok(set)
    }

    /// The capabilities in either set.
    pub fn union(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 | other.0)
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut set = CapabilitySet::empty();
        for c in iter {
            set.insert(c);
        }
        set
    }
}

impl fmt::Display for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Capability::name).collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("utility,compute", Ok("utility,compute")),
            ("compute, utility", Ok("utility,compute")),
            (
                "all",
                Ok("utility,compute,video,graphics,display,ngx,compat32"),
            ),
            (
                "video,all",
                Ok("utility,compute,video,graphics,display,ngx,compat32"),
            ),
            ("", Ok("")),
            (",,", Ok("")),
            (
                "graphics,display,ngx,compat32",
                Ok("graphics,display,ngx,compat32"),
            ),
            ("compute,gpu", Err("gpu")),
            ("Compute", Err("Compute")),
        ];
        for (input, want) in cases {
            let got = CapabilitySet::parse_list(input).map(|s| s.to_string());
            match want {
                Ok(w) => assert_eq!(got.as_deref(), Ok(*w), "{input}"),
                Err(name) => assert_eq!(got, Err(UnknownCapability(name.to_string())), "{input}"),
            }
        }
    }

    #[test]
    fn unknown_names_the_capability() {
        let err = CapabilitySet::parse_list("utility,gpus").unwrap_err();
        assert!(err.to_string().contains("\"gpus\""), "{err}");
    }
}
