//! The checks of the programs around nvc: the host's ldconfig, the low-level runtime the
//! shim execs, nvc-runtime itself, and the prestart hook.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use nvc_config::Config;

use crate::check::{is_executable, show, Probe, Row};

/// The host's ldconfig: nvc does not need it, it is reported for the tools that do.
pub fn ldconfig(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "ldconfig";
    let found = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .map(PathBuf::from)
        .find(|p| is_executable(p))
        .or_else(|| probe.find_program("ldconfig"));
    let writes = if config.ldcache.update {
        "nvc writes containers' ld.so.cache itself"
    } else {
        "ldcache.update is off: containers' ld.so.cache is left as the image has it"
    };
    match found {
        Some(p) => Row::ok(CHECK, format!("{} ({writes})", show(&p))),
        None => Row::warn(
            CHECK,
            format!("no ldconfig on this host ({writes}; other tools may want it)"),
            "nothing for nvc; install libc-bin (or glibc) for tools that run the host's ldconfig",
        ),
    }
}

/// The low-level runtime nvc-runtime execs, found the way the shim finds it.
pub fn runtime(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "runtime";
    let candidates = &config.runtime.runtimes;
    // As the shim does: a candidate that is nvc-runtime itself is passed over.
    let is_shim = |p: &Path| {
        p.canonicalize()
            .ok()
            .is_some_and(|c| c.file_name().is_some_and(|f| f == "nvc-runtime"))
    };
    let mut skipped = Vec::new();
    let found = candidates
        .iter()
        .filter_map(|c| {
            if c.starts_with('/') {
                Some(PathBuf::from(c)).filter(|p| is_executable(p))
            } else if c.is_empty() || c.contains('/') {
                None
            } else {
                probe.find_program(c)
            }
        })
        .find(|p| {
            let shim = is_shim(p);
            if shim {
                skipped.push(show(p));
            }
            !shim
        });
    match found {
        Some(p) if skipped.is_empty() => Row::ok(CHECK, show(&p)),
        Some(p) => Row::ok(
            CHECK,
            format!(
                "{} ({} passed over: nvc-runtime itself)",
                show(&p),
                skipped.join(", ")
            ),
        ),
        None => Row::fail(
            CHECK,
            format!(
                "none of [{}] is an executable named by absolute path or found on PATH",
                candidates.join(", ")
            ),
            format!(
                "install runc, or name the runtime in [runtime] runtimes in {}",
                show(&probe.config_path)
            ),
        ),
    }
}

/// nvc-runtime, which the engines run: next to nvc, else on PATH.
pub fn nvc_runtime(probe: &Probe) -> Row {
    let found = probe
        .own_dir
        .as_ref()
        .map(|d| d.join("nvc-runtime"))
        .filter(|p| is_executable(p))
        .or_else(|| probe.find_program("nvc-runtime"));
    match found {
        Some(p) => Row::ok("nvc-runtime", show(&p)),
        None => Row::warn(
            "nvc-runtime",
            "not next to nvc nor on PATH: engines cannot start GPU containers through it",
            "install it: `install -m 0755 target/release/nvc-runtime /usr/bin/`",
        ),
    }
}

/// The prestart hook nvc-runtime puts into GPU containers.
pub fn hook(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "hook";
    let path = &config.hook.path;
    let fix = format!(
        "install nvc-hook at {}, or set [hook] path in {}",
        show(path),
        show(&probe.config_path)
    );
    if !path.is_absolute() {
        return Row::fail(
            CHECK,
            format!(
                "[hook] path {} is not absolute: runc runs hooks by absolute path",
                show(path)
            ),
            fix,
        );
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Row::fail(CHECK, format!("{} does not exist", show(path)), fix)
        }
        Err(e) => Row::fail(CHECK, format!("cannot stat {}: {e}", show(path)), fix),
        Ok(_) if !is_executable(path) => Row::fail(
            CHECK,
            format!("{} is not an executable file", show(path)),
            fix,
        ),
        Ok(_) => Row::ok(CHECK, show(path)),
    }
}
