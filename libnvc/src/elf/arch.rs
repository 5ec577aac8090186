//! The architectures nvc knows a driver for, as their ELF files name them.
//!
//! What a driver tree or a container is built for is read from its files (an ELF
//! header's machine, the ABI flags its ld.so.cache records), never taken from the
//! architecture nvc itself was built for: the tree under a driver root may be another
//! host's, and a test may read an aarch64 tree on an x86-64 machine.

use serde::{Deserialize, Serialize};

use super::{ElfClass, ElfInfo, EM_386, EM_AARCH64, EM_X86_64};

/// A 64-bit architecture a driver is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arch {
    /// x86-64 (`EM_X86_64`); its 32-bit build is i386.
    #[serde(rename = "x86_64")]
    X86_64,
    /// AArch64 (`EM_AARCH64`), as on Grace Hopper and Grace Blackwell hosts; NVIDIA ships
    /// no 32-bit build of its driver for it.
    #[serde(rename = "aarch64")]
    Aarch64,
}

impl Arch {
    /// Every architecture nvc knows.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture of a 64-bit object of `machine`; `None` for a 32-bit object or
    /// a machine nvc knows no driver for.
    pub fn of_machine(class: ElfClass, machine: u16) -> Option<Arch> {
        match (class, machine) {
            (ElfClass::Elf64, EM_X86_64) => Some(Arch::X86_64),
            (ElfClass::Elf64, EM_AARCH64) => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The architecture of the object `info` describes.
    pub fn of(info: &ElfInfo) -> Option<Arch> {
        Arch::of_machine(info.class, info.machine)
    }

    /// `e_machine` of its 64-bit objects.
    pub fn machine(self) -> u16 {
        match self {
            Arch::X86_64 => EM_X86_64,
            Arch::Aarch64 => EM_AARCH64,
        }
    }

    /// `e_machine` of the 32-bit build of its driver (the `compat32` libraries), where
    /// there is one.
    pub fn lib32_machine(self) -> Option<u16> {
        match self {
            Arch::X86_64 => Some(EM_386),
            Arch::Aarch64 => None,
        }
    }

    /// Its name as `uname -m` prints it: `x86_64`, `aarch64`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Debian's multiarch tuple, the name of its library folder under `/usr/lib`:
    /// `x86_64-linux-gnu`, `aarch64-linux-gnu`.
    pub fn multiarch(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// Debian's multiarch tuple of its 32-bit build, where there is one.
    pub fn multiarch32(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => Some("i386-linux-gnu"),
            Arch::Aarch64 => None,
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an object is, for a message: `a 64-bit x86_64 object`, `a 32-bit i386 object`,
/// `a 64-bit object of machine 40`.
pub fn describe(info: &ElfInfo) -> String {
    let bits = match info.class {
        ElfClass::Elf32 => "32",
        ElfClass::Elf64 => "64",
    };
    let machine = match info.machine {
        EM_X86_64 => "x86_64".to_string(),
        EM_AARCH64 => "aarch64".to_string(),
        EM_386 => "i386".to_string(),
        other => format!("machine {other}"),
    };
    match info.machine {
        EM_X86_64 | EM_AARCH64 | EM_386 => format!("a {bits}-bit {machine} object"),
        _ => format!("a {bits}-bit object of {machine}"),
    }
}
