//! The wrong kind of file where nvc expects a file or a directory, and files already
//! there.

use super::*;

/// What can be where nvc expects something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thing {
    Dir,
    Fifo,
    Socket,
    CharDevice,
    File,
}

impl Thing {
    fn name(self) -> &'static str {
        match self {
            Thing::Dir => "a directory",
            Thing::Fifo => "a fifo",
            Thing::Socket => "a socket",
            Thing::CharDevice => "the character device 1:3",
            Thing::File => "a regular file",
        }
    }

    fn plant(self, rootfs: &Path, inner: &str) {
        let p = host_path(rootfs, inner);
        remove_any(&p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let made = match self {
            Thing::Dir => {
                std::fs::create_dir(&p).unwrap();
                // Something inside, so replacing it would lose data.
                std::fs::write(p.join("image-file"), "image").unwrap();
                true
            }
            Thing::File => {
                std::fs::write(&p, "image").unwrap();
                true
            }
            Thing::Fifo => Command::new("mkfifo").arg(&p).status().unwrap().success(),
            Thing::Socket => {
                drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
                true
            }
            Thing::CharDevice => Command::new("mknod")
                .arg(&p)
                .args(["c", "1", "3"])
                .status()
                .unwrap()
                .success(),
        };
        assert!(made, "cannot make {} at {}", self.name(), p.display());
    }
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn the_wrong_kind_of_file_is_refused_and_files_there_are_replaced_or_mounted_over() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    let libcuda = format!("{LIB}/libcuda.so.{VERSION}");
    let soname = format!("{LIB}/libcuda.so.1");
    let firmware = format!("/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin");
    let wrong: Vec<(String, Vec<Thing>)> = vec![
        // Mount points for files.
        (
            libcuda.clone(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        (
            "/usr/bin/nvidia-smi".into(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        (firmware, vec![Thing::Dir, Thing::Fifo]),
        (
            "/usr/share/vulkan/icd.d/nvidia_icd.json".into(),
            vec![Thing::Dir, Thing::Fifo],
        ),
        (
            "/run/nvidia-persistenced/socket".into(),
            vec![Thing::Dir, Thing::Socket],
        ),
        // A mount point for a directory.
        ("/tmp/nvidia-mps".into(), vec![Thing::File, Thing::Fifo]),
        // A file nvc reads and replaces.
        (
            "/etc/ld.so.cache".into(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        // A link nvc makes.
        (soname.clone(), vec![Thing::Dir, Thing::Fifo]),
    ];
    for (path, things) in wrong {
        for thing in things {
            let inner = path.clone();
            cases.push(Case::new(
                format!("{path} is {}", thing.name()),
                &path,
                move |rootfs, _| thing.plant(rootfs, &inner),
                Expect::Refused(thing.name()),
            ));
        }
    }

    // Files and links already where nvc puts its own.
    let replaced = format!("[ \"$(readlink {soname})\" = libcuda.so.{VERSION} ] && echo replaced");
    let s = soname.clone();
    cases.push(
        Case::new(
            format!("{soname} is the image's own file"),
            &soname,
            move |rootfs, _| Thing::File.plant(rootfs, &s),
            Expect::Starts,
        )
        .checking(&replaced, "replaced"),
    );
    for kind in [LinkKind::Absolute, LinkKind::Proc1Root, LinkKind::DotDot] {
        let s = soname.clone();
        cases.push(
            Case::new(
                format!("{soname} -> {} libcuda.so.1", kind.name()),
                &soname,
                move |rootfs, outside| {
                    let target = kind.target(rootfs, &s, &outside.join("libcuda.so.1"));
                    replace_with_link(rootfs, &s, &target);
                },
                Expect::Starts,
            )
            .checking(&replaced, "replaced"),
        );
    }
    let mesa = format!("{LIB}/libGLX_indirect.so.0");
    cases.push(
        Case::new(
            format!("{mesa} -> libGLX_mesa.so.0 (Mesa)"),
            &mesa,
            |rootfs, _| {
                let lib = host_path(rootfs, LIB);
                std::fs::write(lib.join("libGLX_mesa.so.0"), "mesa").unwrap();
                replace_with_link(rootfs, &format!("{LIB}/libGLX_indirect.so.0"), "libGLX_mesa.so.0");
            },
            Expect::Starts,
        )
        .checking(
            &format!("[ \"$(readlink {mesa})\" = libGLX_nvidia.so.0 ] && [ -f {LIB}/libGLX_mesa.so.0 ] && echo replaced"),
            "replaced",
        ),
    );
    let l = libcuda.clone();
    cases.push(Case::new(
        format!("{libcuda} -> absolute libcuda.so.1"),
        &libcuda,
        move |rootfs, outside| {
            replace_with_link(
                rootfs,
                &l,
                &outside.join("libcuda.so.1").display().to_string(),
            )
        },
        Expect::Refused("it is a symbolic link"),
    ));
    cases.push(
        Case::new(
            "/usr/bin/nvidia-smi is the image's own file".into(),
            "/usr/bin/nvidia-smi",
            |rootfs, _| {
                let p = host_path(rootfs, "/usr/bin/nvidia-smi");
                std::fs::write(&p, "#!/bin/sh\necho image-smi\n").unwrap();
            },
            Expect::Starts,
        )
        .checking(
            "grep -q image-smi /usr/bin/nvidia-smi || echo mounted-over",
            "mounted-over",
        ),
    );
    cases.push(Case::new(
        "/usr/bin/nvidia-smi -> absolute nvidia-smi".into(),
        "/usr/bin/nvidia-smi",
        |rootfs, outside| {
            replace_with_link(
                rootfs,
                "/usr/bin/nvidia-smi",
                &outside.join("nvidia-smi").display().to_string(),
            )
        },
        Expect::Refused("it is a symbolic link"),
    ));
    cases.push(
        Case::new(
            "/etc/ld.so.cache -> absolute ld.so.cache".into(),
            "/etc/ld.so.cache",
            |rootfs, outside| {
                replace_with_link(
                    rootfs,
                    "/etc/ld.so.cache",
                    &outside.join("etc/ld.so.cache").display().to_string(),
                )
            },
            Expect::Starts,
        )
        .checking(
            "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
            "cache-replaced",
        ),
    );
    // A hard link to a file outside the rootfs (same file system): the cache is
    // replaced by a rename, never written into.
    cases.push(
        Case::new(
            "/etc/ld.so.cache is a hard link to a file outside".into(),
            "/etc/ld.so.cache",
            |rootfs, outside| {
                let p = host_path(rootfs, "/etc/ld.so.cache");
                remove_any(&p);
                std::fs::hard_link(outside.join("etc/ld.so.cache"), &p).unwrap();
            },
            Expect::Starts,
        )
        .checking(
            "grep -q nvc-sentinel /etc/ld.so.cache || echo cache-replaced",
            "cache-replaced",
        ),
    );
    // CUDA compat libraries that lead to the host (CVE-2024-0132, CVE-2025-23359): nvc
    // only lists the folder's names for the cache, and never mounts or opens them.
    for kind in [
        LinkKind::Proc1Cwd,
        LinkKind::Proc1Root,
        LinkKind::ProcSelfRoot,
        LinkKind::Absolute,
    ] {
        let file = "/usr/local/cuda/compat/libcuda.so.1000.1.2";
        cases.push(
            Case::new(
                format!("{file} -> {} libcuda.so.1", kind.name()),
                file,
                move |rootfs, outside| {
                    let target = kind.target(rootfs, file, &outside.join("libcuda.so.1"));
                    replace_with_link(rootfs, file, &target);
                    replace_with_link(
                        rootfs,
                        "/usr/local/cuda/compat/libcuda.so.1",
                        "libcuda.so.1000.1.2",
                    );
                },
                Expect::Starts,
            )
            .checking(
                "[ -L /usr/local/cuda/compat/libcuda.so.1000.1.2 ] && echo compat-untouched",
                "compat-untouched",
            ),
        );
    }
    run_all(&lab, &cases);
}
