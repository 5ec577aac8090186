//! NVIDIA's Container Toolkit, timed beside nvc (`--nvidia-toolkit DIR`): its programs in
//! DIR, its version, and its configuration for one of its modes.
//!
//! The configuration is the Toolkit's defaults (`nvidia-ctk config default`) but for what
//! a second install beside the host's needs: its programs by absolute path, the bench's
//! runc, the mode, the driver root, and `LD_LIBRARY_PATH` for `nvidia-container-cli` alone
//! (its libraries are in DIR/lib), so that runc under the Toolkit loads what it loads under
//! nvc. It reaches the runtime through `NVIDIA_CTK_CONFIG_FILE_PATH`, and the legacy hook
//! too: runc gives a hook with no `env` of its own runc's environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::BenchError;

/// The variable through which the Toolkit's programs find their configuration.
pub const CONFIG_ENV: &str = "NVIDIA_CTK_CONFIG_FILE_PATH";

/// A mode of `nvidia-container-runtime` that is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The runtime adds `nvidia-container-runtime-hook` as a prestart hook, which runs
    /// `nvidia-container-cli configure` (libnvidia-container).
    Legacy,
    /// The runtime generates a CDI spec for the request as it edits the container's spec
    /// (through NVML), with `nvidia-cdi-hook` hooks.
    JitCdi,
}

impl Mode {
    /// Both, in table order.
    pub const ALL: [Mode; 2] = [Mode::Legacy, Mode::JitCdi];

    /// The name in the Toolkit's configuration (`mode = "..."`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::JitCdi => "jit-cdi",
        }
    }
}

/// The Toolkit's programs, from the folder given with `--nvidia-toolkit`.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// The folder: `bin/` and `lib/`.
    pub dir: PathBuf,
    /// `nvidia-container-runtime`: the runtime engines are configured with.
    pub runtime: PathBuf,
    /// `nvidia-container-runtime-hook`: the legacy mode's prestart hook.
    pub hook: PathBuf,
    /// `nvidia-container-cli` (libnvidia-container): what the legacy hook runs.
    pub cli: PathBuf,
    /// `nvidia-ctk`: `cdi generate`.
    pub ctk: PathBuf,
    /// `nvidia-cdi-hook`: the hooks of the Toolkit's CDI specs.
    pub cdi_hook: PathBuf,
    /// `lib/`: libnvidia-container and the libraries it loads that a host may lack.
    pub lib: PathBuf,
}

/// What a configuration depends on besides the Toolkit and the mode.
#[derive(Debug, Clone)]
pub struct Setting<'a> {
    /// The driver root (`[nvidia-container-cli] root`).
    pub driver_root: &'a Path,
    /// The runc the runtime execs.
    pub runc: &'a Path,
    /// The host's ldconfig (`@` added: run on the host, not from the container).
    pub ldconfig: &'a Path,
}

impl Toolkit {
    /// The Toolkit in `dir`, every program there; an error names the first one missing.
    pub fn find(dir: &Path) -> Result<Toolkit, BenchError> {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let file = |rel: &'static str| {
            let path = dir.join(rel);
            match path.exists() {
                true => Ok(path),
                false => Err(BenchError::Missing {
                    what: rel,
                    path,
                    hint: ": --nvidia-toolkit names the folder with the Toolkit's bin/ and lib/",
                }),
            }
        };
        Ok(Toolkit {
            runtime: file("bin/nvidia-container-runtime")?,
            hook: file("bin/nvidia-container-runtime-hook")?,
            cli: file("bin/nvidia-container-cli")?,
            ctk: file("bin/nvidia-ctk")?,
            cdi_hook: file("bin/nvidia-cdi-hook")?,
            lib: file("lib/libnvidia-container.so.1")?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            dir,
        })
    }

    /// `1.20.0`: the release of its runtime; `?` when it did not say.
    pub fn release(&self) -> String {
        last_word(&first_line(Command::new(&self.runtime).arg("--version"))).to_string()
    }

    /// `1.20.0 (commit d34b304), libnvidia-container 1.17.0`, from the programs; `?` for
    /// what they did not say.
    pub fn version(&self) -> String {
        let runtime = first_line(Command::new(&self.runtime).arg("--version"));
        let cli = first_line(
            Command::new(&self.cli)
                .arg("--version")
                .env("LD_LIBRARY_PATH", &self.lib),
        );
        let commit = output(Command::new(&self.runtime).arg("--version"))
            .lines()
            .find_map(|l| {
                l.strip_prefix("commit: ")
                    .map(|c| c.chars().take(7).collect())
            })
            .unwrap_or_else(String::new);
        format!(
            "{}{}, libnvidia-container {}",
            last_word(&runtime),
            match commit.is_empty() {
                true => String::new(),
                false => format!(" (commit {commit})"),
            },
            last_word(&cli)
        )
    }

    /// The configuration of `mode` (TOML).
    pub fn config(&self, mode: Mode, setting: &Setting) -> String {
        let q = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
        let s = |t: String| toml::Value::String(t).to_string();
        let mut text = format!(
            "# Written by nvc-bench: the Toolkit's defaults, its programs in {dir}.\n\n\
             [nvidia-container-cli]\n\
             environment = [{env}]\n\
             ldconfig = {ldconfig}\n\
             load-kmods = true\n\
             path = {cli}\n\
             root = {root}\n\n\
             [nvidia-container-runtime]\n\
             log-level = \"info\"\n\
             mode = {mode}\n\
             runtimes = [{runc}]\n\n\
             [nvidia-container-runtime-hook]\n\
             path = {hook}\n\
             skip-mode-detection = false\n\n\
             [nvidia-ctk]\n\
             path = {ctk}\n",
            dir = self.dir.display(),
            env = s(format!("LD_LIBRARY_PATH={}", self.lib.display())),
            ldconfig = s(format!("@{}", setting.ldconfig.display())),
            cli = q(&self.cli),
            root = q(setting.driver_root),
            mode = s(mode.name().to_string()),
            runc = q(setting.runc),
            hook = q(&self.hook),
            ctk = q(&self.ctk),
        );
        if mode == Mode::Legacy {
            // The Toolkit 1.20 hook passes `--cuda-compat-mode=...` for each value of
            // `cuda-compat-mode`, an option libnvidia-container 1.17 does not have; with
            // none set and compat libraries from the container allowed it passes none,
            // and nvidia-container-cli 1.17 does what it always did.
            text.push_str(
                "\n[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"\"\n\n\
                 [features]\nallow-cuda-compat-libs-from-container = true\n",
            );
        }
        text
    }

    /// Writes the configuration of `mode` to `<work>/toolkit-<mode>.toml`.
    pub fn write_config(
        &self,
        work: &Path,
        mode: Mode,
        setting: &Setting,
    ) -> Result<PathBuf, BenchError> {
        let path = work.join(format!("toolkit-{}.toml", mode.name()));
        std::fs::write(&path, self.config(mode, setting))
            .map_err(BenchError::io("write", &path))?;
        Ok(path)
    }
}

