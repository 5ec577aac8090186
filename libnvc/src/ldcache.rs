//! glibc's binary `/etc/ld.so.cache`: a bounded parser for all three layouts (old
//! `ld.so-1.7.0`, new `glibc-ld.so.cache1.1`, and "compat", the new one hidden inside the
//! old one's string table), a writer of the new layout, and a builder that lists library
//! directories the way `ldconfig` does, so a container's cache can be written without
//! running `ldconfig`.
//!
//! A cache may come from a container image: every count, offset and string is checked
//! against the file, strings are bounded, and no input makes the parser panic.
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

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::elf::{self, ElfClass, ET_DYN};

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

/// The largest cache file [`read`] accepts.
pub const MAX_CACHE_SIZE: u64 = 16 * 1024 * 1024;
/// The longest string read from a cache, terminating NUL included (glibc's `PATH_MAX`).
pub const MAX_STRING_LEN: usize = 4096;

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

/// Why a cache could not be read, parsed, written or built.
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
    /// [`write`] was given a name or path with a NUL byte.
    #[error("cache string {0:?} contains a NUL byte")]
    NulInString(String),
    /// [`write`] was given a name or path that [`parse`] would reject as too long.
    #[error("cache string of {len} bytes is too long (at most {} bytes)", MAX_STRING_LEN - 1)]
    StringTooLongToWrite {
        /// The string's length in bytes.
        len: usize,
    },
    /// [`write`] was given more than a 32-bit cache can address.
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
    /// Listing a library directory failed.
    #[error("failed to list directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A directory to write into the cache is not UTF-8.
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

/// Parses a cache in any of the three layouts; from a compat file, the new table.
pub fn parse(data: &[u8]) -> Result<Cache, LdCacheError> {
    if data.starts_with(NEW_MAGIC) {
        return parse_new(data, 0, Format::New);
    }
    if !data.starts_with(OLD_MAGIC) {
        return Err(LdCacheError::BadMagic);
    }
    let nlibs = read_u32(data, OLD_MAGIC.len() + 1)
        .ok_or(LdCacheError::Truncated { what: "old header" })?;
    let strings = table_end(
        OLD_HEADER_SIZE,
        nlibs,
        OLD_ENTRY_SIZE,
        data.len(),
        "old entries",
    )?;

    // glibc's readers look for the new header at the aligned end of the old entries;
    // a header that does not fit makes them fall back to the old table.
    let aligned = strings.div_ceil(NEW_HEADER_ALIGN) * NEW_HEADER_ALIGN;
    for start in [aligned, strings] {
        let fits = start
            .checked_add(NEW_HEADER_SIZE)
            .is_some_and(|end| end <= data.len());
        if fits && data[start..].starts_with(NEW_MAGIC) {
            return parse_new(data, start, Format::Compat);
        }
    }

    let mut budget = StringBudget::for_file(data.len());
    let mut entries = Vec::new();
    for at in (0..nlibs as usize).map(|i| OLD_HEADER_SIZE + i * OLD_ENTRY_SIZE) {
        let (flags, key, value) = entry_fields(data, at);
        entries.push(Entry {
            name: read_string(data, strings, key, &mut budget)?,
            path: read_string(data, strings, value, &mut budget)?,
            flags,
            hwcap: 0,
        });
    }
    Ok(Cache {
        format: Format::Old,
        entries,
        generator: None,
        hwcaps_subdirs: Vec::new(),
    })
}

/// Reads and parses the cache file at `path`; every error names the file.
pub fn read(path: &Path) -> Result<Cache, LdCacheError> {
    let read_error = |source| LdCacheError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_error)?;
    let mut data = Vec::new();
    file.take(MAX_CACHE_SIZE + 1)
        .read_to_end(&mut data)
        .map_err(read_error)?;
    if data.len() as u64 > MAX_CACHE_SIZE {
        return Err(LdCacheError::FileTooLarge {
            path: path.to_path_buf(),
            max: MAX_CACHE_SIZE,
        });
    }
    parse(&data).map_err(|source| LdCacheError::Invalid {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// Writes `entries` as a new-format, little-endian cache without extension section,
/// sorted with [`sort_entries`] so that the loader's binary search finds them.
///
/// Identical strings are stored once. Entries keep their `hwcap` values, but without
/// an extension section the loader ignores entries that use the hwcaps extension bit.
pub fn write(entries: &[Entry]) -> Result<Vec<u8>, LdCacheError> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| cache_order(a, b));

    let too_large = |_| LdCacheError::TooLargeToWrite;
    let strings_start = sorted
        .len()
        .checked_mul(NEW_ENTRY_SIZE)
        .and_then(|n| n.checked_add(NEW_HEADER_SIZE))
        .ok_or(LdCacheError::TooLargeToWrite)?;
    let mut strings = StringTable {
        start: strings_start,
        bytes: Vec::new(),
        offsets: HashMap::new(),
    };
    let mut table = Vec::with_capacity(strings_start);
    for entry in &sorted {
        let key = strings.intern(&entry.name)?;
        let value = strings.intern(&entry.path)?;
        table.extend_from_slice(&entry.flags.to_le_bytes());
        table.extend_from_slice(&key.to_le_bytes());
        table.extend_from_slice(&value.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes()); // osversion, unused
        table.extend_from_slice(&entry.hwcap.to_le_bytes());
    }
    let strings = strings.bytes;
    let nlibs = u32::try_from(sorted.len()).map_err(too_large)?;
    let len_strings = u32::try_from(strings.len()).map_err(too_large)?;
    let mut out = Vec::with_capacity(strings_start + strings.len());
    out.extend_from_slice(NEW_MAGIC);
    out.extend_from_slice(&nlibs.to_le_bytes());
    out.extend_from_slice(&len_strings.to_le_bytes());
    out.extend_from_slice(&[ENDIAN_LITTLE, 0, 0, 0]);
    out.extend_from_slice(&0u32.to_le_bytes()); // extension_offset: none
    out.extend_from_slice(&[0u8; 12]);
    out.extend_from_slice(&table);
    out.extend_from_slice(&strings);
    Ok(out)
}

/// The string area [`write`] builds, each distinct string stored once.
struct StringTable<'a> {
    /// Where the area starts, counted from the header.
    start: usize,
    bytes: Vec<u8>,
    offsets: HashMap<&'a str, u32>,
}

impl<'a> StringTable<'a> {
    fn intern(&mut self, s: &'a str) -> Result<u32, LdCacheError> {
        if let Some(&offset) = self.offsets.get(s) {
            return Ok(offset);
        }
        if s.as_bytes().contains(&0) {
            return Err(LdCacheError::NulInString(s.to_string()));
        }
        // What the writer writes, the parser must read back.
        if s.len() >= MAX_STRING_LEN {
            return Err(LdCacheError::StringTooLongToWrite { len: s.len() });
        }
        // The whole file must stay addressable by u32 offsets.
        let offset = self
            .start
            .checked_add(self.bytes.len())
            .and_then(|o| u32::try_from(o).ok())
            .filter(|&o| u64::from(o) + (s.len() as u64) < u64::from(u32::MAX))
            .ok_or(LdCacheError::TooLargeToWrite)?;
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
        self.offsets.insert(s, offset);
        Ok(offset)
    }
}

