//! glibc's binary `/etc/ld.so.cache`: what a cache holds ([`Cache`], [`Entry`],
//! [`CacheArch`]), a bounded parser for all three layouts (old `ld.so-1.7.0`, new
//! `glibc-ld.so.cache1.1`, and "compat", the new one hidden inside the old one's string
//! table) and a writer of the new layout in `ldconfig`'s order, so that a container's
//! cache can be rewritten without running `ldconfig`.
//!
//! - [`parse()`] (in `parse.rs`) reads bytes; [`parse_file`] and [`read_from`] add the
//!   file's name to the errors, the latter reading it through a
//!   [`HostProbe`](crate::probe::HostProbe).
//! - [`write()`] (in `write.rs`) writes entries, sorted by [`sort_entries`] with glibc's
//!   key order [`libcmp`].
//!
//! A cache may come from a container image: every count, offset and string is checked
//! against the file, strings are bounded, and no input makes the parser panic. Nothing
//! here touches the file system: callers hand in bytes, or a probe.
//!
//! The layout follows glibc's `sysdeps/generic/dl-cache.h`, `elf/cache.c` and
//! `elf/dl-cache.c`:
//!
//! - old: `magic[11]`, padding to 12, `u32 nlibs`, then `nlibs` entries of
//!   `{ i32 flags; u32 key, value }`; string offsets count from the byte after the entries.
//! - new: `magic "glibc-ld.so.cache1.1"`, `u32 nlibs`, `u32 len_strings`, `u8 flags`
//!   (endianness: 2 is little), 3 padding bytes, `u32 extension_offset`, `u32 unused[3]`
//!   (48 bytes), then `nlibs` entries of `{ i32 flags; u32 key, value, osversion; u64
//!   hwcap }` (24 bytes); string offsets count from the start of this header, the
//!   extension offset from the start of the file.
//! - compat: the old layout whose entry count is rounded up to even, so that the new
//!   header right after the entries is 8-byte aligned.

use std::io;
use std::path::PathBuf;

use crate::elf::{self, Arch, ElfClass};

mod parse;
#[cfg(test)]
mod tests;
mod write;

pub use parse::{parse, parse_file, read_from};
pub use write::{libcmp, sort_entries, write};

/// `flags` type of an ELF library of no particular C library (accepted by every loader).
pub const FLAG_ELF: i32 = 0x0001;
/// `flags` type of a glibc (libc6) library.
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// The bits of `flags` that hold the library type.
pub const FLAG_TYPE_MASK: i32 = 0x00ff;
/// The bits of `flags` that hold the ABI the library needs.
pub const FLAG_REQUIRED_MASK: i32 = 0xff00;
/// ABI bits of 64-bit x86-64 libraries.
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// ABI bits of x32 libraries.
pub const FLAG_X8664_LIBX32: i32 = 0x0800;
/// ABI bits of 64-bit AArch64 libraries.
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;

/// The largest cache file [`parse_file`] and [`read_from`] accept.
pub const MAX_CACHE_SIZE: u64 = 16 * 1024 * 1024;
/// The longest string read from a cache, terminating NUL included (glibc's `PATH_MAX`).
pub const MAX_STRING_LEN: usize = 4096;

// The layout, shared by the parser and the writer.
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_HEADER_SIZE: usize = 16;
const OLD_ENTRY_SIZE: usize = 12;
const NEW_HEADER_SIZE: usize = 48;
const NEW_ENTRY_SIZE: usize = 24;
/// `__alignof__ (struct cache_file_new)` on 64-bit hosts (it holds a `u64`).
const NEW_HEADER_ALIGN: usize = 8;
const ENDIAN_MASK: u8 = 3;
const ENDIAN_LITTLE: u8 = 2;
const ENDIAN_BIG: u8 = 3;
/// `cache_extension_magic`, `(uint32_t) -358342284`.
const EXTENSION_MAGIC: u32 = 0xeaa4_2174;
const EXTENSION_HEADER_SIZE: usize = 8;
const EXTENSION_SECTION_SIZE: usize = 16;
const EXTENSION_TAG_GENERATOR: u32 = 0;
const EXTENSION_TAG_GLIBC_HWCAPS: u32 = 1;
/// `DL_CACHE_HWCAP_EXTENSION`: the low 32 bits of `hwcap` index the glibc-hwcaps section.
const HWCAP_EXTENSION: u64 = 1 << 62;
/// `DL_CACHE_HWCAP_ISA_LEVEL_MASK`, in the upper 32 bits of `hwcap`.
const HWCAP_ISA_LEVEL_MASK: u64 = (1 << 10) - 1;

