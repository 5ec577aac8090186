//! `nvc-floor`: the least a GPU container's start must do beyond runc's own work, as one
//! static program, for nvc-bench to time beside nvc: the floor of the targets,
//! measured rather than estimated.
//!
//! As the runtime (`nvc-floor --root S create --bundle B ID`, any runc command line), it
//! reads the bundle's `config.json` and, when it names `NVIDIA_VISIBLE_DEVICES`, adds the
//! device nodes, device-cgroup rules and the prestart hook nvc-runtime would add (taken
//! from the plan nvc-bench made) and writes it back; then it execs runc. Every other
//! command execs runc at once. As the prestart hook
//! (`nvc-floor prestart`), it reads the OCI state and the spec's root path, clones the
//! driver files from the host as detached mounts with nvc's attributes, enters the
//! container's mount namespace, makes each mount point and attaches the file, makes the
//! soname links, and writes the new ld.so.cache (prepared by nvc-bench) with one write and
//! a rename. Nothing else: no config, no discovery or plan, no leases, no record for the
//! poststop hook, no `/proc/driver/nvidia` mask, no checks of what the image holds. It is
//! never a way to run a container; it is what nvc would cost if all of that were free.
//!
//! With `"undo": true` in the plan it is also the floor of leaving no trace: the runtime
//! adds `nvc-floor poststop` beside the prestart hook; the prestart hook notes what it
//! made and keeps the image's ld.so.cache (`floor-made` and `floor-cache.orig` in the
//! bundle); the poststop hook removes what was made, last first, and puts the cache back
//! with one write and a rename: no config, no checks of what it removes.
//!
//! The runc it execs is `NVC_FLOOR_RUNC`; the plan (`NVC_FLOOR_PLAN`, a JSON file
//! nvc-bench writes, read only for a GPU spec and by the hook):
//! `{"devices": [...], "rules": [...], "cache": PATH,
//!   "mounts": [{"host", "path", "dir", "readonly", "nosuid", "nodev", "noexec"}],
//!   "links": [{"path", "target"}]}`, and with `nvc-bench --debug-log` `"phases": PATH`:
//! each hook then appends the time of its phases to that file (`floor prestart phases ms:
//! read … ldcache … total …`, as nvc-hook logs its own at debug level), handed to the
//! poststop hook as `NVC_FLOOR_PHASES`. Without it nothing is written.

#![cfg_attr(not(test), no_main)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use nvc_host::container::{DetachedMount, MountAttrs};
use nvc_host::phases::Phases;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde_json::{json, Value};

/// The environment variable naming the plan.
const PLAN_ENV: &str = "NVC_FLOOR_PLAN";

/// The environment variable naming runc, for the runtime.
const RUNC_ENV: &str = "NVC_FLOOR_RUNC";

/// The environment variable naming the file the hooks log their phases in (the plan's
/// `"phases"`), for the poststop hook, which does not read the plan.
const PHASES_ENV: &str = "NVC_FLOOR_PHASES";

#[cfg(not(test))]
nvc_host::c_main!(floor_main);

#[cfg(test)]
fn main() {
    floor_main();
}

fn floor_main() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("prestart") => prestart(),
        Some("poststop") => poststop(),
        _ => runtime(&args[1..]),
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            eprintln!("nvc-floor: {e}");
            false
        }
    }
}

/// A failure, said in one line: the floor program is a benchmark's instrument.
type Fail = String;

fn fail<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> Fail {
    move |e| format!("{what}: {e}")
}