/// Sorts entries into the order `ldconfig` writes them: names descending by [`libcmp`],
/// then flags descending, then glibc-hwcaps entries (by subdirectory index) before plain
/// ones. The sort is stable, so of two entries for the same name and ABI (the same
/// soname in two directories) the earlier one stays first, and the loader takes it.
pub fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(cache_order);
}

/// glibc's `_dl_cache_libcmp`, the order of cache keys: runs of digits compare as
/// numbers and sort after every other character; other bytes compare as C `char`s.
///
/// Digit runs are compared exactly, where glibc's `int` arithmetic overflows past
/// 2^31 - 1; for numbers below that the result is glibc's, and this order is total, so
/// sorting with it is well-defined on any input.
pub fn libcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let (mut i, mut j) = (0, 0);
    loop {
        let (ca, cb) = (at(a, i), at(b, j));
        if ca == 0 {
            return c_char_value(0).cmp(&c_char_value(cb));
        }
        match (ca.is_ascii_digit(), cb.is_ascii_digit()) {
            (true, true) => {
                let end_a = digits_end(a, i);
                let end_b = digits_end(b, j);
                match compare_numbers(&a[i..end_a], &b[j..end_b]) {
                    Ordering::Equal => (i, j) = (end_a, end_b),
                    unequal => return unequal,
                }
            }
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) if ca != cb => return c_char_value(ca).cmp(&c_char_value(cb)),
            (false, false) => (i, j) = (i + 1, j + 1),
        }
    }
}

/// Lists library directories the way `ldconfig` does and returns the cache entries it
/// would make, unsorted; [`write`] sorts them.
///
/// Each pair is (the directory as seen from the container's root, written into the cache;
/// where to read it now). A directory that does not exist is skipped, as is a later
/// directory that is the same as an earlier one.
///
/// As `ldconfig` does: files named like shared objects (`lib*.so*`, `ld-*.so*`, `ld.so.*`,
/// `ld64.so.*`) that are, after following symbolic links, regular ELF files of type
/// `ET_DYN` are taken; the entry name is the `DT_SONAME`, or for a file without one its
/// own name (as glibc up to at least 2.36 does; newer ldconfig cuts it after the major
/// version, `libx.so.1.2` giving `libx.so.1`); a symbolic link
/// named like the soname, or a development link `libx.so` to it, gives an entry of its
/// own name; of several files with one soname in a directory one entry is made. Entries
/// for one soname from several directories are all kept, in directory order, so the first
/// directory wins lookups. Flags come from the ELF class and machine (x86-64 `0x0303`,
/// i386 `0x0003`, x32 `0x0803`, AArch64 `0x0a03`; others are skipped).
///
/// Unlike `ldconfig`, which writes `dir/soname` and creates that link, this creates
/// nothing: the path is `dir/soname` when that name exists, otherwise the newest file
/// with the soname. It also skips sonames containing `/`, and does not scan glibc-hwcaps
/// subdirectories. Files that cannot be read as ELF are skipped, with a debug log.
///
/// The read paths are used as they are, following symbolic links: for a container's
/// root file system, pass directories that the caller has resolved safely inside it, as
/// a link there may point anywhere on the host (only regular files are opened, and only
/// their ELF headers are read).
pub fn entries_for_dirs(dirs: &[(PathBuf, PathBuf)]) -> Result<Vec<Entry>, LdCacheError> {
    let mut seen_dirs = HashSet::new();
    let mut entries = Vec::new();
    for (cache_dir, read_dir) in dirs {
        let cache_dir_str = cache_dir.to_str().ok_or_else(|| LdCacheError::NonUtf8Dir {
            path: cache_dir.clone(),
        })?;
        // ldconfig drops trailing white space and slashes, and with them "/" itself.
        let cache_dir_str = cache_dir_str.trim_end().trim_end_matches('/');
        if cache_dir_str.is_empty() {
            continue;
        }
        let meta = match std::fs::metadata(read_dir) {
            Ok(meta) => meta,
            Err(e) => {
                log::debug!("skipping library directory {}: {e}", read_dir.display());
                continue;
            }
        };
        if !seen_dirs.insert((meta.dev(), meta.ino())) {
            continue;
        }
        entries.extend(scan_dir(cache_dir_str, read_dir)?);
    }
    Ok(entries)
}

/// A library found in one directory, before its cache entry is made.
struct DirLib {
    file: String,
    soname: String,
    is_link: bool,
    flags: i32,
}

fn scan_dir(cache_dir: &str, read_dir: &Path) -> Result<Vec<Entry>, LdCacheError> {
    let list_error = |source| LdCacheError::ReadDir {
        path: read_dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for dirent in std::fs::read_dir(read_dir).map_err(list_error)? {
        let dirent = dirent.map_err(list_error)?;
        match dirent.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(name) => log::debug!("skipping non-UTF-8 file name {name:?}"),
        }
    }
    // readdir order is arbitrary; sorting makes the result reproducible.
    names.sort();

    let mut libs: Vec<DirLib> = Vec::new();
    for file in names {
        if !looks_like_dso(&file) || file.ends_with(".#prelink#") || file.contains(".#prelink#.") {
            continue;
        }
        let full = read_dir.join(&file);
        let Some(lib) = examine(&full, &file) else {
            continue;
        };
        match libs.iter_mut().find(|l| l.soname == lib.soname) {
            Some(known) => {
                // ldconfig prefers a file to a link, then the newer name.
                if (!lib.is_link && known.is_link)
                    || (lib.is_link == known.is_link
                        && libcmp(&known.file, &lib.file) == Ordering::Less)
                {
                    known.file = lib.file;
                    known.is_link = lib.is_link;
                }
            }
            None => libs.push(lib),
        }
    }

    Ok(libs
        .into_iter()
        .map(|lib| {
            let file = if read_dir.join(&lib.soname).exists() {
                lib.soname.clone()
            } else {
                lib.file
            };
            Entry {
                path: format!("{cache_dir}/{file}"),
                name: lib.soname,
                flags: lib.flags,
                hwcap: 0,
            }
        })
        .collect())
}

