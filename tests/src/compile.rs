//! Builds the fake driver's libraries and programs with gcc, once per process.
//!
//! A tree needs 26 shared objects and 5 programs. Compiling them for every tree would make a
//! tree cost seconds, so each (version, CUDA version, architecture) is built once, in a
//! temporary directory that is removed right away, and kept in memory (about 500 KiB); trees
//! then only write bytes.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use crate::catalog::{binary_source, DriverLibrary, Source, DRIVER_BINARIES, DRIVER_LIBRARIES};
use crate::FakeError;

/// Keeps `NEEDED libc.so.6` in every library, as the real ones have it, even where the
/// toolchain links `--as-needed` by default (Debian, Ubuntu): ldconfig classifies a 32-bit
/// library without it as plain `ELF` instead of `libc6`.
const NO_AS_NEEDED: &str = "-Wl,--no-as-needed";

/// Which ABI to build for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Arch {
    X86_64,
    I386,
    /// Built with Debian's cross compiler, `aarch64-linux-gnu-gcc`.
    Aarch64,
}

impl Arch {
    /// The build for a driver of `arch`'s 64-bit libraries and programs.
    pub(crate) fn of(arch: libnvc::elf::Arch) -> Arch {
        match arch {
            libnvc::elf::Arch::X86_64 => Arch::X86_64,
            libnvc::elf::Arch::Aarch64 => Arch::Aarch64,
        }
    }

    /// The C compiler that builds for it.
    fn compiler(self) -> &'static str {
        match self {
            Arch::X86_64 | Arch::I386 => "gcc",
            Arch::Aarch64 => crate::aarch64::GCC,
        }
    }
}

