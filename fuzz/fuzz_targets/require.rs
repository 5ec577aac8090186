#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvc_fuzz_props::require::check(data));