/// Decides whether `full` (named `file`) is a library for the cache, as ldconfig's
/// `search_dir` and `process_file` do.
fn examine(full: &Path, file: &str) -> Option<DirLib> {
    let is_link = match std::fs::symlink_metadata(full) {
        Ok(meta) => meta.file_type().is_symlink(),
        Err(e) => {
            log::debug!("skipping {}: {e}", full.display());
            return None;
        }
    };
    match std::fs::metadata(full) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return None,
        Err(e) => {
            log::debug!("skipping {}: {e}", full.display());
            return None;
        }
    }
    let info = match elf::read_elf_info_path(full) {
        Ok(info) => info,
        Err(e) => {
            log::debug!("skipping {}: {e}", full.display());
            return None;
        }
    };
    if info.elf_type != ET_DYN {
        return None;
    }
    let arch = CacheArch::from_elf(info.class, info.machine)?;
    let mut soname = info.soname.unwrap_or_else(|| file.to_string());
    if soname.is_empty() || soname.contains('/') {
        log::debug!("skipping {}: unusable soname {soname:?}", full.display());
        return None;
    }
    // A link counts as a link only when it is named like the soname, or is the
    // development link (libx.so) to it; such a link gets an entry of its own name.
    let is_link =
        is_link && (file == soname || (file.ends_with(".so") && soname.starts_with(file)));
    if is_link {
        soname = file.to_string();
    }
    Some(DirLib {
        file: file.to_string(),
        soname,
        is_link,
        flags: arch.flags(),
    })
}

/// glibc's `_dl_is_dso`: `lib*.so*`, `ld-*.so*`, `ld.so.*` and `ld64.so.*`.
fn looks_like_dso(name: &str) -> bool {
    ((name.starts_with("lib") || name.starts_with("ld-")) && name.contains(".so"))
        || name.starts_with("ld.so.")
        || name.starts_with("ld64.so.")
}