/// One library in the cache: a name the loader looks up and the file it maps to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The key the loader searches for: the library's soname, such as `libcuda.so.1`.
    pub name: String,
    /// The file to load, such as `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub path: String,
    /// Library type and ABI, such as `0x0303` for x86-64 glibc libraries.
    pub flags: i32,
    /// Hardware capabilities; with bit 62 set, the low 32 bits index
    /// [`Cache::hwcaps_subdirs`] (a library in a `glibc-hwcaps/` subdirectory).
    pub hwcap: u64,
}

/// The ABI of a cache entry, from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheArch {
    /// 64-bit x86-64 (`0x0303`).
    X86_64,
    /// The plain libc6 flag (`0x0003`), which x86 hosts use for i386 libraries.
    I386,
    /// x32 (`0x0803`).
    X32,
    /// 64-bit AArch64 (`0x0a03`).
    Aarch64,
    /// Another libc6 ABI; holds the whole flags value.
    Other(i32),
}

/// Which of glibc's layouts a cache file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Only the old `ld.so-1.7.0` table.
    Old,
    /// Only the new `glibc-ld.so.cache1.1` table.
    New,
    /// The old table with the new one inside its string area.
    Compat,
}

/// A parsed ld.so.cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// The layout the file used.
    pub format: Format,
    /// The entries in file order, which is the order the loader searches them in. From a
    /// compat file these are the new table's entries.
    pub entries: Vec<Entry>,
    /// The generator string of the extension section (`ldconfig (GNU libc) ... 2.36`).
    pub generator: Option<String>,
    /// The glibc-hwcaps subdirectory names (such as `x86-64-v3`) of the extension section;
    /// entries with the hwcap extension bit index into this list.
    pub hwcaps_subdirs: Vec<String>,
}

/// Why a cache could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum LdCacheError {
    /// The data starts with neither the old nor the new magic.
    #[error("not an ld.so.cache file (unknown magic)")]
    BadMagic,
    /// A header or table runs past the end of the data.
    #[error("truncated ld.so.cache: {what} runs past the end of the file")]
    Truncated {
        /// The structure that is cut off.
        what: &'static str,
    },
    /// The new header says the file is big-endian.
    #[error("ld.so.cache is big-endian")]
    BigEndian,
    /// The new header's endianness flag is invalid.
    #[error("ld.so.cache endianness flags {0:#x} are invalid")]
    BadEndianFlags(u8),
    /// A string offset points outside the file.
    #[error("string offset {offset} is outside the file")]
    StringOutOfRange {
        /// The offset from the start of the file.
        offset: u64,
    },
    /// A string has no NUL terminator before the end of the file.
    #[error("string at offset {offset} has no NUL terminator")]
    UnterminatedString {
        /// The offset from the start of the file.
        offset: u64,
    },
    /// A string is longer than [`MAX_STRING_LEN`].
    #[error("string at offset {offset} is longer than {MAX_STRING_LEN} bytes")]
    StringTooLong {
        /// The offset from the start of the file.
        offset: u64,
    },
    /// A string is not UTF-8.
    #[error("string at offset {offset} is not valid UTF-8")]
    NonUtf8String {
        /// The offset from the start of the file.
        offset: u64,
    },
    /// The entries refer to far more string bytes than the file holds (the same strings
    /// over and over), which would make parsing allocate without bound.
    #[error("entries refer to more than {max} bytes of strings")]
    TooMuchStringData {
        /// The limit, a multiple of the file size.
        max: usize,
    },
    /// [`write()`] was given a name or path with a NUL byte.
    #[error("cache string {0:?} contains a NUL byte")]
    NulInString(String),
    /// [`write()`] was given a name or path that [`parse()`] would reject as too long.
    #[error("cache string of {len} bytes is too long (at most {} bytes)", MAX_STRING_LEN - 1)]
    StringTooLongToWrite {
        /// The string's length in bytes.
        len: usize,
    },
    /// [`write()`] was given more than a 32-bit cache can address.
    #[error("cache would be larger than 4 GiB")]
    TooLargeToWrite,
    /// Reading a cache file failed.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A cache file is larger than [`MAX_CACHE_SIZE`].
    #[error("{path} is larger than {max} bytes")]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// [`MAX_CACHE_SIZE`].
        max: u64,
    },
    /// A cache file was read but is not a valid cache.
    #[error("invalid ld.so.cache {path}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<LdCacheError>,
    },
    /// A library directory to write into the cache is not UTF-8 (cache strings are).
    #[error("directory {path} is not valid UTF-8")]
    NonUtf8Dir {
        /// The directory.
        path: PathBuf,
    },
}

