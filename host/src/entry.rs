//! The entry point of nvc's programs on every container's start path (`nvc-runtime`,
//! `nvc-hook`): the C `main`, not std's runtime set-up (`lang_start`), which at every
//! start reads `/proc/self/maps` to find the main thread's stack, installs stack-overflow
//! handlers on an alternate signal stack, names the main thread and ignores SIGPIPE:
//! 35 system calls for an empty program against 16, about 0.1 ms of every exec on the
//! development VM. What the programs give up: a stack overflow is a plain SIGSEGV
//! without std's message, and SIGPIPE keeps the disposition the caller gave (the shim
//! hands runc exactly what its caller set up). Arguments, the environment, panics and
//! threads work as before (glibc gives std its arguments through `.init_array`).

/// Defines the C `main` of a binary crate that declares `#![no_main]`: it runs `$body`,
/// a `fn() -> std::process::ExitCode`-like function returning `bool` (success), flushes
/// stdout and returns 0 or 1.
#[macro_export]
macro_rules! c_main {
    ($body:path) => {
        #[no_mangle]
        pub extern "C" fn main(
            _argc: ::std::ffi::c_int,
            _argv: *const *const ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            $crate::entry::status($body())
        }
    };
}

/// The exit status of a program whose work ended in `success`, once stdout is flushed
/// (std's runtime would flush it at exit; the C runtime does not know Rust's buffer).
pub fn status(success: bool) -> std::ffi::c_int {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    match success {
        true => 0,
        false => 1,
    }
}
