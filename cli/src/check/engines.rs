//! Container engines: whether each is installed (on PATH) and whether nvc is set up in
//! it. An engine that is not installed is an information row; one that is installed but
//! not set up is a warning (GPU containers still start through the others, or runc); one
//! whose setup names an nvc-runtime that is not there is a failure (every container that
//! asks for that runtime fails).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cdi::SpecFile;
use super::{is_executable, show, Probe, Row};

/// The runtime name nv-docker asks Docker for.
pub const DOCKER_RUNTIME_NAME: &str = "nv";

/// One row per engine: Docker, containerd, CRI-O, Podman.
pub fn check(probe: &Probe, cdi_specs: &[SpecFile]) -> Vec<Row> {
    vec![
        docker(probe),
        containerd(probe),
        crio(probe),
        podman(probe, cdi_specs),
    ]
}

/// The command that sets nvc up in `engine`.
fn configure_command(engine: &str) -> String {
    format!("`nvc runtime configure --runtime={engine}`")
}

/// The first of `names` on the search path.
fn installed(probe: &Probe, names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|n| probe.find_program(n))
}

/// What is wrong with an engine's nvc setup.
enum Problem {
    /// Its configuration cannot be read.
    Unreadable(String),
    /// It names an nvc-runtime that is not there: what is wrong, and the fix.
    Broken(String, String),
}

/// The row of an engine from what was found: where it is installed, and how nvc is set
/// up in it (`Ok(None)`: not set up).
fn engine_row(
    check: &str,
    binary: Option<PathBuf>,
    names: &[&str],
    setup: Result<Option<String>, Problem>,
    not_setup: String,
    fix: String,
) -> Row {
    let setup = match setup {
        Err(Problem::Broken(why, fix)) => return Row::fail(check, why, fix),
        Err(Problem::Unreadable(why)) => Err(why),
        Ok(how) => Ok(how),
    };
    match (binary, setup) {
        (None, Ok(Some(how))) => Row::info(check, format!("not installed; {how}")),
        (None, _) => Row::info(
            check,
            format!("not installed (no {} on PATH)", names.join(" or ")),
        ),
        (Some(bin), Ok(Some(how))) => Row::ok(check, format!("{}; {how}", show(&bin))),
        (Some(bin), Ok(None)) => Row::warn(check, format!("{}, but {not_setup}", show(&bin)), fix),
        (Some(bin), Err(why)) => Row::warn(
            check,
            format!("{}, but {why}", show(&bin)),
            format!(
                "fix the file, or rewrite it with {}",
                configure_command(check)
            ),
        ),
    }
}

/// Reads a file that need not exist: `Ok(None)` when it does not.
fn read_optional(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", show(path))),
    }
}

/// Docker: a runtime in daemon.json whose path is nvc-runtime.
pub fn docker(probe: &Probe) -> Row {
    const NAMES: &[&str] = &["docker", "dockerd"];
    let file = &probe.docker_config;
    let setup = docker_setup(file);
    engine_row(
        "docker",
        installed(probe, NAMES),
        NAMES,
        setup,
        format!("{} has no runtime running nvc-runtime", show(file)),
        format!("{}, then restart dockerd", configure_command("docker")),
    )
}

/// How daemon.json sets nvc up: the runtimes whose path is nvc-runtime.
fn docker_setup(file: &Path) -> Result<Option<String>, Problem> {
    let Some(text) = read_optional(file).map_err(Problem::Unreadable)? else {
        return Ok(None);
    };
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| Problem::Unreadable(format!("{} is not valid JSON: {e}", show(file))))?;
    let default_runtime = json.get("default-runtime").and_then(Value::as_str);
    let mut found = Vec::new();
    if let Some(runtimes) = json.get("runtimes").and_then(Value::as_object) {
        for (name, runtime) in runtimes {
            let Some(path) = runtime.get("path").and_then(Value::as_str) else {
                continue;
            };
            if Path::new(path)
                .file_name()
                .is_some_and(|f| f == "nvc-runtime")
            {
                found.push((name.clone(), PathBuf::from(path)));
            }
        }
    }
    let Some((name, path)) = found
        .iter()
        .find(|(n, _)| n == DOCKER_RUNTIME_NAME)
        .or(found.first())
    else {
        return Ok(None);
    };
    // Docker looks a bare name up on its own PATH; only an absolute path can be checked.
    if path.is_absolute() && !is_executable(path) {
        return Err(Problem::Broken(
            format!(
                "{} names runtime {name:?} {}, which is not an executable file: \
                 containers asking for it do not start",
                show(file),
                show(path)
            ),
            format!(
                "install nvc-runtime at {}, or point the runtime at it with {}, then restart \
                 dockerd",
                show(path),
                configure_command("docker")
            ),
        ));
    }
    let mut how = format!("runtime {name:?} is {} in {}", show(path), show(file));
    if default_runtime == Some(name.as_str()) {
        how.push_str(" (the default runtime)");
    }
    if name != DOCKER_RUNTIME_NAME {
        how.push_str(&format!(
            " (nv-docker asks for {DOCKER_RUNTIME_NAME:?}: set NV_RUNTIME={name})"
        ));
    }
    Ok(Some(how))
}

/// containerd: its config.toml, or a file it imports, names nvc-runtime.
pub fn containerd(probe: &Probe) -> Row {
    const NAMES: &[&str] = &["containerd"];
    let file = &probe.containerd_config;
    engine_row(
        "containerd",
        installed(probe, NAMES),
        NAMES,
        containerd_setup(file).map_err(Problem::Unreadable),
        format!("neither {} nor its imports name nvc-runtime", show(file)),
        format!(
            "{}, then restart containerd",
            configure_command("containerd")
        ),
    )
}