impl Entry {
    /// The ABI from the flags; `None` unless the entry is a libc6 library.
    pub fn arch(&self) -> Option<CacheArch> {
        CacheArch::from_flags(self.flags)
    }

    /// The index into [`Cache::hwcaps_subdirs`] when the entry is a library in a
    /// glibc-hwcaps subdirectory.
    pub fn hwcaps_index(&self) -> Option<u32> {
        // glibc's dl_cache_hwcap_extension: only the extension bit may be set in the
        // upper half, besides the ISA level bits.
        if (self.hwcap >> 32) & !HWCAP_ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32 {
            Some(self.hwcap as u32)
        } else {
            None
        }
    }
}

impl CacheArch {
    /// The ABI named by cache flags; `None` unless the type bits say libc6.
    pub fn from_flags(flags: i32) -> Option<CacheArch> {
        if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6 {
            return None;
        }
        Some(match flags & FLAG_REQUIRED_MASK {
            0 => CacheArch::I386,
            FLAG_X8664_LIB64 => CacheArch::X86_64,
            FLAG_X8664_LIBX32 => CacheArch::X32,
            FLAG_AARCH64_LIB64 => CacheArch::Aarch64,
            _ => CacheArch::Other(flags),
        })
    }

    /// The ABI of an ELF object, as `ldconfig` on that object's host would record it;
    /// `None` for machines this crate does not know.
    pub fn from_elf(class: ElfClass, machine: u16) -> Option<CacheArch> {
        match (class, machine) {
            (ElfClass::Elf64, elf::EM_X86_64) => Some(CacheArch::X86_64),
            (ElfClass::Elf32, elf::EM_X86_64) => Some(CacheArch::X32),
            (ElfClass::Elf32, elf::EM_386) => Some(CacheArch::I386),
            (ElfClass::Elf64, elf::EM_AARCH64) => Some(CacheArch::Aarch64),
            _ => None,
        }
    }

    /// The architecture whose native 64-bit ABI this is, as the `ldconfig` built for it
    /// records every 64-bit library it lists; `None` for the 32-bit ABIs.
    pub fn arch64(self) -> Option<Arch> {
        match self {
            CacheArch::X86_64 => Some(Arch::X86_64),
            CacheArch::Aarch64 => Some(Arch::Aarch64),
            CacheArch::I386 | CacheArch::X32 | CacheArch::Other(_) => None,
        }
    }

    /// The cache flags of this ABI.
    pub fn flags(self) -> i32 {
        match self {
            CacheArch::X86_64 => FLAG_ELF_LIBC6 | FLAG_X8664_LIB64,
            CacheArch::I386 => FLAG_ELF_LIBC6,
            CacheArch::X32 => FLAG_ELF_LIBC6 | FLAG_X8664_LIBX32,
            CacheArch::Aarch64 => FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64,
            CacheArch::Other(flags) => flags,
        }
    }
}

impl From<Arch> for CacheArch {
    /// The ABI of an architecture's 64-bit libraries: what its `ldconfig` writes for them
    /// (`0x0303` on x86-64, `0x0a03` on AArch64).
    fn from(arch: Arch) -> CacheArch {
        match arch {
            Arch::X86_64 => CacheArch::X86_64,
            Arch::Aarch64 => CacheArch::Aarch64,
        }
    }
}

impl Cache {
    /// The first entry, in cache order, named exactly `name` for `arch`. Entries of
    /// glibc-hwcaps subdirectories come before the plain ones of the same name, as in
    /// the file.
    pub fn lookup<'a>(&'a self, name: &str, arch: CacheArch) -> Option<&'a Entry> {
        self.entries
            .iter()
            .find(|e| e.name == name && e.arch() == Some(arch))
    }

    /// The glibc-hwcaps subdirectory name of `entry`, if it has one.
    pub fn hwcaps_subdir(&self, entry: &Entry) -> Option<&str> {
        let index = usize::try_from(entry.hwcaps_index()?).ok()?;
        self.hwcaps_subdirs.get(index).map(String::as_str)
    }
}