fn read_plan() -> Result<Value, Fail> {
    let path = std::env::var_os(PLAN_ENV).ok_or(format!("{PLAN_ENV} is not set"))?;
    let data = std::fs::read(&path).map_err(fail(format!("read {path:?}")))?;
    serde_json::from_slice(&data).map_err(fail(format!("parse {path:?}")))
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, Fail> {
    v[key].as_str().ok_or(format!("the plan has no {key}"))
}

/// As the runtime: the spec edited on `create` and `run`, then runc exec'd.
fn runtime(args: &[String]) -> Result<(), Fail> {
    let runc = std::env::var_os(RUNC_ENV).ok_or(format!("{RUNC_ENV} is not set"))?;
    let creates = args.iter().any(|a| a == "create" || a == "run");
    if creates {
        edit_spec(args)?;
    }
    let e = std::process::Command::new(&runc).args(args).exec();
    Err(format!("exec {runc:?}: {e}"))
}

/// The spec of the bundle `args` name, read; when it asks for a GPU (its bytes name
/// `NVIDIA_VISIBLE_DEVICES`, the least a shim must look for), edited and written back.
fn edit_spec(args: &[String]) -> Result<(), Fail> {
    let bundle = args
        .iter()
        .position(|a| a == "--bundle" || a == "-b")
        .and_then(|i| args.get(i + 1))
        .ok_or("no --bundle")?;
    let path = Path::new(bundle).join("config.json");
    let data = std::fs::read(&path).map_err(fail(format!("read {}", path.display())))?;
    if !data
        .windows(b"NVIDIA_VISIBLE_DEVICES".len())
        .any(|w| w == b"NVIDIA_VISIBLE_DEVICES")
    {
        return Ok(());
    }
    let plan = read_plan()?;
    let mut spec: Value =
        serde_json::from_slice(&data).map_err(fail(format!("parse {}", path.display())))?;
    let list = |v: &mut Value| -> Result<Vec<Value>, Fail> {
        Ok(match v.take() {
            Value::Null => Vec::new(),
            Value::Array(a) => a,
            _ => return Err("not a list".into()),
        })
    };
    let mut devices = list(&mut spec["linux"]["devices"])?;
    devices.extend(plan["devices"].as_array().cloned().unwrap_or_default());
    spec["linux"]["devices"] = Value::Array(devices);
    let mut rules = list(&mut spec["linux"]["resources"]["devices"])?;
    rules.extend(plan["rules"].as_array().cloned().unwrap_or_default());
    spec["linux"]["resources"]["devices"] = Value::Array(rules);
    let exe = std::env::current_exe().map_err(fail("find this program"))?;
    let mut stages = vec!["prestart"];
    if plan["undo"].as_bool() == Some(true) {
        stages.push("poststop");
    }
    let mut env = vec![format!(
        "{PLAN_ENV}={}",
        std::env::var(PLAN_ENV).unwrap_or_default()
    )];
    if let Some(phases) = plan["phases"].as_str() {
        env.push(format!("{PHASES_ENV}={phases}"));
    }
    for stage in stages {
        let mut hooks = list(&mut spec["hooks"][stage])?;
        hooks.push(json!({
            "path": exe,
            "args": ["nvc-floor", stage],
            "env": env,
        }));
        spec["hooks"][stage] = Value::Array(hooks);
    }
    let out = serde_json::to_vec(&spec).map_err(fail("write the spec"))?;
    std::fs::write(&path, out).map_err(fail(format!("write {}", path.display())))?;
    Ok(())
}

/// As the prestart hook: the mounts, links and ld.so.cache of the plan, in the container.
fn prestart() -> Result<(), Fail> {
    let mut phases = Phases::start("floor prestart");
    let (state, bundle, rootfs) = container()?;
    let pid = state["pid"].as_i64().ok_or("the state has no pid")?;
    let plan = read_plan()?;
    let cache = std::fs::read(text(&plan, "cache")?).map_err(fail("read the cache"))?;
    // The record, opened on the host before entering the container.
    let undo = plan["undo"].as_bool() == Some(true);
    let record = match undo {
        true => Some([MADE, ORIGINAL_CACHE].map(|name| std::fs::File::create(bundle.join(name)))),
        false => None,
    };
    phases.mark("read");

    // In the host's mount namespace: every source, as a detached mount.
    let mut sources = Vec::new();
    for m in plan["mounts"].as_array().into_iter().flatten() {
        let attrs = MountAttrs {
            readonly: m["readonly"].as_bool().unwrap_or(true),
            nosuid: m["nosuid"].as_bool().unwrap_or(true),
            nodev: m["nodev"].as_bool().unwrap_or(true),
            noexec: m["noexec"].as_bool().unwrap_or(false),
        };
        let host = Path::new(text(m, "host")?);
        let src = DetachedMount::bind(host, attrs).map_err(fail(host.display()))?;
        let path = PathBuf::from(text(m, "path")?);
        sources.push((src, path, m["dir"].as_bool().unwrap_or(false)));
    }
    phases.mark("sources");

    let ns = rustix::fs::open(
        format!("/proc/{pid}/ns/mnt"),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail("open the mount namespace"))?;
    rustix::thread::move_into_link_name_space(
        ns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Mount),
    )
    .map_err(fail("enter the mount namespace"))?;
    let mut dirs = Folders::open(&rootfs)?;
    let made = Rc::clone(&dirs.made);
    phases.mark("enter");

    for (src, path, is_dir) in sources {
        let (dir, name) = dirs.parent(&path)?;
        let point = if is_dir {
            match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => made.borrow_mut().push(format!("d {}", path.display())),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("mkdir {}: {e}", path.display())),
            }
            rustix::fs::openat(
                dir,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        } else {
            // Made here (noted for the undo), or the image's own file, mounted over.
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let mode = Mode::from_raw_mode(0o644);
            match rustix::fs::openat(dir, name, flags | OFlags::CREATE | OFlags::EXCL, mode) {
                Ok(fd) => {
                    made.borrow_mut().push(format!("f {}", path.display()));
                    Ok(fd)
                }
                Err(Errno::EXIST) => rustix::fs::openat(dir, name, flags, mode),
                Err(e) => Err(e),
            }
        }
        .map_err(fail(format!("mount point {}", path.display())))?;
        src.attach(&point).map_err(fail(path.display()))?;
    }
    phases.mark("mounts");
    for l in plan["links"].as_array().into_iter().flatten() {
        let path = PathBuf::from(text(l, "path")?);
        let (dir, name) = dirs.parent(&path)?;
        match rustix::fs::symlinkat(text(l, "target")?, dir, name) {
            Ok(()) => made.borrow_mut().push(format!("f {}", path.display())),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(format!("link {}: {e}", path.display())),
        }
    }
    phases.mark("links");
    let (etc, _) = dirs.parent(Path::new("/etc/ld.so.cache"))?;
    if let Some([file, original]) = record {
        // What was made, a line each, and the image's cache.
        let mut file = file.map_err(fail("create the record"))?;
        file.write_all(made.borrow().join("\n").as_bytes())
            .map_err(fail("write the record"))?;
        let mut original = original.map_err(fail("create the record"))?;
        let mut image = std::fs::File::from(
            rustix::fs::openat(
                etc,
                "ld.so.cache",
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(fail("open the image's cache"))?,
        );
        let mut data = Vec::new();
        image
            .read_to_end(&mut data)
            .map_err(fail("read the image's cache"))?;
        original
            .write_all(&data)
            .map_err(fail("keep the image's cache"))?;
    }
    phases.mark("record");
    write_cache(etc, &cache)?;
    phases.mark("ldcache");
    log_phases(plan["phases"].as_str(), &phases)
}

