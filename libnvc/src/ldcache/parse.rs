//! Reading a cache: [`parse`] takes the bytes of any of glibc's three layouts and checks
//! every count, offset and string against them; [`parse_file`] and [`read_from`] do the
//! same for a named file, so that every error says which.

use std::path::Path;

use super::{
    Cache, Entry, Format, LdCacheError, ENDIAN_BIG, ENDIAN_LITTLE, ENDIAN_MASK,
    EXTENSION_HEADER_SIZE, EXTENSION_MAGIC, EXTENSION_SECTION_SIZE, EXTENSION_TAG_GENERATOR,
    EXTENSION_TAG_GLIBC_HWCAPS, MAX_CACHE_SIZE, MAX_STRING_LEN, NEW_ENTRY_SIZE, NEW_HEADER_ALIGN,
    NEW_HEADER_SIZE, NEW_MAGIC, OLD_ENTRY_SIZE, OLD_HEADER_SIZE, OLD_MAGIC,
};
use crate::probe::HostProbe;

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

/// Parses `data`, the contents of the cache file `path`: like [`parse`], but data over
/// [`MAX_CACHE_SIZE`] is refused and every error names the file.
pub fn parse_file(data: &[u8], path: &Path) -> Result<Cache, LdCacheError> {
    if data.len() as u64 > MAX_CACHE_SIZE {
        return Err(LdCacheError::FileTooLarge {
            path: path.to_path_buf(),
            max: MAX_CACHE_SIZE,
        });
    }
    parse(data).map_err(|source| LdCacheError::Invalid {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// Reads the cache file at `path` through `probe` (at most [`MAX_CACHE_SIZE`] bytes)
/// and parses it with [`parse_file`]; every error names the file.
pub fn read_from(probe: &dyn HostProbe, path: &Path) -> Result<Cache, LdCacheError> {
    let (data, more) = probe
        .read(path, MAX_CACHE_SIZE as usize)
        .map_err(|source| LdCacheError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if more {
        return Err(LdCacheError::FileTooLarge {
            path: path.to_path_buf(),
            max: MAX_CACHE_SIZE,
        });
    }
    parse_file(&data, path)
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
