//! Which container a process is in, from its `/proc/<pid>/cgroup`.
//!
//! The rule, deepest component first on each line (the unified `0::` line before the v1
//! controllers' lines):
//! 1. a component that is, or ends in, a 64-hex container id: `docker-<id>.scope`,
//!    `libpod-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
//!    `/docker/<id>`, `/kubepods/<qos>/pod<uid>/<id>`, `/<ns>/<id>`: the id, with the
//!    engine its prefix names. An engine's monitor (`libpod-conmon-<id>.scope`,
//!    `crio-conmon-<id>.scope`) is not the container. Every such id is kept, deepest
//!    first (Docker in Docker: the inner id, then the outer one the host's engine knows).
//! 2. any component (also with a `.scope` suffix or a `<prefix>-` taken off: runc's
//!    systemd `runc-<id>.scope`) is a *name* that may be an id: plain runc with its own
//!    cgroupsPath (`/<id>`, `/mine/<id>`) names containers freely, so such a name counts
//!    only where something else knows the id (nvc's records, containerd's tasks).

use super::Engine;

/// The length of the ids Docker, containerd, CRI-O and Podman make.
const HEX_ID: usize = 64;

/// What a process's cgroup says of its container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupIds {
    /// 64-hex ids found, deepest first, each with the engine its component's prefix names.
    pub hex: Vec<(String, Option<Engine>)>,
    /// Names that may be a container's id (rule 2), deepest first; each counts only where
    /// a record or an engine's state knows it.
    pub names: Vec<String>,
    /// Whether the process is an engine's monitor of a container (conmon), not in it.
    pub monitor: bool,
}

/// What the cgroup file `text` (`/proc/<pid>/cgroup`) says of the process's container.
pub fn parse(text: &str) -> CgroupIds {
    let mut ids = CgroupIds::default();
    let mut lines: Vec<(bool, &str)> = text
        .lines()
        .filter_map(|l| Some((!l.starts_with("0::"), cgroup_path(l)?)))
        .collect();
    // The unified hierarchy's line first (a stable sort): on a hybrid host the v1 lines
    // may name another cgroup.
    lines.sort_by_key(|(v1, _)| *v1);
    for (_, path) in lines {
        for component in path.rsplit('/').filter(|c| !c.is_empty()) {
            let bare = component.strip_suffix(".scope").unwrap_or(component);
            if bare.contains("conmon-") {
                ids.monitor = true;
            }
            if let Some((id, engine)) = hex_id(bare) {
                if !ids.hex.iter().any(|(i, _)| i == &id) {
                    ids.hex.push((id, engine));
                }
                continue;
            }
            for name in names_in(component) {
                if !ids.names.contains(&name) {
                    ids.names.push(name);
                }
            }
        }
    }
    if ids.monitor {
        ids.hex.clear();
        ids.names.clear();
    }
    ids
}

/// The cgroup path of one line `<hierarchy>:<controllers>:<path>`.
fn cgroup_path(line: &str) -> Option<&str> {
    let mut parts = line.splitn(3, ':');
    let (_, _, path) = (parts.next()?, parts.next()?, parts.next()?);
    Some(path).filter(|p| p.starts_with('/'))
}

/// The 64-hex id `component` is or ends in (after a `<prefix>-`), with the engine that
/// prefix names.
fn hex_id(component: &str) -> Option<(String, Option<Engine>)> {
    let (prefix, id) = match component.rsplit_once('-') {
        Some((prefix, id)) => (Some(prefix), id),
        None => (None, component),
    };
    if id.len() != HEX_ID || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let engine = match prefix {
        Some("docker") => Some(Engine::Docker),
        Some("libpod") => Some(Engine::Podman),
        Some("cri-containerd") | Some("containerd") | Some("nerdctl") => Some(Engine::Containerd),
        Some("crio") => Some(Engine::CriO),
        _ => None,
    };
    Some((id.to_ascii_lowercase(), engine))
}

