//! Container edits on the committed driver trees (`testdata/driver-roots`), read through
//! `libnvc::probe::TreeProbe`: no root, no GPU.

use libnvc::discover::{discover, Driver};
use libnvc::edits::{self, ContainerEdits, ContainerLayout};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::trees::DriverTree;

pub fn driver(name: &str) -> (DriverTree, Driver) {
    let tree = DriverTree::committed(name);
    let d = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    (tree, d)
}

pub fn request(env: &[&str]) -> Request {
    Request::from_env(env.iter().copied(), &RequestPolicy::default()).unwrap()
}

pub fn edits_for(d: &Driver, env: &[&str]) -> ContainerEdits {
    edits::compute(d, &request(env), &ContainerLayout::debian()).unwrap()
}

pub fn container_paths(e: &ContainerEdits) -> Vec<String> {
    e.mounts
        .iter()
        .map(|m| m.container_path.display().to_string())
        .chain(e.device_nodes.iter().map(|n| n.path.display().to_string()))
        .chain(e.symlinks.iter().map(|s| s.link.display().to_string()))
        .collect()
}

pub fn gpu_nodes(e: &ContainerEdits) -> Vec<String> {
    e.device_nodes
        .iter()
        .filter(|n| n.major == 195 && n.minor < 254)
        .map(|n| n.path.display().to_string())
        .collect()
}

pub fn node_paths(e: &ContainerEdits) -> Vec<String> {
    e.device_nodes
        .iter()
        .map(|n| n.path.display().to_string())
        .collect()
}
