//! A fake WSL2 driver ([`FakeDriverSpec::wsl`]): what a WSL2 guest has of the NVIDIA driver
//! instead of a kernel module. `/dev/dxg` (the `dxgkrnl` misc device), the user-space driver
//! in `/usr/lib/wsl/lib` (listed in `/etc/ld.so.conf.d/ld.wsl.conf`) and the driver store
//! folder `/usr/lib/wsl/drivers/nvmdi.inf_amd64_<hash>/`; a `/proc` with no
//! `driver/nvidia`.
//!
//! libcuda and NVML are the fake driver's (gcc-built, so a container's program can load
//! them and ask them); the other libraries are tiny ELF shared objects with their sonames,
//! which the loader and ldconfig read but nothing calls.

use libnvc::elf::ElfClass;

use crate::compile::{self, Arch};
use crate::devices::FakeDeviceNode;
use crate::tree::{inside, mkdirs, write_file};
use crate::trees::tiny_shared_object;
use crate::{FakeDriver, FakeDriverSpec, FakeError};

/// `/usr/lib/wsl/lib`.
pub const WSL_LIB_DIR: &str = "/usr/lib/wsl/lib";
/// The driver store folder of the fake driver: a Windows driver package's name and hash.
pub const WSL_DRIVER_STORE: &str = "/usr/lib/wsl/drivers/nvmdi.inf_amd64_5a1c0e9f3b7d2468";
/// Major of `/dev/dxg`: a misc device.
pub const DXG_MAJOR: u32 = 10;
/// Minor of `/dev/dxg`: dynamic (the kernel hands misc devices minors from 127 down);
/// the value the fake tree uses.
pub const DXG_MINOR: u32 = 125;

/// Which library: libcuda, NVML, or a tiny object with its soname.
#[derive(Clone, Copy)]
enum Bytes {
    Cuda,
    Nvml,
    Tiny,
}

/// The files of `/usr/lib/wsl/lib`: name, soname, bytes. Several names of one library
/// are plain copies there, as on WSL.
const LIB_FILES: &[(&str, &str, Bytes)] = &[
    ("libcuda.so", "libcuda.so.1", Bytes::Cuda),
    ("libcuda.so.1", "libcuda.so.1", Bytes::Cuda),
    ("libcuda.so.1.1", "libcuda.so.1", Bytes::Cuda),
    ("libd3d12.so", "libd3d12.so", Bytes::Tiny),
    ("libd3d12core.so", "libd3d12core.so", Bytes::Tiny),
    ("libdxcore.so", "libdxcore.so", Bytes::Tiny),
    ("libnvcuvid.so.1", "libnvcuvid.so.1", Bytes::Tiny),
    (
        "libnvidia-encode.so.1",
        "libnvidia-encode.so.1",
        Bytes::Tiny,
    ),
    ("libnvidia-ml.so.1", "libnvidia-ml.so.1", Bytes::Nvml),
    ("libnvoptix.so.1", "libnvoptix.so.1", Bytes::Tiny),
];

/// The driver store's files that are shared objects.
const STORE_FILES: &[(&str, &str, Bytes)] = &[
    ("libcuda.so.1.1", "libcuda.so.1", Bytes::Cuda),
    ("libcuda_loader.so", "libcuda_loader.so", Bytes::Tiny),
    ("libnvdxgdmal.so.1", "libnvdxgdmal.so.1", Bytes::Tiny),
    ("libnvidia-gpucomp.so", "libnvidia-gpucomp.so", Bytes::Tiny),
    ("libnvidia-ml.so.1", "libnvidia-ml.so.1", Bytes::Nvml),
    (
        "libnvidia-ml_loader.so",
        "libnvidia-ml_loader.so",
        Bytes::Tiny,
    ),
    ("libnvidia-nvvm.so.4", "libnvidia-nvvm.so.4", Bytes::Tiny),
    (
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        Bytes::Tiny,
    ),
];

/// `/proc/devices` of a WSL2 guest, short: no nvidia major.
const PROC_DEVICES: &str = "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n  \
                            5 /dev/console\n  5 /dev/ptmx\n 10 misc\n 13 input\n 29 fb\n\n\
                            Block devices:\n  7 loop\n  8 sd\n";

impl FakeDriverSpec {
    /// `/dev/dxg`, the one node of a WSL driver.
    pub(crate) fn wsl_nodes() -> Vec<FakeDeviceNode> {
        vec![FakeDeviceNode {
            path: "dev/dxg".into(),
            major: DXG_MAJOR,
            minor: DXG_MINOR,
            mode: 0o666,
        }]
    }
}

/// Writes the WSL driver of `driver` (its folders made): the two folders, the loader's
/// configuration, `/proc/devices`.
pub(crate) fn write(driver: &FakeDriver) -> Result<(), FakeError> {
    let spec = &driver.spec;
    let built = compile::artifacts(&spec.version, spec.cuda_version, Arch::X86_64)?;
    let find = |name: &str| {
        built
            .libraries
            .iter()
            .find(|(l, _)| l.name == name)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| FakeError::InvalidSpec {
                reason: format!("the fake driver builds no {name}"),
            })
    };
    let cuda = find("libcuda")?;
    let nvml = find("libnvidia-ml")?;
    let smi = built
        .binaries
        .iter()
        .find(|(n, _)| *n == "nvidia-smi")
        .map(|(_, b)| b.clone())
        .ok_or_else(|| FakeError::InvalidSpec {
            reason: "the fake driver builds no nvidia-smi".to_string(),
        })?;
    let note = format!("nvc fake WSL driver {}", spec.version);
    let bytes = |kind: Bytes, soname: &str| match kind {
        Bytes::Cuda => cuda.clone(),
        Bytes::Nvml => nvml.clone(),
        Bytes::Tiny => tiny_shared_object(ElfClass::Elf64, soname, &note),
    };
    let root = &driver.root;
    for (dir, files) in [(WSL_LIB_DIR, LIB_FILES), (WSL_DRIVER_STORE, STORE_FILES)] {
        let dir = inside(root, dir);
        mkdirs(&dir)?;
        for (name, soname, kind) in files {
            write_file(&dir.join(name), bytes(*kind, soname), 0o755)?;
        }
        write_file(&dir.join("nvidia-smi"), &smi, 0o755)?;
    }
    let store = inside(root, WSL_DRIVER_STORE);
    write_file(
        &store.join("nvcubins.bin"),
        format!("NVC FAKE CUBINS {}\n", spec.version),
        0o644,
    )?;
    // A Windows file of the package, which no container gets.
    write_file(&store.join("nvapi64.dll"), "MZ nvc fake\n", 0o644)?;
    let etc = root.join("etc");
    write_file(
        &etc.join("ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n\n",
        0o644,
    )?;
    write_file(
        &etc.join("ld.so.conf.d/ld.wsl.conf"),
        "# This file was automatically generated by WSL. To stop automatic generation of this file, add the following entry to /etc/wsl.conf:\n\
         # [automount]\n# ldconfig = false\n/usr/lib/wsl/lib\n",
        0o644,
    )?;
    write_file(&driver.proc_root.join("devices"), PROC_DEVICES, 0o444)
}
