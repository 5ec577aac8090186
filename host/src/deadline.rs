//! A deadline for the whole process: after so many seconds it writes a message to stderr
//! and exits, whatever it was doing. The hook arms it first thing, so that nothing the
//! container points it at (a file that blocks on read, a stuck mount) holds a container's
//! start forever: the runtime gets a failure with a message instead of a hang.
//!
//! `alarm(2)` and a `SIGALRM` handler rather than a watchdog thread: the hook must stay
//! single-threaded to enter the container's mount namespace. The handler only calls
//! `write(2)` and `_exit(2)`, which are async-signal-safe.

use std::sync::OnceLock;

/// What the handler writes, set once by [`arm`].
static MESSAGE: OnceLock<Box<[u8]>> = OnceLock::new();

/// The exit status after the deadline passed.
pub const EXPIRED_STATUS: i32 = 124;

extern "C" fn on_alarm(_: libc::c_int) {
    if let Some(message) = MESSAGE.get() {
        let mut rest: &[u8] = message;
        while !rest.is_empty() {
            // SAFETY: `rest` is a valid slice for the duration of the call; write(2) is
            // async-signal-safe and reads at most `rest.len()` bytes from it.
            let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                break;
            }
            rest = &rest[n as usize..];
        }
    }
    // SAFETY: _exit(2) is async-signal-safe and ends the process at once, running no
    // handler and touching no lock another frame may hold.
    unsafe { libc::_exit(EXPIRED_STATUS) };
}

/// Ends the process with `message` (a line written to stderr) and status
/// [`EXPIRED_STATUS`] once `seconds` have passed. `seconds` of 0 arms nothing. Arming
/// again only moves the deadline; the first message stays.
pub fn arm(seconds: u32, message: &str) -> std::io::Result<()> {
    if seconds == 0 {
        return Ok(());
    }
    let mut line = message.as_bytes().to_vec();
    if !line.ends_with(b"\n") {
        line.push(b'\n');
    }
    let _ = MESSAGE.set(line.into_boxed_slice());
    // SAFETY: a zeroed sigaction is a valid starting value; the handler is an
    // `extern "C" fn(c_int)` as sa_handler expects (no SA_SIGINFO), and the empty mask is
    // initialised by sigemptyset before the struct is passed to the kernel, which only
    // reads it.
    let ret = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut())
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: alarm(2) takes a number and has no memory effects.
    unsafe { libc::alarm(seconds) };
    Ok(())
}

/// Cancels the deadline (the work is done).
pub fn disarm() {
    // SAFETY: alarm(0) cancels any pending alarm and has no memory effects.
    unsafe { libc::alarm(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_deadline_ends_the_process_with_its_message() {
        // In a forked child, so the test process lives on.
        // SAFETY: the child only arms the deadline and sleeps, then is ended by it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let _ = arm(1, "deadline passed");
            std::thread::sleep(std::time::Duration::from_secs(10));
            // SAFETY: leaves the child if the deadline failed to end it.
            unsafe { libc::_exit(0) };
        }
        let start = std::time::Instant::now();
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), EXPIRED_STATUS);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