/// The host's ldconfig as the Toolkit's packages configure it: `ldconfig.real` where the
/// distribution wraps ldconfig in a script (Ubuntu), else `ldconfig`.
pub fn host_ldconfig() -> PathBuf {
    ["/sbin/ldconfig.real", "/sbin/ldconfig"]
        .map(PathBuf::from)
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/sbin/ldconfig"))
}

/// Why the Toolkit's GPU rows cannot run on a fake driver tree.
pub const NO_FAKE_GPU: &str = "its runtime in the jit-cdi mode and nvidia-container-cli in \
     the legacy mode load the driver's NVML, which a fake tree's libraries do not implement";

fn output(command: &mut Command) -> String {
    command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn first_line(command: &mut Command) -> String {
    output(command).lines().next().unwrap_or("?").to_string()
}

fn last_word(line: &str) -> &str {
    line.split_whitespace().last().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolkit() -> Toolkit {
        let bin = |name: &str| PathBuf::from("/nct/bin").join(name);
        Toolkit {
            dir: PathBuf::from("/nct"),
            runtime: bin("nvidia-container-runtime"),
            hook: bin("nvidia-container-runtime-hook"),
            cli: bin("nvidia-container-cli"),
            ctk: bin("nvidia-ctk"),
            cdi_hook: bin("nvidia-cdi-hook"),
            lib: PathBuf::from("/nct/lib"),
        }
    }

    #[test]
    fn configurations_name_this_toolkit_and_runc() {
        let setting = Setting {
            driver_root: Path::new("/"),
            runc: Path::new("/usr/local/sbin/runc"),
            ldconfig: Path::new("/sbin/ldconfig.real"),
        };
        let legacy: toml::Table = toolkit()
            .config(Mode::Legacy, &setting)
            .parse()
            .expect("valid TOML");
        let cli = &legacy["nvidia-container-cli"];
        assert_eq!(cli["path"].as_str(), Some("/nct/bin/nvidia-container-cli"));
        assert_eq!(
            cli["environment"][0].as_str(),
            Some("LD_LIBRARY_PATH=/nct/lib")
        );
        assert_eq!(cli["ldconfig"].as_str(), Some("@/sbin/ldconfig.real"));
        assert_eq!(cli["root"].as_str(), Some("/"));
        let runtime = &legacy["nvidia-container-runtime"];
        assert_eq!(runtime["mode"].as_str(), Some("legacy"));
        assert_eq!(
            runtime["runtimes"][0].as_str(),
            Some("/usr/local/sbin/runc")
        );
        assert_eq!(
            runtime["modes"]["legacy"]["cuda-compat-mode"].as_str(),
            Some("")
        );
        assert_eq!(
            legacy["nvidia-container-runtime-hook"]["path"].as_str(),
            Some("/nct/bin/nvidia-container-runtime-hook")
        );
        assert_eq!(
            legacy["nvidia-ctk"]["path"].as_str(),
            Some("/nct/bin/nvidia-ctk")
        );
        let jit: toml::Table = toolkit()
            .config(Mode::JitCdi, &setting)
            .parse()
            .expect("valid TOML");
        assert_eq!(
            jit["nvidia-container-runtime"]["mode"].as_str(),
            Some("jit-cdi")
        );
        // The compat workaround is the legacy hook's alone.
        assert!(jit.get("features").is_none());
    }

    #[test]
    fn a_missing_program_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = Toolkit::find(dir.path()).expect_err("empty folder");
        assert!(err.to_string().contains("bin/nvidia-"), "{err}");
    }
}
