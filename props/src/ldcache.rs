//! glibc's `ld.so.cache` ([`libnvc::ldcache`]): the parser of all three layouts and the
//! writer.
//!
//! The input is read twice: as a cache file, and as a list of entries for the writer
//! (the input split at NUL bytes into name, path, flags and hwcap fields, see
//! [`entries_from`]).
//!
//! Properties:
//! - no input makes [`parse`] panic, and what it returns is bounded by the input: at
//!   most one entry per 12 input bytes (the smallest entry of any layout), no string
//!   longer than [`MAX_STRING_LEN`], and at most eight times the input (plus 1 MiB) of
//!   decoded strings in all, however the entries share or overlap their strings;
//! - what [`parse`] returns can be written back: [`write()`] of its entries parses to the
//!   same entries in [`sort_entries`] order;
//! - entries made from the input likewise survive [`write()`] then [`parse`] unchanged
//!   but for the sort (or [`write()`] refuses them, when a string is longer than
//!   [`parse`] accepts), and the written table is in the loader's order (names descending
//!   by [`libcmp`], then flags descending, glibc-hwcaps entries first) so its binary
//!   search finds every entry;
//! - [`libcmp`] is antisymmetric on the names seen.

use std::cmp::Ordering;

use libnvc::ldcache::{
    libcmp, parse, sort_entries, write, Entry, Format, LdCacheError, MAX_STRING_LEN,
};

/// The largest input read as a cache: [`libnvc::ldcache::parse_file`] accepts 16 MiB, but
/// nothing in the parser depends on size beyond what a few hundred KiB exercise, and
/// smaller inputs keep the fuzzer fast.
pub const MAX_INPUT: usize = 1 << 20;

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let data = &data[..data.len().min(MAX_INPUT)];
    if let Ok(cache) = parse(data) {
        assert_bounded(data, &cache.entries, &cache.hwcaps_subdirs);
        if cache.format != Format::Old {
            assert!(data.len() >= 48, "a new table in {} bytes", data.len());
        }
        round_trip(&cache.entries);
    }
    round_trip(&entries_from(data));
}

fn assert_bounded(data: &[u8], entries: &[Entry], hwcaps: &[String]) {
    assert!(
        entries.len() <= data.len() / 12,
        "{} entries from {} bytes",
        entries.len(),
        data.len()
    );
    let strings = entries
        .iter()
        .flat_map(|e| [&e.name, &e.path])
        .chain(hwcaps);
    let mut total = 0usize;
    for s in strings {
        assert!(s.len() < MAX_STRING_LEN, "a string of {} bytes", s.len());
        assert!(!s.contains('\0'), "a string with a NUL byte: {s:?}");
        total += s.len();
    }
    let max = data.len() * 8 + (1 << 20);
    assert!(
        total <= max,
        "{total} bytes of strings decoded from {} bytes",
        data.len()
    );
}

/// Entries from raw bytes: fields separated by NUL bytes, four to an entry (name, path,
/// flags, hwcap); a flags or hwcap field is read as little-endian bytes (shorter fields
/// padded with zeros), so any value can occur.
pub fn entries_from(data: &[u8]) -> Vec<Entry> {
    let fields: Vec<&[u8]> = data.split(|b| *b == 0).collect();
    fields
        .chunks(4)
        .map(|f| {
            let field = |i: usize| f.get(i).copied().unwrap_or_default();
            let mut flags = [0u8; 4];
            let mut hwcap = [0u8; 8];
            for (d, s) in flags.iter_mut().zip(field(2)) {
                *d = *s;
            }
            for (d, s) in hwcap.iter_mut().zip(field(3)) {
                *d = *s;
            }
            Entry {
                name: String::from_utf8_lossy(field(0)).into_owned(),
                path: String::from_utf8_lossy(field(1)).into_owned(),
                flags: i32::from_le_bytes(flags),
                hwcap: u64::from_le_bytes(hwcap),
            }
        })
        .collect()
}

/// The loader's order of two entries, from the public pieces: names descending by
/// [`libcmp`], flags descending, then glibc-hwcaps entries by index before plain ones.
fn loader_order(a: &Entry, b: &Entry) -> Ordering {
    libcmp(&b.name, &a.name)
        .then_with(|| b.flags.cmp(&a.flags))
        .then_with(|| match (a.hwcaps_index(), b.hwcaps_index()) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

fn round_trip(entries: &[Entry]) {
    let too_long = entries
        .iter()
        .any(|e| e.name.len() >= MAX_STRING_LEN || e.path.len() >= MAX_STRING_LEN);
    let bytes = match write(entries) {
        Ok(bytes) => bytes,
        Err(LdCacheError::StringTooLongToWrite { .. }) if too_long => return,
        Err(e) => panic!("cannot write {} entries: {e}", entries.len()),
    };
    let cache = match parse(&bytes) {
        Ok(cache) => cache,
        Err(e) => panic!("the written cache does not parse: {e}"),
    };
    assert_eq!(cache.format, Format::New);
    let mut sorted = entries.to_vec();
    sort_entries(&mut sorted);
    assert_eq!(
        cache.entries, sorted,
        "entries change through write and parse"
    );
    assert_eq!(cache.generator, None);
    assert!(cache.hwcaps_subdirs.is_empty());
    for pair in cache.entries.windows(2) {
        assert_ne!(
            loader_order(&pair[0], &pair[1]),
            Ordering::Greater,
            "written out of the loader's order: {:?} before {:?}",
            pair[0],
            pair[1]
        );
        let (a, b) = (&pair[0].name, &pair[1].name);
        assert_eq!(
            libcmp(a, b),
            libcmp(b, a).reverse(),
            "libcmp is not antisymmetric on {a:?} and {b:?}"
        );
    }
}