/// The names `component` may stand for: itself, without `.scope`, and each end of it
/// after a `-` (`runc-<id>.scope`, `<slice>-<id>.slice`); systemd's own units are none.
fn names_in(component: &str) -> Vec<String> {
    let bare = component
        .strip_suffix(".scope")
        .or_else(|| component.strip_suffix(".slice"))
        .unwrap_or(component);
    let mut names = vec![component.to_string()];
    if bare != component {
        names.push(bare.to_string());
    }
    for (i, b) in bare.bytes().enumerate() {
        if b == b'-' && i + 1 < bare.len() {
            names.push(bare[i + 1..].to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c0d5e6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f";
    const ID2: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn first(text: &str) -> Option<(String, Option<Engine>)> {
        parse(text).hex.into_iter().next()
    }

    #[test]
    fn the_engines_cgroup_shapes_give_the_id_and_engine() {
        let cases: &[(String, Option<Engine>)] = &[
            // Docker, systemd driver and cgroupfs driver; cgroup v1 and v2.
            (
                format!("0::/system.slice/docker-{ID}.scope"),
                Some(Engine::Docker),
            ),
            (format!("0::/docker/{ID}"), None),
            (
                format!(
                    "12:pids:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/"
                ),
                None,
            ),
            // Podman rootful and rootless, and a container with systemd inside.
            (
                format!("0::/machine.slice/libpod-{ID}.scope"),
                Some(Engine::Podman),
            ),
            (
                format!(
                    "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
                ),
                Some(Engine::Podman),
            ),
            (
                format!("0::/machine.slice/libpod-{ID}.scope/container"),
                Some(Engine::Podman),
            ),
            (
                format!("0::/system.slice/docker-{ID}.scope/init.scope"),
                Some(Engine::Docker),
            ),
            // Kubernetes through containerd and CRI-O, systemd and cgroupfs drivers.
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f6a_7b8c_9d0e_1f2a3b4c5d6e.slice/cri-containerd-{ID}.scope"
                ),
                Some(Engine::Containerd),
            ),
            (
                format!(
                    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c3d4e_5f6a.slice/crio-{ID}.scope"
                ),
                Some(Engine::CriO),
            ),
            (
                format!("0::/kubepods/burstable/pod1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e/{ID}"),
                None,
            ),
            (format!("0::/kubepods/besteffort/pod1b2c3d4e/crio-{ID}"), Some(Engine::CriO)),
            // containerd outside Kubernetes: /<namespace>/<id>.
            (format!("0::/default/{ID}"), None),
            (format!("0::/system.slice/containerd-{ID}.scope"), Some(Engine::Containerd)),
            // Upper-case hex as some tools print it is the same id.
            (format!("0::/docker/{}", ID.to_uppercase()), None),
        ];
        for (text, engine) in cases {
            assert_eq!(
                first(text),
                Some((ID.to_string(), *engine)),
                "cgroup {text:?}"
            );
        }
    }

    #[test]
    fn nested_engines_give_every_id_deepest_first() {
        let ids = parse(&format!("0::/docker/{ID}/docker/{ID2}"));
        assert_eq!(
            ids.hex,
            vec![(ID2.to_string(), None), (ID.to_string(), None)]
        );
    }

    #[test]
    fn host_processes_and_monitors_have_no_hex_id() {
        for text in [
            "0::/user.slice/user-1000.slice/session-3.scope",
            "0::/system.slice/nvidia-persistenced.service",
            "0::/init.scope",
            "0::/",
            "12:pids:/\n0::/",
            "",
            "garbage",
            // A 63- and a 65-character id, and one that is not hex.
            &format!("0::/docker/{}", &ID[1..]),
            &format!("0::/docker/{ID}0"),
            &format!("0::/docker/{}", ID.replace('a', "g")),
        ] {
            assert_eq!(first(text), None, "cgroup {text:?}");
        }
        let conmon = parse(&format!("0::/machine.slice/libpod-conmon-{ID}.scope"));
        assert!(conmon.monitor && conmon.hex.is_empty() && conmon.names.is_empty());
        let conmon = parse(&format!("0::/system.slice/crio-conmon-{ID}.scope"));
        assert!(conmon.monitor && conmon.hex.is_empty());
    }

    #[test]
    fn plain_runc_gives_names_that_may_be_ids() {
        // runc's default cgroup (`/<id>`), a custom cgroupsPath, and the systemd driver's
        // `system.slice:runc:<id>`.
        let ids = parse("0::/nvc-top-12-0-ab");
        assert!(ids.hex.is_empty());
        assert_eq!(ids.names[0], "nvc-top-12-0-ab");
        assert!(parse("0::/mine/ctr-1").names.contains(&"ctr-1".to_string()));
        let ids = parse("0::/system.slice/runc-ctr-1.scope");
        assert!(ids.names.contains(&"ctr-1".to_string()), "{ids:?}");
        // Deepest first: the container's own name before its parents'.
        let ids = parse("0::/mine/ctr-1");
        let at = |n: &str| ids.names.iter().position(|x| x == n).unwrap();
        assert!(at("ctr-1") < at("mine"));
    }

    #[test]
    fn the_unified_line_comes_first_on_a_hybrid_host() {
        let text = format!("4:memory:/docker/{ID2}\n1:name=systemd:/docker/{ID2}\n0::/docker/{ID}");
        assert_eq!(first(&text), Some((ID.to_string(), None)));
    }
}