fn containerd_setup(file: &Path) -> Result<Option<String>, String> {
    let Some(text) = read_optional(file)? else {
        return Ok(None);
    };
    if text.contains("nvc-runtime") {
        return Ok(Some(format!("nvc-runtime in {}", show(file))));
    }
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        format!("{} is not valid TOML: {}", show(file), e.message())
    })?;
    let imports: Vec<&str> = table
        .get("imports")
        .and_then(toml::Value::as_array)
        .map(|a| a.iter().filter_map(toml::Value::as_str).collect())
        .unwrap_or_default();
    let base = file.parent().unwrap_or(Path::new("/"));
    for pattern in imports {
        for import in expand_glob(&base.join(pattern)) {
            if let Ok(Some(text)) = read_optional(&import) {
                if text.contains("nvc-runtime") {
                    return Ok(Some(format!(
                        "nvc-runtime in {} (imported by {})",
                        show(&import),
                        show(file)
                    )));
                }
            }
        }
    }
    Ok(None)
}

/// The files a containerd import pattern names: the path itself, or, when its last
/// component has `*` or `?`, the matching files of its folder, sorted.
fn expand_glob(pattern: &Path) -> Vec<PathBuf> {
    let Some(name) = pattern.file_name().and_then(|n| n.to_str()) else {
        return vec![pattern.to_path_buf()];
    };
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|f| wildcard_match(name, f))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Shell-style matching of `*` and `?` (no classes), as containerd's imports use it.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    nvc_engines::containerd::glob_component(pattern, name)
}

/// CRI-O: crio.conf or a drop-in names nvc-runtime.
pub fn crio(probe: &Probe) -> Row {
    const NAMES: &[&str] = &["crio"];
    let shown: Vec<String> = probe.crio_configs.iter().map(|p| show(p)).collect();
    engine_row(
        "cri-o",
        installed(probe, NAMES),
        NAMES,
        crio_setup(&probe.crio_configs).map_err(Problem::Unreadable),
        format!(
            "no CRI-O configuration names nvc-runtime ({})",
            shown.join(", ")
        ),
        format!("{}, then restart crio", configure_command("crio")),
    )
}

fn crio_setup(paths: &[PathBuf]) -> Result<Option<String>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            files.extend(sorted_files(path, None));
        } else {
            files.push(path.clone());
            // A given file's drop-in folder, as CRI-O reads it.
            let mut dropins = path.clone().into_os_string();
            dropins.push(".d");
            let dropins = PathBuf::from(dropins);
            if paths.len() == 1 && dropins.is_dir() {
                files.extend(sorted_files(&dropins, None));
            }
        }
    }
    for file in files {
        if read_optional(&file)?.is_some_and(|t| t.contains("nvc-runtime")) {
            return Ok(Some(format!("nvc-runtime in {}", show(&file))));
        }
    }
    Ok(None)
}

/// The regular files of `dir`, sorted; only those ending in `ext` when given.
pub fn sorted_files(dir: &Path, ext: Option<&[&str]>) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| match ext {
            None => true,
            Some(exts) => p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e)),
        })
        .collect();
    out.sort();
    out
}

/// Podman: an OCI hooks.d file that runs nvc-hook, or a CDI spec for nvidia.com/gpu.
pub fn podman(probe: &Probe, cdi_specs: &[SpecFile]) -> Row {
    const NAMES: &[&str] = &["podman"];
    let dirs: Vec<String> = probe.hooks_dirs.iter().map(|p| show(p)).collect();
    let cdi_dirs: Vec<String> = probe.cdi_dirs.iter().map(|p| show(p)).collect();
    engine_row(
        "podman",
        installed(probe, NAMES),
        NAMES,
        Ok(podman_setup(&probe.hooks_dirs, cdi_specs)),
        format!(
            "no hook in {} runs nvc-hook and no nvidia.com/gpu CDI spec is in {}",
            dirs.join(", "),
            cdi_dirs.join(", ")
        ),
        format!(
            "{} (an OCI hook), or a CDI spec: `nvc cdi generate --output /etc/cdi/nvidia.json`",
            configure_command("podman")
        ),
    )
}

fn podman_setup(hooks_dirs: &[PathBuf], cdi_specs: &[SpecFile]) -> Option<String> {
    for dir in hooks_dirs {
        for file in sorted_files(dir, Some(&["json"])) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let runs_hook = match serde_json::from_str::<Value>(&text) {
                Ok(json) => json
                    .pointer("/hook/path")
                    .and_then(Value::as_str)
                    .is_some_and(|p| Path::new(p).file_name().is_some_and(|f| f == "nvc-hook")),
                Err(_) => text.contains("nvc-hook"),
            };
            if runs_hook {
                return Some(format!("OCI hook {} runs nvc-hook", show(&file)));
            }
        }
    }
    cdi_specs.iter().find(|s| s.usable()).map(|s| {
        format!(
            "CDI spec {} (podman run --device nvidia.com/gpu=all)",
            show(&s.path)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        let cases = [
            ("*.toml", "nvc.toml", true),
            ("*.toml", "nvc.toml.bak", false),
            ("*", "", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*nvc*", "10-nvc-runtime.toml", true),
            ("conf*.d", "conf.d", true),
            ("x", "y", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(wildcard_match(p, n), want, "{p} {n}");
        }
    }
}
