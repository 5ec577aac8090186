//! Writing a cache: [`write()`] lays entries out in the new format, in the order
//! `ldconfig` writes them ([`sort_entries`], by glibc's key order [`libcmp`]), which is
//! the order the loader's binary search needs.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::{
    Entry, LdCacheError, ENDIAN_LITTLE, MAX_STRING_LEN, NEW_ENTRY_SIZE, NEW_HEADER_SIZE, NEW_MAGIC,
};

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

/// The string area [`write()`] builds, each distinct string stored once.
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
