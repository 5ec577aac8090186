//! The files of a driver installation, as listed in the H100 580.159.04 sample
//! (`driver-tree.txt`, `lib-links.txt`).

/// The C source a library or program is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// `fixtures/fake_lib.c`: carries the version and nothing else.
    Generic,
    /// `fixtures/libcuda.c`.
    Cuda,
    /// `fixtures/libnvidia-ml.c`.
    Nvml,
    /// `fixtures/nvidia-smi.c`.
    Smi,
    /// `fixtures/fake_tool.c`: prints its name and version.
    Tool,
}

impl Source {
    pub(crate) fn file_name(self) -> &'static str {
        match self {
            Source::Generic => "fake_lib.c",
            Source::Cuda => "libcuda.c",
            Source::Nvml => "libnvidia-ml.c",
            Source::Smi => "nvidia-smi.c",
            Source::Tool => "fake_tool.c",
        }
    }

    pub(crate) fn text(self) -> &'static str {
        match self {
            Source::Generic => include_str!("../fixtures/fake_lib.c"),
            Source::Cuda => include_str!("../fixtures/libcuda.c"),
            Source::Nvml => include_str!("../fixtures/libnvidia-ml.c"),
            Source::Smi => include_str!("../fixtures/nvidia-smi.c"),
            Source::Tool => include_str!("../fixtures/fake_tool.c"),
        }
    }
}

/// One user-space driver library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverLibrary {
    /// Name without suffix, e.g. `libcuda`.
    pub name: &'static str,
    /// Soname suffix, e.g. `1` for `libcuda.so.1`; `None` where the real library's soname is
    /// its full file name (`libnvidia-tls.so.<version>`).
    pub soname_suffix: Option<&'static str>,
    /// Whether the driver also ships a 32-bit build.
    pub lib32: bool,
    pub(crate) source: Source,
}

impl DriverLibrary {
    /// The real file: `libcuda.so.<version>`.
    pub fn file_name(&self, version: &str) -> String {
        format!("{}.so.{version}", self.name)
    }

    /// The soname: `libcuda.so.1`, or the file name for libraries without a short soname.
    pub fn soname(&self, version: &str) -> String {
        match self.soname_suffix {
            Some(suffix) => format!("{}.so.{suffix}", self.name),
            None => self.file_name(version),
        }
    }

    /// The development link: `libcuda.so`.
    pub fn dev_link(&self) -> String {
        format!("{}.so", self.name)
    }
}

const fn lib(
    name: &'static str,
    soname_suffix: Option<&'static str>,
    lib32: bool,
) -> DriverLibrary {
    DriverLibrary {
        name,
        soname_suffix,
        lib32,
        source: Source::Generic,
    }
}

/// Every library of the sample's `lib64`, with the soname its links show.
pub const DRIVER_LIBRARIES: &[DriverLibrary] = &[
    DriverLibrary {
        source: Source::Cuda,
        ..lib("libcuda", Some("1"), true)
    },
    DriverLibrary {
        source: Source::Nvml,
        ..lib("libnvidia-ml", Some("1"), true)
    },
    lib("libnvidia-cfg", Some("1"), false),
    lib("libnvidia-ptxjitcompiler", Some("1"), true),
    lib("libnvidia-nvvm", Some("4"), false),
    lib("libnvidia-opencl", Some("1"), true),
    lib("libnvidia-gpucomp", None, true),
    lib("libnvidia-allocator", Some("1"), true),
    lib("libnvidia-pkcs11-openssl3", None, false),
    lib("libcudadebugger", Some("1"), false),
    lib("libnvcuvid", Some("1"), true),
    lib("libnvidia-encode", Some("1"), true),
    lib("libnvidia-opticalflow", Some("1"), true),
    lib("libvdpau_nvidia", Some("1"), true),
    lib("libnvidia-eglcore", None, true),
    lib("libnvidia-glcore", None, true),
    lib("libnvidia-glsi", None, true),
    lib("libnvidia-tls", None, true),
    lib("libnvidia-fbc", Some("1"), true),
    lib("libnvidia-rtcore", None, false),
    lib("libnvoptix", Some("1"), false),
    lib("libGLX_nvidia", Some("0"), true),
    lib("libEGL_nvidia", Some("0"), true),
    lib("libGLESv2_nvidia", Some("2"), true),
    lib("libGLESv1_CM_nvidia", Some("1"), true),
    lib("libnvidia-glvkspirv", None, true),
];

/// The driver's programs, in `usr/local/nvidia/bin`.
pub const DRIVER_BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

pub(crate) fn binary_source(name: &str) -> Source {
    if name == "nvidia-smi" {
        Source::Smi
    } else {
        Source::Tool
    }
}
