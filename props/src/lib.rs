//! The properties nvc's fuzz targets check. Each target is one function of the raw fuzz
//! input that returns normally when every property holds and panics, naming the
//! property, when one does not. The cargo-fuzz crate (`fuzz/`) calls them from
//! libFuzzer; `tests/corpus.rs` replays the committed corpora through them, so the
//! ordinary test run checks every input the fuzzers have kept.
//!
//! The functions are pure: no file, environment or clock is read, so a crash replays
//! the same way anywhere.

// A property that does not hold panics, naming it: that is how libFuzzer and the corpus
// replay learn of it.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod capabilities;
pub mod ldcache;
pub mod require;
pub mod runc_args;
pub mod spec_edit;
pub mod visible_devices;

/// A fuzz target: its name (the folder of its corpus under `fuzz/corpus/`) and its
/// property function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("visible_devices", visible_devices::check),
    ("capabilities", capabilities::check),
    ("require", require::check),
    ("ldcache", ldcache::check),
    ("runc_args", runc_args::check),
    ("spec_edit", spec_edit::check),
];

/// The fuzz input as text: environment values and constraint strings are text, and a
/// few bytes that are not UTF-8 should not stop the rest from being exercised.
pub(crate) fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}