/// The built files of one (version, CUDA version, architecture).
pub(crate) struct Artifacts {
    /// Each library with the bytes of its `lib….so.<version>`.
    pub(crate) libraries: Vec<(&'static DriverLibrary, Vec<u8>)>,
    /// Each program of [`DRIVER_BINARIES`] with its bytes (none for i386).
    pub(crate) binaries: Vec<(&'static str, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    version: String,
    cuda_version: i32,
    arch: Arch,
}

type Cache = Mutex<HashMap<Key, Arc<Artifacts>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The built files for `version`, building them on first use. Threads asking for the same
/// files while they are built wait for the one build.
pub(crate) fn artifacts(
    version: &str,
    cuda_version: i32,
    arch: Arch,
) -> Result<Arc<Artifacts>, FakeError> {
    let key = Key {
        version: version.to_string(),
        cuda_version,
        arch,
    };
    // A panic elsewhere while holding the lock leaves the map itself intact.
    let mut cache = cache()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(built) = cache.get(&key) {
        return Ok(Arc::clone(built));
    }
    let built = Arc::new(build(&key)?);
    cache.insert(key, Arc::clone(&built));
    Ok(built)
}

/// Whether `gcc -m32` can link a shared object here (it needs gcc-multilib).
pub(crate) fn gcc_m32_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let Ok(dir) = tempfile::tempdir() else {
            return false;
        };
        let src = dir.path().join("probe.c");
        if std::fs::write(&src, "int nvc_probe(void) { return 0; }\n").is_err() {
            return false;
        }
        Command::new("gcc")
            .args(["-m32", "-shared", "-fPIC", "-o"])
            .arg(dir.path().join("probe.so"))
            .arg(&src)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A gcc run in flight.
struct Job {
    command: String,
    child: Child,
}

fn spawn(dir: &Path, arch: Arch, args: Vec<String>) -> Result<Job, FakeError> {
    let compiler = arch.compiler();
    let command = format!("{compiler} {}", args.join(" "));
    let child = Command::new(compiler)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FakeError::Spawn {
            step: "build the fake driver",
            program: compiler.to_string(),
            source,
        })?;
    Ok(Job { command, child })
}

/// Waits for every job, reporting the first failure (after all have ended, so no gcc outlives
/// the temporary directory).
fn wait_all(jobs: Vec<Job>) -> Result<(), FakeError> {
    let mut first_error = None;
    for job in jobs {
        let result = match job.child.wait_with_output() {
            Ok(output) if output.status.success() => Ok(()),
            Ok(output) => Err(FakeError::Command {
                step: "build the fake driver",
                command: job.command,
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            }),
            Err(source) => Err(FakeError::Spawn {
                step: "build the fake driver",
                program: job.command.split(' ').next().unwrap_or("gcc").to_string(),
                source,
            }),
        };
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn build(key: &Key) -> Result<Artifacts, FakeError> {
    let tmp = tempfile::Builder::new()
        .prefix("nvc-fake-driver-build.")
        .tempdir()
        .map_err(FakeError::io(
            "create build directory in",
            std::env::temp_dir(),
        ))?;
    let dir = tmp.path();
    for source in [
        Source::Generic,
        Source::Cuda,
        Source::Nvml,
        Source::Smi,
        Source::Tool,
    ] {
        let path = dir.join(source.file_name());
        std::fs::write(&path, source.text()).map_err(FakeError::io("write", &path))?;
    }

    let mut common = vec!["-O2".to_string(), "-Wall".to_string(), "-g0".to_string()];
    if key.arch == Arch::I386 {
        common.push("-m32".to_string());
    }
    common.push(format!("-DNVC_FAKE_VERSION=\"{}\"", key.version));
    common.push(format!("-DNVC_FAKE_CUDA_VERSION={}", key.cuda_version));
    let args = |extra: &[&str]| -> Vec<String> {
        let mut args = common.clone();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let version = key.version.as_str();
    let libraries: Vec<&'static DriverLibrary> = DRIVER_LIBRARIES
        .iter()
        .filter(|l| key.arch != Arch::I386 || l.lib32)
        .collect();

    // Stage 1: everything that needs the compiler proper, in parallel.
    let mut jobs = vec![spawn(
        dir,
        key.arch,
        args(&["-fPIC", "-c", "fake_lib.c", "-o", "fake_lib.o"]),
    )?];
    for library in libraries.iter().filter(|l| l.source != Source::Generic) {
        let soname = format!("-Wl,-soname,{}", library.soname(version));
        let out = library.file_name(version);
        jobs.push(spawn(
            dir,
            key.arch,
            args(&[
                "-fPIC",
                "-shared",
                NO_AS_NEEDED,
                &soname,
                library.source.file_name(),
                "-o",
                &out,
            ]),
        )?);
    }
    if key.arch != Arch::I386 {
        jobs.push(spawn(
            dir,
            key.arch,
            args(&["nvidia-smi.c", "-o", "nvidia-smi.bin", "-ldl"]),
        )?);
        jobs.push(spawn(
            dir,
            key.arch,
            args(&["fake_tool.c", "-o", "fake_tool.bin"]),
        )?);
    }
    wait_all(jobs)?;

    // Stage 2: link the generic object once per soname.
    let mut jobs = Vec::new();
    for library in libraries.iter().filter(|l| l.source == Source::Generic) {
        let soname = format!("-Wl,-soname,{}", library.soname(version));
        let out = library.file_name(version);
        let mut link = vec![
            "-shared".to_string(),
            NO_AS_NEEDED.to_string(),
            soname,
            "fake_lib.o".to_string(),
        ];
        if key.arch == Arch::I386 {
            link.insert(0, "-m32".to_string());
        }
        link.extend(["-o".to_string(), out]);
        jobs.push(spawn(dir, key.arch, link)?);
    }
    wait_all(jobs)?;

    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(FakeError::io("read built file", &path))
    };
    let mut built = Artifacts {
        libraries: Vec::new(),
        binaries: Vec::new(),
    };
    for library in libraries {
        built
            .libraries
            .push((library, read(&library.file_name(version))?));
    }
    if key.arch != Arch::I386 {
        for name in DRIVER_BINARIES {
            let file = match binary_source(name) {
                Source::Smi => "nvidia-smi.bin",
                _ => "fake_tool.bin",
            };
            built.binaries.push((name, read(file)?));
        }
    }
    Ok(built)
}