fn cache_order(a: &Entry, b: &Entry) -> Ordering {
    libcmp(&b.name, &a.name)
        .then_with(|| b.flags.cmp(&a.flags))
        .then_with(|| match (a.hwcaps_index(), b.hwcaps_index()) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

/// A byte's value as a C `char` on this target (signed on x86, unsigned on AArch64),
/// which decides where non-ASCII names sort.
fn c_char_value(b: u8) -> i32 {
    i32::from(b as std::ffi::c_char)
}

fn digits_end(s: &[u8], from: usize) -> usize {
    from + s[from..].iter().take_while(|b| b.is_ascii_digit()).count()
}

fn compare_numbers(a: &[u8], b: &[u8]) -> Ordering {
    let strip = |s: &[u8]| -> usize { s.iter().take_while(|&&d| d == b'0').count() };
    let (a, b) = (&a[strip(a)..], &b[strip(b)..]);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Parses the new-format table whose header starts at `start`.
fn parse_new(data: &[u8], start: usize, format: Format) -> Result<Cache, LdCacheError> {
    let truncated = LdCacheError::Truncated { what: "new header" };
    let header = start
        .checked_add(NEW_HEADER_SIZE)
        .and_then(|end| data.get(start..end))
        .ok_or(truncated)?;
    let nlibs = read_u32(header, 20).unwrap_or(0);
    let endian = header[28];
    // glibc's cache_file_new_matches_endian.
    if endian != 0 && endian & ENDIAN_MASK != ENDIAN_LITTLE {
        return Err(if endian & ENDIAN_MASK == ENDIAN_BIG {
            LdCacheError::BigEndian
        } else {
            LdCacheError::BadEndianFlags(endian)
        });
    }
    let extension_offset = read_u32(header, 32).unwrap_or(0);
    table_end(
        start + NEW_HEADER_SIZE,
        nlibs,
        NEW_ENTRY_SIZE,
        data.len(),
        "new entries",
    )?;

    let mut budget = StringBudget::for_file(data.len());
    let mut entries = Vec::new();
    for at in (0..nlibs as usize).map(|i| start + NEW_HEADER_SIZE + i * NEW_ENTRY_SIZE) {
        let (flags, key, value) = entry_fields(data, at);
        entries.push(Entry {
            name: read_string(data, start, key, &mut budget)?,
            path: read_string(data, start, value, &mut budget)?,
            flags,
            hwcap: read_u64(data, at + 16).unwrap_or(0),
        });
    }

    // The glibc-hwcaps names are string offsets from the new header, which is where
    // ldconfig means them to count from; glibc's readers count them from the start of
    // the file, which gives garbage names for compat files.
    let (generator, hwcaps_subdirs) = match parse_extension(data, extension_offset) {
        Some(Extension { generator, hwcaps }) => {
            let hwcaps = hwcaps
                .map(|indices| {
                    indices
                        .into_iter()
                        .map(|index| read_string(data, start, index, &mut budget))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()
                .unwrap_or_else(|e| {
                    log::debug!("ignoring the glibc-hwcaps names of an ld.so.cache: {e}");
                    None
                });
            (generator, hwcaps.unwrap_or_default())
        }
        None => (None, Vec::new()),
    };
    Ok(Cache {
        format,
        entries,
        generator,
        hwcaps_subdirs,
    })
}

/// What the extension directory holds.
struct Extension {
    generator: Option<String>,
    hwcaps: Option<Vec<u32>>,
}

/// Reads the extension directory like glibc's `cache_extension_load`: any inconsistency
/// drops the whole directory (the loader then ignores hwcaps subdirectories; the cache
/// stays usable), so this returns `None` rather than an error.
///
/// `offset` counts from the start of the file.
fn parse_extension(data: &[u8], offset: u32) -> Option<Extension> {
    if offset == 0 {
        return Some(Extension {
            generator: None,
            hwcaps: None,
        });
    }
    let invalid = |why: &str| {
        log::debug!("ignoring the extension section of an ld.so.cache: {why}");
        None
    };
    let offset = offset as usize;
    if offset % 4 != 0 {
        return invalid("misaligned");
    }
    let (Some(magic), Some(count)) = (read_u32(data, offset), read_u32(data, offset + 4)) else {
        return invalid("truncated");
    };
    if magic != EXTENSION_MAGIC {
        return invalid("bad magic");
    }
    let sections_start = offset + EXTENSION_HEADER_SIZE;
    if table_end(
        sections_start,
        count,
        EXTENSION_SECTION_SIZE,
        data.len(),
        "extension",
    )
    .is_err()
    {
        return invalid("section table runs past the end of the file");
    }
    let (mut generator, mut hwcaps) = (None, None);
    for at in (0..count as usize).map(|i| sections_start + i * EXTENSION_SECTION_SIZE) {
        let tag = read_u32(data, at).unwrap_or(u32::MAX);
        let start = read_u32(data, at + 8).unwrap_or(0) as usize;
        let size = read_u32(data, at + 12).unwrap_or(0) as usize;
        let Some(bytes) = start.checked_add(size).and_then(|end| data.get(start..end)) else {
            return invalid("section data runs past the end of the file");
        };
        match tag {
            EXTENSION_TAG_GENERATOR => generator = Some(bytes),
            EXTENSION_TAG_GLIBC_HWCAPS => hwcaps = Some((start, bytes)),
            _ => {}
        }
    }
    let generator = generator.map(|bytes| {
        let bytes = &bytes[..bytes.len().min(MAX_STRING_LEN)];
        String::from_utf8_lossy(bytes).into_owned()
    });
    // glibc's cache_extension_verify: a usable hwcaps section is non-empty, aligned and
    // a whole number of u32s.
    let hwcaps = hwcaps
        .filter(|(start, bytes)| !bytes.is_empty() && start % 4 == 0 && bytes.len() % 4 == 0)
        .map(|(_, bytes)| {
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        });
    Some(Extension { generator, hwcaps })
}

/// The end of a table of `count` entries of `size` bytes at `start`, checked to lie
/// within `len`.
fn table_end(
    start: usize,
    count: u32,
    size: usize,
    len: usize,
    what: &'static str,
) -> Result<usize, LdCacheError> {
    usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(size))
        .and_then(|n| n.checked_add(start))
        .filter(|&end| end <= len)
        .ok_or(LdCacheError::Truncated { what })
}

/// `flags`, `key` and `value` of the entry at `at`, which the caller checked is inside
/// the data.
fn entry_fields(data: &[u8], at: usize) -> (i32, u32, u32) {
    (
        read_u32(data, at).unwrap_or(0) as i32,
        read_u32(data, at + 4).unwrap_or(0),
        read_u32(data, at + 8).unwrap_or(0),
    )
}

/// Caps the bytes of strings decoded from one file, so that many entries pointing at
/// the same long string cannot make parsing allocate far more than the file's size.
struct StringBudget {
    left: usize,
    max: usize,
}

impl StringBudget {
    fn for_file(len: usize) -> StringBudget {
        // ldconfig stores each path once and names as suffixes of paths, so a real cache
        // decodes to at most about twice its size.
        let max = len.saturating_mul(8).saturating_add(1024 * 1024);
        StringBudget { left: max, max }
    }
}

/// The NUL-terminated string at `base + offset`.
fn read_string(
    data: &[u8],
    base: usize,
    offset: u32,
    budget: &mut StringBudget,
) -> Result<String, LdCacheError> {
    let file_offset = base as u64 + u64::from(offset);
    let Some(rest) = usize::try_from(file_offset)
        .ok()
        .and_then(|at| data.get(at..))
        .filter(|rest| !rest.is_empty())
    else {
        return Err(LdCacheError::StringOutOfRange {
            offset: file_offset,
        });
    };
    let window = &rest[..rest.len().min(MAX_STRING_LEN)];
    let Some(len) = window.iter().position(|&b| b == 0) else {
        return Err(if window.len() == rest.len() {
            LdCacheError::UnterminatedString {
                offset: file_offset,
            }
        } else {
            LdCacheError::StringTooLong {
                offset: file_offset,
            }
        });
    };
    budget.left = budget
        .left
        .checked_sub(len)
        .ok_or(LdCacheError::TooMuchStringData { max: budget.max })?;
    std::str::from_utf8(&window[..len])
        .map(str::to_string)
        .map_err(|_| LdCacheError::NonUtf8String {
            offset: file_offset,
        })
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn read_u64(data: &[u8], at: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::test_support::{shared_object, shared_object_32};
    use std::os::unix::fs::symlink;
    use std::process::Command;

    /// The system's ldconfig; a missing one fails the test, saying so.
    fn ldconfig() -> PathBuf {
        let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|d| d.join("ldconfig"))
                    .collect()
            })
            .unwrap_or_default();
        candidates.extend(["/sbin/ldconfig".into(), "/usr/sbin/ldconfig".into()]);
        candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
            panic!("ldconfig is missing: these tests compare with glibc's ldconfig (install libc-bin)")
        })
    }

    fn run(cmd: &mut Command) -> String {
        let output = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        assert!(
            output.status.success(),
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// The entry lines of `ldconfig -p -C file`, checking the count line on the way.
    fn ldconfig_listing(file: &Path) -> (Vec<String>, Option<String>) {
        let out = run(Command::new(ldconfig()).arg("-p").arg("-C").arg(file));
        let mut lines = out.lines();
        let count_line = lines.next().unwrap_or_default().to_string();
        let mut entries = Vec::new();
        let mut generator = None;
        for line in lines {
            if let Some(g) = line.strip_prefix("Cache generated by: ") {
                generator = Some(g.to_string());
            } else {
                assert!(
                    line.starts_with('\t'),
                    "unexpected ldconfig -p line {line:?}"
                );
                entries.push(line.to_string());
            }
        }
        assert!(
            count_line.starts_with(&format!("{} libs found in cache", entries.len())),
            "{count_line:?} for {} entries",
            entries.len()
        );
        (entries, generator)
    }

    /// An entry as glibc's `print_entry` prints it.
    fn describe(cache: &Cache, e: &Entry) -> String {
        let kind = match e.flags & FLAG_TYPE_MASK {
            0 => "libc4",
            FLAG_ELF => "ELF",
            2 => "libc5",
            FLAG_ELF_LIBC6 => "libc6",
            _ => "unknown or unsupported flag",
        };
        let abi = match e.flags & FLAG_REQUIRED_MASK {
            0 => String::new(),
            FLAG_X8664_LIB64 => ",x86-64".into(),
            FLAG_X8664_LIBX32 => ",x32".into(),
            FLAG_AARCH64_LIB64 => ",AArch64".into(),
            other => format!(",{other}"),
        };
        let hwcap = match cache.hwcaps_subdir(e) {
            Some(name) => format!(", hwcap: \"{name}\""),
            None if e.hwcap != 0 => format!(", hwcap: 0x{:016x}", e.hwcap),
            None => String::new(),
        };
        format!("\t{} ({kind}{abi}{hwcap}) => {}", e.name, e.path)
    }

    fn describe_all(cache: &Cache) -> Vec<String> {
        cache.entries.iter().map(|e| describe(cache, e)).collect()
    }

    fn without_hwcap_names(lines: &[String]) -> Vec<String> {
        lines
            .iter()
            .map(|l| match (l.find(", hwcap: \""), l.find(") => ")) {
                (Some(a), Some(b)) if a < b => format!("{}{}", &l[..a], &l[b..]),
                _ => l.clone(),
            })
            .collect()
    }

    fn triples(entries: &[Entry]) -> Vec<(String, String, i32)> {
        entries
            .iter()
            .map(|e| (e.name.clone(), e.path.clone(), e.flags))
            .collect()
    }

    /// A root with two library directories of real shared objects, listed in
    /// `etc/ld.so.conf`.
    struct Fixture {
        root: tempfile::TempDir,
        has_i386: bool,
    }

    impl Fixture {
        fn new() -> Fixture {
            let root = tempfile::tempdir().unwrap();
            let lib = root.path().join("opt/nv/lib");
            let lib2 = root.path().join("opt/nv/lib2");
            let hwcaps = lib.join("glibc-hwcaps/x86-64-v2");
            let build = root.path().join("build");
            for d in [&lib, &lib2, &hwcaps, &build, &root.path().join("etc")] {
                std::fs::create_dir_all(d).unwrap();
            }
            let so = |dir: &Path, file: &str, soname: Option<&str>| {
                let built = shared_object(&build, file, soname);
                std::fs::rename(built, dir.join(file)).unwrap();
            };
            let link =
                |dir: &Path, target: &str, name: &str| symlink(target, dir.join(name)).unwrap();

            // Two versions with one soname, the soname link and the development link.
            so(&lib, "libnvfoo.so.999.88.77", Some("libnvfoo.so.1"));
            so(&lib, "libnvfoo.so.999.88.5", Some("libnvfoo.so.1"));
            link(&lib, "libnvfoo.so.999.88.77", "libnvfoo.so.1");
            link(&lib, "libnvfoo.so.1", "libnvfoo.so");
            // Major versions that sort numerically, not as text.
            so(&lib, "libnvqux.so.2.0", Some("libnvqux.so.2"));
            link(&lib, "libnvqux.so.2.0", "libnvqux.so.2");
            so(&lib, "libnvqux.so.10.0", Some("libnvqux.so.10"));
            link(&lib, "libnvqux.so.10.0", "libnvqux.so.10");
            so(&lib, "libnv9.so.1", Some("libnv9.so.1"));
            so(&lib, "libnv10.so.1", Some("libnv10.so.1"));
            // No DT_SONAME: each name is its own key (glibc 2.36; newer ldconfig would
            // use libnvbar.so.2 for both).
            so(&lib, "libnvbar.so.2.3", None);
            link(&lib, "libnvbar.so.2.3", "libnvbar.so.2");
            // Things ldconfig skips.
            std::fs::write(
                lib.join("libnvscript.so"),
                "/* GNU ld script */\nGROUP ( libnvfoo.so.1 )\n",
            )
            .unwrap();
            link(&lib, "libnvmissing.so.999", "libnvdangling.so.1");
            so(&lib, "notalib.so.1", Some("notalib.so.1"));
            so(
                &lib,
                "libnvpre.so.1.#prelink#.AbCdEf",
                Some("libnvpre.so.1"),
            );
            std::fs::write(build.join("x.c"), "int main(void) { return 0; }\n").unwrap();
            crate::elf::test_support::gcc(&build, &["-no-pie", "-o", "exe"]).unwrap();
            std::fs::rename(build.join("exe"), lib.join("libnvexe.so.1")).unwrap();
            std::fs::remove_file(build.join("x.c")).unwrap();
            // A glibc-hwcaps copy, which ldconfig lists with the extension.
            so(&hwcaps, "libnvfoo.so.1", Some("libnvfoo.so.1"));
            // The same soname in the second directory, and one of its own.
            so(&lib2, "libnvfoo.so.999.88.77", Some("libnvfoo.so.1"));
            link(&lib2, "libnvfoo.so.999.88.77", "libnvfoo.so.1");
            so(&lib2, "libnvtwo.so.3", Some("libnvtwo.so.3"));

            // An i386 library, linked against a stub libc.so.6 so that it needs libc like
            // a real one (glibc 2.36's ldconfig marks it libc6 only then).
            let stub = shared_object_32(&build, "libc.so.6", "libc.so.6", None);
            let has_i386 = match stub.and_then(|stub| {
                shared_object_32(&build, "libnv32.so.1", "libnv32.so.1", Some(&stub))
            }) {
                Ok(built) => {
                    std::fs::rename(built, lib.join("libnv32.so.1")).unwrap();
                    true
                }
                Err(why) => {
                    eprintln!("NOTE: no i386 library in the fixture, gcc -m32 fails here: {why}");
                    false
                }
            };

            std::fs::write(
                root.path().join("etc/ld.so.conf"),
                "/opt/nv/lib\n/opt/nv/lib2/\n",
            )
            .unwrap();
            Fixture { root, has_i386 }
        }

        /// Runs ldconfig on the fixture (chrooted or, unprivileged, path-rewritten by
        /// `-r`, so neither the host's libraries nor its aux cache are involved) and
        /// returns the cache file.
        fn ldconfig_cache(&self, format: &str) -> PathBuf {
            let name = format!("etc/ld.so.cache.{format}");
            run(Command::new(ldconfig())
                .args(["-X", "-i", "-r"])
                .arg(self.root.path())
                .args(["-f", "/etc/ld.so.conf", "-C"])
                .arg(format!("/{name}"))
                .args(["-c", format]));
            self.root.path().join(name)
        }

        fn dirs(&self) -> Vec<(PathBuf, PathBuf)> {
            ["/opt/nv/lib", "/opt/nv/lib2/"]
                .iter()
                .map(|d| (PathBuf::from(d), self.root.path().join(&d[1..])))
                .collect()
        }
    }

    #[test]
    fn parse_matches_ldconfig_for_every_format() {
        let fixture = Fixture::new();
        for (name, format) in [
            ("new", Format::New),
            ("old", Format::Old),
            ("compat", Format::Compat),
        ] {
            let file = fixture.ldconfig_cache(name);
            let cache = read(&file).unwrap();
            assert_eq!(cache.format, format, "{name}");
            let (expected, generator) = ldconfig_listing(&file);
            let ours = describe_all(&cache);
            if format == Format::Compat {
                // ldconfig resolves the hwcaps names of compat files from the wrong base
                // and prints garbage; ours are right.
                assert_eq!(
                    without_hwcap_names(&ours),
                    without_hwcap_names(&expected),
                    "{name}"
                );
                assert_eq!(cache.hwcaps_subdirs, ["x86-64-v2"]);
            } else {
                assert_eq!(ours, expected, "{name}");
            }
            assert_eq!(cache.generator, generator, "{name}");

            // The fixture's entries, in ldconfig's order (hwcaps entries come out as
            // plain ones in the old format, which has no hwcap field).
            let paths: Vec<&str> = cache.entries.iter().map(|e| e.path.as_str()).collect();
            let mut want = vec![
                "/opt/nv/lib/libnv10.so.1",
                "/opt/nv/lib/libnv9.so.1",
                "/opt/nv/lib2/libnvtwo.so.3",
                "/opt/nv/lib/libnvqux.so.10",
                "/opt/nv/lib/libnvqux.so.2",
                "/opt/nv/lib/glibc-hwcaps/x86-64-v2/libnvfoo.so.1",
                "/opt/nv/lib/libnvfoo.so.1",
                "/opt/nv/lib2/libnvfoo.so.1",
                "/opt/nv/lib/libnvfoo.so",
                "/opt/nv/lib/libnvbar.so.2.3",
                "/opt/nv/lib/libnvbar.so.2",
            ];
            if fixture.has_i386 {
                // A digit sorts after letters, and the order is descending.
                want.insert(0, "/opt/nv/lib/libnv32.so.1");
            }
            assert_eq!(paths, want, "{name}");
        }
    }

    #[test]
    fn compat_pads_the_old_table_to_an_even_count() {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join("opt/one");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        shared_object(&lib, "libone.so.1", Some("libone.so.1"));
        std::fs::remove_file(lib.join("x.c")).unwrap();
        std::fs::write(root.path().join("etc/ld.so.conf"), "/opt/one\n").unwrap();
        let fixture = Fixture {
            root,
            has_i386: false,
        };
        let file = fixture.ldconfig_cache("compat");
        let bytes = std::fs::read(&file).unwrap();
        // One library, two old entries (the last one repeated), and the new header right
        // after them at 16 + 2 * 12 = 40, a multiple of 8.
        assert_eq!(read_u32(&bytes, 12), Some(2));
        assert!(bytes[40..].starts_with(NEW_MAGIC));
        let cache = parse(&bytes).unwrap();
        assert_eq!(cache.format, Format::Compat);
        assert_eq!(
            triples(&cache.entries),
            [(
                "libone.so.1".to_string(),
                "/opt/one/libone.so.1".to_string(),
                0x0303
            )]
        );
        // Without the new header, the old table shows the repeated entry.
        let mut old_only = bytes.clone();
        old_only[40] = b'X';
        let cache = parse(&old_only).unwrap();
        assert_eq!(cache.format, Format::Old);
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(cache.entries[0], cache.entries[1]);
        assert_eq!(cache.entries[0].path, "/opt/one/libone.so.1");
    }

    #[test]
    fn parse_matches_ldconfig_for_the_host_cache() {
        let file = Path::new("/etc/ld.so.cache");
        if !file.exists() {
            eprintln!("SKIPPED parse_matches_ldconfig_for_the_host_cache: no /etc/ld.so.cache");
            return;
        }
        let cache = read(file).unwrap();
        let (expected, generator) = ldconfig_listing(file);
        assert_eq!(describe_all(&cache), expected);
        assert_eq!(cache.generator, generator);
    }

    #[test]
    fn ldconfig_accepts_written_cache() {
        let fixture = Fixture::new();
        let theirs = fixture.ldconfig_cache("new");
        let cache = read(&theirs).unwrap();
        // Our writer has no extension section, so hwcaps entries are left out.
        let plain: Vec<Entry> = cache
            .entries
            .iter()
            .filter(|e| e.hwcaps_index().is_none())
            .cloned()
            .collect();
        assert!(plain.len() < cache.entries.len());
        let bytes = write(&plain).unwrap();
        let ours = fixture.root.path().join("ours.cache");
        std::fs::write(&ours, &bytes).unwrap();

        let (expected, _) = ldconfig_listing(&theirs);
        let expected: Vec<String> = expected
            .into_iter()
            .filter(|l| !l.contains("hwcap"))
            .collect();
        let (listed, generator) = ldconfig_listing(&ours);
        assert_eq!(listed, expected);
        assert_eq!(generator, None);

        let reparsed = parse(&bytes).unwrap();
        assert_eq!(reparsed.format, Format::New);
        assert_eq!(reparsed.entries, plain);
        // Writing sorts: the same bytes from any order of distinct keys.
        let mut distinct = plain.clone();
        distinct.retain(|e| e.path != "/opt/nv/lib2/libnvfoo.so.1");
        let mut reversed = distinct.clone();
        reversed.reverse();
        assert_eq!(write(&reversed).unwrap(), write(&distinct).unwrap());
    }

    #[test]
    fn entries_for_dirs_match_ldconfig() {
        let fixture = Fixture::new();
        let theirs = read(&fixture.ldconfig_cache("new")).unwrap();
        let expected: Vec<Entry> = theirs
            .entries
            .into_iter()
            .filter(|e| e.hwcaps_index().is_none())
            .collect();

        let mut entries = entries_for_dirs(&fixture.dirs()).unwrap();
        let bytes = write(&entries).unwrap();
        assert_eq!(triples(&parse(&bytes).unwrap().entries), triples(&expected));
        sort_entries(&mut entries);
        assert_eq!(entries, expected);

        // glibc reads it like its own.
        let ours = fixture.root.path().join("built.cache");
        std::fs::write(&ours, &bytes).unwrap();
        let (listed, _) = ldconfig_listing(&ours);
        let cache = parse(&bytes).unwrap();
        assert_eq!(listed, describe_all(&cache));

        // Without the soname links the files themselves are used.
        let lib = fixture.root.path().join("opt/nv/lib");
        std::fs::remove_file(lib.join("libnvqux.so.2")).unwrap();

        let entries = entries_for_dirs(&fixture.dirs()).unwrap();
        let path_of = |name: &str| {
            entries
                .iter()
                .find(|e| e.name == name)
                .map(|e| e.path.clone())
        };
        assert_eq!(
            path_of("libnvqux.so.2").as_deref(),
            Some("/opt/nv/lib/libnvqux.so.2.0")
        );
        std::fs::remove_file(lib.join("libnvfoo.so.1")).unwrap();
        std::fs::remove_file(lib.join("libnvfoo.so")).unwrap();
        let entries = entries_for_dirs(&fixture.dirs()).unwrap();
        let foo: Vec<&str> = entries
            .iter()
            .filter(|e| e.name == "libnvfoo.so.1")
            .map(|e| e.path.as_str())
            .collect();
        // The newest of the two files with that soname, then the second directory's link.
        assert_eq!(
            foo,
            [
                "/opt/nv/lib/libnvfoo.so.999.88.77",
                "/opt/nv/lib2/libnvfoo.so.1"
            ]
        );
    }

    #[test]
    fn entries_for_dirs_skips_missing_and_repeated_dirs() {
        let fixture = Fixture::new();
        let mut dirs = fixture.dirs();
        dirs.insert(0, ("/nope".into(), fixture.root.path().join("nope")));
        // The same directory again under another name, and "/", which ldconfig ignores.
        dirs.push(("/again".into(), fixture.root.path().join("opt/nv/lib")));
        dirs.push(("/".into(), fixture.root.path().join("opt/nv/lib")));
        let entries = entries_for_dirs(&dirs).unwrap();
        assert_eq!(entries, entries_for_dirs(&fixture.dirs()).unwrap());

        let file = fixture.root.path().join("etc/ld.so.conf");
        let err = entries_for_dirs(&[("/etc".into(), file.clone())]).unwrap_err();
        assert!(
            matches!(&err, LdCacheError::ReadDir { path, .. } if path == &file),
            "{err:?}"
        );
    }

    #[test]
    fn lookup_takes_the_first_match_for_the_arch() {
        let fixture = Fixture::new();
        let cache = read(&fixture.ldconfig_cache("new")).unwrap();
        let foo = cache.lookup("libnvfoo.so.1", CacheArch::X86_64).unwrap();
        assert_eq!(foo.path, "/opt/nv/lib/glibc-hwcaps/x86-64-v2/libnvfoo.so.1");
        assert_eq!(cache.hwcaps_subdir(foo), Some("x86-64-v2"));
        assert_eq!(cache.lookup("libnvfoo.so.1", CacheArch::Aarch64), None);
        assert_eq!(
            cache.lookup("libnvfoo.so", CacheArch::X86_64).unwrap().path,
            "/opt/nv/lib/libnvfoo.so"
        );
        assert_eq!(cache.lookup("libnvfoo.so.2", CacheArch::X86_64), None);
        if fixture.has_i386 {
            let e = cache.lookup("libnv32.so.1", CacheArch::I386).unwrap();
            assert_eq!(e.path, "/opt/nv/lib/libnv32.so.1");
            assert_eq!(cache.lookup("libnv32.so.1", CacheArch::X86_64), None);
        }

        let built = parse(&write(&entries_for_dirs(&fixture.dirs()).unwrap()).unwrap()).unwrap();
        let foo = built.lookup("libnvfoo.so.1", CacheArch::X86_64).unwrap();
        assert_eq!(
            foo.path, "/opt/nv/lib/libnvfoo.so.1",
            "the first directory wins"
        );
        assert_eq!(built.hwcaps_subdir(foo), None);
    }

    #[test]
    fn libcmp_orders_numbers_numerically() {
        use Ordering::{Equal, Greater, Less};
        for (a, b, want) in [
            ("libfoo.so.10", "libfoo.so.9", Greater),
            ("libfoo.so.9", "libfoo.so.10", Less),
            ("libfoo.so.1", "libfoo.so.1", Equal),
            ("libfoo.so.01", "libfoo.so.1", Equal),
            ("libfoo.so.1.2", "libfoo.so.1.10", Less),
            ("libfoo.so", "libfoo.so.1", Less),
            ("libfoo.so.1", "libfoo.so", Greater),
            ("libnv10.so", "libnv9.so", Greater),
            // A digit sorts after every other character, and a number ends the run.
            ("libfoo1.so", "libfooa.so", Greater),
            ("libfoo.so", "libfoo1.so", Less),
            ("libfoo-1", "libfoo1", Less),
            ("liba.so", "libb.so", Less),
            ("libB.so", "liba.so", Less),
            ("", "", Equal),
            ("", "a", Less),
            ("1", "", Greater),
            // Past i32, where glibc overflows, the comparison stays exact.
            (
                "lib99999999999999999999.so",
                "lib99999999999999999998.so",
                Greater,
            ),
        ] {
            assert_eq!(libcmp(a, b), want, "libcmp({a:?}, {b:?})");
            assert_eq!(libcmp(b, a), want.reverse(), "libcmp({b:?}, {a:?})");
        }
        // Non-ASCII bytes compare as C chars: signed on x86, so below NUL and ASCII.
        if std::ffi::c_char::MIN < 0 {
            assert_eq!(libcmp("libé.so", "libe.so"), Less);
            assert_eq!(libcmp("lib", "libé"), Greater);
        }
    }

    #[test]
    fn sort_order_is_ldconfigs() {
        let e = |name: &str, path: &str, flags: i32, hwcap: u64| Entry {
            name: name.into(),
            path: path.into(),
            flags,
            hwcap,
        };
        let mut entries = vec![
            e("liba.so.1", "/a/i386", 0x0003, 0),
            e("liba.so.1", "/a/first", 0x0303, 0),
            e("libb.so.2", "/b", 0x0303, 0),
            e("liba.so.1", "/a/second", 0x0303, 0),
            e("liba.so.1", "/a/v3", 0x0303, HWCAP_EXTENSION | 1),
            e("liba.so.1", "/a/v2", 0x0303, HWCAP_EXTENSION),
            e("libb.so.10", "/b10", 0x0303, 0),
        ];
        sort_entries(&mut entries);
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/b10",
                "/b",
                "/a/v2",
                "/a/v3",
                "/a/first",
                "/a/second",
                "/a/i386"
            ]
        );
    }

    #[test]
    fn arch_from_flags() {
        for (flags, want) in [
            (0x0303, Some(CacheArch::X86_64)),
            (0x0003, Some(CacheArch::I386)),
            (0x0803, Some(CacheArch::X32)),
            (0x0a03, Some(CacheArch::Aarch64)),
            (0x0903, Some(CacheArch::Other(0x0903))),
            (0x0001, None),
            (0x0301, None),
        ] {
            let entry = Entry {
                name: String::new(),
                path: String::new(),
                flags,
                hwcap: 0,
            };
            assert_eq!(entry.arch(), want, "{flags:#x}");
            if let Some(arch) = want {
                assert_eq!(arch.flags(), flags);
            }
        }
        assert_eq!(
            CacheArch::from_elf(ElfClass::Elf64, elf::EM_X86_64),
            Some(CacheArch::X86_64)
        );
        assert_eq!(
            CacheArch::from_elf(ElfClass::Elf32, elf::EM_386),
            Some(CacheArch::I386)
        );
        assert_eq!(
            CacheArch::from_elf(ElfClass::Elf64, elf::EM_AARCH64),
            Some(CacheArch::Aarch64)
        );
        assert_eq!(CacheArch::from_elf(ElfClass::Elf64, 243), None);
    }

    #[test]
    fn names_like_ldconfig() {
        for (name, dso) in [
            ("libfoo.so", true),
            ("libfoo.so.1", true),
            ("libfoo.sox", true),
            ("ld-linux-x86-64.so.2", true),
            ("ld.so.1", true),
            ("ld64.so.2", true),
            ("foo.so", false),
            ("libfoo.a", false),
            ("ld.so", false),
        ] {
            assert_eq!(looks_like_dso(name), dso, "{name}");
        }
    }

    /// A new-format cache whose entries all name the same strings.
    fn handmade(nlibs: u32, entries: &[(i32, u32, u32)], strings: &[u8]) -> Vec<u8> {
        let mut out = NEW_MAGIC.to_vec();
        out.extend_from_slice(&nlibs.to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        out.extend_from_slice(&[ENDIAN_LITTLE, 0, 0, 0]);
        out.extend_from_slice(&[0u8; 16]);
        for &(flags, key, value) in entries {
            out.extend_from_slice(&flags.to_le_bytes());
            out.extend_from_slice(&key.to_le_bytes());
            out.extend_from_slice(&value.to_le_bytes());
            out.extend_from_slice(&[0u8; 12]);
        }
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn hostile_caches_are_errors() {
        let at = |n: usize| (NEW_HEADER_SIZE + n * NEW_ENTRY_SIZE) as u32;
        let good = handmade(1, &[(0x0303, at(1), at(1) + 4)], b"abc\0/abc\0");
        assert_eq!(parse(&good).unwrap().entries[0].path, "/abc");

        assert!(matches!(parse(b""), Err(LdCacheError::BadMagic)));
        assert!(matches!(
            parse(b"glibc-ld.so.cache1.0"),
            Err(LdCacheError::BadMagic)
        ));
        assert!(matches!(
            parse(NEW_MAGIC),
            Err(LdCacheError::Truncated { .. })
        ));
        assert!(matches!(
            parse(OLD_MAGIC),
            Err(LdCacheError::Truncated { .. })
        ));
        // Counts past the file, up to u32::MAX.
        for nlibs in [2, 1000, u32::MAX] {
            let bad = handmade(nlibs, &[(0x0303, at(1), at(1))], b"abc\0");
            assert!(
                matches!(parse(&bad), Err(LdCacheError::Truncated { .. })),
                "{nlibs}"
            );
        }
        let mut old = OLD_MAGIC.to_vec();
        old.push(0);
        old.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(parse(&old), Err(LdCacheError::Truncated { .. })));
        // Offsets outside the file, strings without NUL, too long or not UTF-8.
        let bad = handmade(1, &[(0x0303, at(1), u32::MAX)], b"abc\0");
        assert!(matches!(
            parse(&bad),
            Err(LdCacheError::StringOutOfRange { .. })
        ));
        let bad = handmade(1, &[(0x0303, at(1), at(1))], b"abc");
        assert!(matches!(
            parse(&bad),
            Err(LdCacheError::UnterminatedString { .. })
        ));
        let long = [vec![b'a'; MAX_STRING_LEN + 10], vec![0]].concat();
        let bad = handmade(1, &[(0x0303, at(1), at(1))], &long);
        assert!(matches!(
            parse(&bad),
            Err(LdCacheError::StringTooLong { .. })
        ));
        let bad = handmade(1, &[(0x0303, at(1), at(1))], b"\xff\xfe\0");
        assert!(matches!(
            parse(&bad),
            Err(LdCacheError::NonUtf8String { .. })
        ));
        // Endianness.
        let mut bad = good.clone();
        bad[28] = ENDIAN_BIG;
        assert!(matches!(parse(&bad), Err(LdCacheError::BigEndian)));
        bad[28] = 1;
        assert!(matches!(parse(&bad), Err(LdCacheError::BadEndianFlags(1))));
        bad[28] = 0;
        assert!(
            parse(&bad).is_ok(),
            "an unset endianness is accepted, as glibc does"
        );
        // Many entries naming one long string would decode to far more than the file.
        let n = 4000;
        let string = [vec![b'a'; MAX_STRING_LEN - 1], vec![0]].concat();
        let entries = vec![(0x0303, at(n), at(n)); n];
        let bad = handmade(n as u32, &entries, &string);
        assert!(matches!(
            parse(&bad),
            Err(LdCacheError::TooMuchStringData { .. })
        ));
        // A broken extension is ignored, as the loader does.
        let mut ext = good.clone();
        let offset = ext.len().div_ceil(4) * 4;
        ext.resize(offset, 0);
        ext.extend_from_slice(&EXTENSION_MAGIC.to_le_bytes());
        ext.extend_from_slice(&u32::MAX.to_le_bytes());
        ext[32..36].copy_from_slice(&(offset as u32).to_le_bytes());
        let cache = parse(&ext).unwrap();
        assert_eq!((cache.entries.len(), cache.generator), (1, None));
    }

    #[test]
    fn read_and_write_errors() {
        let err = read(Path::new("/nonexistent/ld.so.cache")).unwrap_err();
        assert!(
            matches!(&err, LdCacheError::Read { path, .. } if path == Path::new("/nonexistent/ld.so.cache"))
        );
        assert_eq!(err.to_string(), "failed to read /nonexistent/ld.so.cache");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ld.so.cache");
        std::fs::write(&file, b"garbage").unwrap();
        let err = read(&file).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid ld.so.cache {}", file.display())
        );
        assert!(
            matches!(&err, LdCacheError::Invalid { source, .. } if matches!(**source, LdCacheError::BadMagic))
        );

        let entry = Entry {
            name: "lib\0x.so".into(),
            path: "/x".into(),
            flags: 0x0303,
            hwcap: 0,
        };
        assert!(matches!(write(&[entry]), Err(LdCacheError::NulInString(_))));
        let empty = write(&[]).unwrap();
        assert_eq!(empty.len(), NEW_HEADER_SIZE);
        assert_eq!(parse(&empty).unwrap().entries, []);
    }

    #[test]
    fn written_strings_are_ones_parse_reads_back() {
        // The longest string the parser takes round-trips; one byte more is refused by
        // the writer rather than written into a cache nothing can read.
        let longest = Entry {
            name: "l".repeat(MAX_STRING_LEN - 1),
            path: format!("/{}", "p".repeat(MAX_STRING_LEN - 2)),
            flags: 0x0303,
            hwcap: 0,
        };
        let cache = parse(&write(std::slice::from_ref(&longest)).unwrap()).unwrap();
        assert_eq!(cache.entries, std::slice::from_ref(&longest));
        for too_long in [
            Entry {
                name: "l".repeat(MAX_STRING_LEN),
                ..longest.clone()
            },
            Entry {
                path: "/".repeat(5000),
                ..longest
            },
        ] {
            let err = write(&[too_long]).unwrap_err();
            assert!(
                matches!(err, LdCacheError::StringTooLongToWrite { len } if len >= MAX_STRING_LEN),
                "{err}"
            );
        }
        assert_eq!(
            LdCacheError::StringTooLongToWrite { len: 5000 }.to_string(),
            "cache string of 5000 bytes is too long (at most 4095 bytes)"
        );
    }

    #[test]
    fn truncated_and_corrupted_caches_never_panic() {
        let fixture = Fixture::new();
        let mut samples: Vec<Vec<u8>> = ["new", "old", "compat"]
            .iter()
            .map(|f| std::fs::read(fixture.ldconfig_cache(f)).unwrap())
            .collect();
        if let Ok(host) = std::fs::read("/etc/ld.so.cache") {
            samples.push(host);
        }
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for good in &samples {
            let step = (good.len() / 2000).max(1);
            for len in (0..good.len()).step_by(step) {
                let _ = parse(&good[..len]);
            }
            for _ in 0..2000 {
                let mut bad = good.clone();
                for _ in 0..1 + next() % 6 {
                    // Mostly the headers and tables, where the counts and offsets are.
                    let limit = if next() % 3 == 0 {
                        bad.len()
                    } else {
                        bad.len().min(512)
                    };
                    let at = (next() as usize) % limit;
                    if next() % 4 == 0 && at + 4 <= bad.len() {
                        let word = [0u32, 1, 0x7fff_ffff, 0xffff_ffff, next() as u32]
                            [(next() % 5) as usize];
                        bad[at..at + 4].copy_from_slice(&word.to_le_bytes());
                    } else {
                        bad[at] = next() as u8;
                    }
                }
                if let Ok(cache) = parse(&bad) {
                    // Whatever parses can be written back.
                    let _ = write(&cache.entries);
                    for e in &cache.entries {
                        let _ = cache.hwcaps_subdir(e);
                    }
                }
            }
        }
    }
}
