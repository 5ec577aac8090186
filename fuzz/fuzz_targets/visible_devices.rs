#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvc_fuzz_props::visible_devices::check(data));
