//! The `cdi.k8s.io/` annotations of a container's spec, through which Kubernetes device
//! plugins and CDI-aware engines name the GPUs as CDI device names.

use std::collections::BTreeMap;

use super::devices::parse_device_id;
use super::{excerpt, items, DeviceId, DeviceSelection, RequestError};

/// The prefix of the annotations that list CDI devices.
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The `cdi.k8s.io/` annotations, in key order.
fn cdi_annotations(
    annotations: &BTreeMap<String, String>,
) -> impl Iterator<Item = (&String, &String)> {
    annotations
        .range(CDI_ANNOTATION_PREFIX.to_string()..)
        .take_while(|(key, _)| key.starts_with(CDI_ANNOTATION_PREFIX))
}

/// The keys of the `cdi.k8s.io/` annotations that name a `nvidia.com/gpu` device, or
/// something that is no CDI name (which would be an error if it were read).
pub(super) fn cdi_annotation_keys(annotations: &BTreeMap<String, String>) -> Vec<&str> {
    cdi_annotations(annotations)
        .filter(|(_, value)| {
            items(value)
                .into_iter()
                .any(|item| match crate::cdi::split_qualified(item) {
                    Some((kind, _)) => kind == crate::cdi::KIND,
                    None => true,
                })
        })
        .map(|(key, _)| key.as_str())
        .collect()
}

/// The GPUs the `cdi.k8s.io/` annotations name, in annotation-key order; `None` when
/// they name none of ours.
pub(super) fn annotation_devices(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<DeviceSelection>, RequestError> {
    let mut all = false;
    let mut ids: Vec<DeviceId> = Vec::new();
    let mut any = false;
    for (key, value) in cdi_annotations(annotations) {
        for item in items(value) {
            let Some((kind, name)) = crate::cdi::split_qualified(item) else {
                return Err(RequestError::BadCdiAnnotation {
                    annotation: key.clone(),
                    item: excerpt(item),
                });
            };
            if kind != crate::cdi::KIND {
                continue;
            }
            any = true;
            if name == crate::cdi::ALL_DEVICE {
                all = true;
                continue;
            }
            let id = parse_device_id(name).map_err(|_| RequestError::BadCdiAnnotation {
                annotation: key.clone(),
                item: excerpt(item),
            })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(match (any, all) {
        (false, _) => None,
        (true, true) => Some(DeviceSelection::All),
        (true, false) => Some(DeviceSelection::List(ids)),
    })
}