/// Appends the line of `phases` to the file `path` (the plan's `"phases"`, written with
/// `nvc-bench --debug-log`, and handed to the poststop hook as [`PHASES_ENV`]), to be
/// read beside nvc-hook's phases.
fn log_phases(path: Option<&str>, phases: &Phases) -> Result<(), Fail> {
    let Some(path) = path else {
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(fail(format!("open {path}")))?;
    file.write_all(format!("{}\n", phases.line()).as_bytes())
        .map_err(fail(format!("write {path}")))
}

/// Writes `cache` over the ld.so.cache of the folder `etc`: one write and a rename.
fn write_cache(etc: &OwnedFd, cache: &[u8]) -> Result<(), Fail> {
    let tmp = rustix::fs::openat(
        etc,
        ".ld.so.cache.floor",
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(fail("create the cache"))?;
    rustix::io::write(&tmp, cache).map_err(fail("write the cache"))?;
    drop(tmp);
    rustix::fs::renameat(etc, ".ld.so.cache.floor", etc, "ld.so.cache")
        .map_err(fail("rename the cache"))
}

/// The record of what the prestart hook made (`f PATH` for a file or link, `d PATH` for
/// a folder, a line each, in the order made), in the bundle.
const MADE: &str = "floor-made";

/// The image's ld.so.cache, kept in the bundle.
const ORIGINAL_CACHE: &str = "floor-cache.orig";

/// The OCI state on stdin, the bundle and the rootfs (the spec's `root.path`, parsed
/// alone).
fn container() -> Result<(Value, PathBuf, PathBuf), Fail> {
    #[derive(serde::Deserialize)]
    struct Root {
        path: PathBuf,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        root: Root,
    }
    let mut raw = Vec::new();
    std::io::stdin()
        .read_to_end(&mut raw)
        .map_err(fail("read the state"))?;
    let state: Value = serde_json::from_slice(&raw).map_err(fail("parse the state"))?;
    let bundle = PathBuf::from(text(&state, "bundle")?);
    let spec_path = bundle.join("config.json");
    let spec: Spec = serde_json::from_slice(
        &std::fs::read(&spec_path).map_err(fail(format!("read {}", spec_path.display())))?,
    )
    .map_err(fail("parse the spec"))?;
    let rootfs = bundle.join(spec.root.path);
    Ok((state, bundle, rootfs))
}

/// As the poststop hook (with `"undo": true`): what the prestart hook made, removed last
/// first, and the image's cache put back, in the host's mount namespace.
fn poststop() -> Result<(), Fail> {
    let mut phases = Phases::start("floor poststop");
    let (_, bundle, rootfs) = container()?;
    let made = std::fs::read_to_string(bundle.join(MADE)).map_err(fail("read the record"))?;
    let original =
        std::fs::read(bundle.join(ORIGINAL_CACHE)).map_err(fail("read the kept cache"))?;
    let mut dirs = Folders::open(&rootfs)?;
    phases.mark("read");
    for line in made.lines().rev() {
        let (kind, path) = line.split_at(2);
        let (dir, name) = dirs.parent(Path::new(path))?;
        let flags = match kind {
            "d " => AtFlags::REMOVEDIR,
            _ => AtFlags::empty(),
        };
        rustix::fs::unlinkat(dir, name, flags).map_err(fail(format!("remove {path}")))?;
    }
    phases.mark("undo");
    let (etc, _) = dirs.parent(Path::new("/etc/ld.so.cache"))?;
    write_cache(etc, &original)?;
    phases.mark("ldcache");
    for name in [MADE, ORIGINAL_CACHE] {
        std::fs::remove_file(bundle.join(name)).map_err(fail("remove the record"))?;
    }
    phases.mark("record");
    log_phases(std::env::var(PHASES_ENV).ok().as_deref(), &phases)
}

/// The container's folders, each resolved once, inside the rootfs and on its mount,
/// made where missing.
struct Folders {
    root: OwnedFd,
    open: HashMap<PathBuf, OwnedFd>,
    /// What was made, as the record's lines, in the order made.
    made: Rc<RefCell<Vec<String>>>,
}

impl Folders {
    /// The folders of the rootfs at `rootfs`, none resolved yet.
    fn open(rootfs: &Path) -> Result<Folders, Fail> {
        let root = rustix::fs::open(
            rootfs,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(fail(rootfs.display()))?;
        Ok(Folders {
            root,
            open: HashMap::new(),
            made: Rc::default(),
        })
    }

    /// The folder of `path` and its last component.
    fn parent<'a>(&mut self, path: &'a Path) -> Result<(&OwnedFd, &'a str), Fail> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or(format!("{} has no name", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("/"));
        if !self.open.contains_key(dir) {
            let fd = self.resolve(dir)?;
            self.open.insert(dir.to_path_buf(), fd);
        }
        let fd = self.open.get(dir).ok_or("lost a folder")?;
        Ok((fd, name))
    }

    fn resolve(&self, dir: &Path) -> Result<OwnedFd, Fail> {
        let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_XDEV | ResolveFlags::NO_MAGICLINKS;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat2(&self.root, dir, flags, Mode::empty(), how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(format!("open {}: {e}", dir.display())),
        }
        // Made one component at a time from the root.
        let mut at = rustix::fs::openat(&self.root, ".", flags, Mode::empty())
            .map_err(fail("open the root"))?;
        let mut made = PathBuf::from("/");
        for c in dir.components() {
            let Component::Normal(name) = c else { continue };
            made.push(name);
            match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => self.made.borrow_mut().push(format!("d {}", made.display())),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("mkdir {}: {e}", dir.display())),
            }
            at = rustix::fs::openat2(&at, name, flags, Mode::empty(), how)
                .map_err(fail(dir.display()))?;
        }
        Ok(at)
    }
}
