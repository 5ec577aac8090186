//! What belongs to which capability: the driver's libraries, binaries, json
//! configuration files and IPC endpoints, and where discovery looks for them.

use crate::caps::Capability;

/// Driver libraries by capability, named by their stem (the file name up to `.so`).
/// Taken from libnvidia-container's lists, current as of driver 580.
pub const LIBRARIES: &[(Capability, &[&str])] = &[
    (
        Capability::Utility,
        &[
            "libnvidia-ml",
            "libnvidia-cfg",
            "libnvidia-nscq",
            "libnvsdm",
        ],
    ),
    (
        Capability::Compute,
        &[
            "libcuda",
            "libcudadebugger",
            "libnvidia-opencl",
            "libnvidia-gpucomp",
            "libnvidia-ptxjitcompiler",
            "libnvidia-fatbinaryloader",
            "libnvidia-allocator",
            "libnvidia-compiler",
            "libnvidia-pkcs11",
            "libnvidia-pkcs11-openssl3",
            "libnvidia-nvvm",
            "libnvidia-sandboxutils",
        ],
    ),
    (
        Capability::Video,
        &[
            "libvdpau_nvidia",
            "libnvidia-encode",
            "libnvidia-opticalflow",
            "libnvcuvid",
        ],
    ),
    (
        Capability::Graphics,
        &[
            "libnvidia-eglcore",
            "libnvidia-glcore",
            "libnvidia-tls",
            "libnvidia-glsi",
            "libnvidia-fbc",
            "libnvidia-ifr",
            "libnvidia-rtcore",
            "libnvoptix",
            "libGLX_nvidia",
            "libEGL_nvidia",
            "libGLESv2_nvidia",
            "libGLESv1_CM_nvidia",
            "libnvidia-glvkspirv",
            "libnvidia-cbl",
            "libnvidia-gpucomp",
            "libnvidia-vksc-core",
        ],
    ),
    (Capability::Ngx, &["libnvidia-ngx"]),
];

/// Driver binaries by capability.
pub const BINARIES: &[(Capability, &[&str])] = &[
    (
        Capability::Utility,
        &["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"],
    ),
    (
        Capability::Compute,
        &["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"],
    ),
];

/// Folders (inside the driver root) searched for binaries, in order.
pub const BINARY_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/nvidia/bin",
];

/// Folders (inside the driver root) that may hold `nvidia/<version>/gsp_*.bin`.
pub const FIRMWARE_DIRS: &[&str] = &[
    "/lib/firmware",
    "/usr/lib/firmware",
    "/usr/local/nvidia/firmware",
];

/// Where firmware goes in the container: the kernel looks there.
pub const FIRMWARE_CONTAINER_DIR: &str = "/lib/firmware/nvidia";

/// A configuration file the loaders read: (capability, file name, folders searched
/// inside the driver root in order, folder in the container).
pub const CONFIG_FILES: &[(Capability, &str, &[&str], &str)] = &[
    (
        Capability::Graphics,
        "nvidia_icd.json",
        &[
            "/etc/vulkan/icd.d",
            "/usr/share/vulkan/icd.d",
            "/usr/local/nvidia/share/vulkan/icd.d",
        ],
        "/usr/share/vulkan/icd.d",
    ),
    (
        Capability::Graphics,
        "nvidia_layers.json",
        &[
            "/etc/vulkan/implicit_layer.d",
            "/usr/share/vulkan/implicit_layer.d",
            "/usr/local/nvidia/share/vulkan/implicit_layer.d",
        ],
        "/usr/share/vulkan/implicit_layer.d",
    ),
    (
        Capability::Graphics,
        "10_nvidia.json",
        &[
            "/etc/glvnd/egl_vendor.d",
            "/usr/share/glvnd/egl_vendor.d",
            "/usr/local/nvidia/share/glvnd/egl_vendor.d",
        ],
        "/usr/share/glvnd/egl_vendor.d",
    ),
    (
        Capability::Graphics,
        "15_nvidia_gbm.json",
        &["/usr/share/egl/egl_external_platform.d"],
        "/usr/share/egl/egl_external_platform.d",
    ),
    (
        Capability::Graphics,
        "10_nvidia_wayland.json",
        &["/usr/share/egl/egl_external_platform.d"],
        "/usr/share/egl/egl_external_platform.d",
    ),
];

/// Other driver files by capability: (capability, path inside the driver root, which is
/// also the path in the container). `{version}` stands for the driver version.
pub const OTHER_FILES: &[(Capability, &str)] = &[
    (
        Capability::Display,
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
    ),
    (
        Capability::Display,
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{version}",
    ),
    (
        Capability::Ngx,
        "/usr/lib/x86_64-linux-gnu/nvidia/wine/nvngx.dll",
    ),
    (
        Capability::Ngx,
        "/usr/lib/x86_64-linux-gnu/nvidia/wine/_nvngx.dll",
    ),
];

/// IPC endpoints: (capabilities that get it, path inside the driver root, container
/// path, whether it is a directory rather than a socket).
pub const IPC: &[(&[Capability], &str, &str, bool)] = &[
    (
        &[Capability::Utility, Capability::Compute],
        "/run/nvidia-persistenced/socket",
        "/run/nvidia-persistenced/socket",
        false,
    ),
    (
        &[Capability::Compute],
        "/run/nvidia-fabricmanager/socket",
        "/run/nvidia-fabricmanager/socket",
        false,
    ),
    (
        &[Capability::Compute],
        "/tmp/nvidia-mps",
        "/tmp/nvidia-mps",
        true,
    ),
];

/// Extra soname-level links created in the container for libraries that programs
/// `dlopen` by another name: (library stem, link name, link target).
pub const EXTRA_LINKS: &[(&str, &str, &str)] = &[
    ("libcuda", "libcuda.so", "libcuda.so.1"),
    (
        "libnvidia-opticalflow",
        "libnvidia-opticalflow.so",
        "libnvidia-opticalflow.so.1",
    ),
    (
        "libGLX_nvidia",
        "libGLX_indirect.so.0",
        "libGLX_nvidia.so.0",
    ),
];
