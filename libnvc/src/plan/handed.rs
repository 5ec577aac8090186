//! What nvc-runtime hands the prestart hook it adds, in the hook's arguments: the
//! device mounts it took out of the spec (`--device-mount <name>`) and the GPUs it read
//! (`--gpus <json>`), so that one start reads the driver's GPUs once.
//!
//! The arguments are part of the spec, which the engine writes and the container cannot:
//! neither the image, nor a volume, nor the container's environment reaches them. They
//! are still checked as input: every field has the form the kernel module writes (a
//! bus id that is its own normal form, so it can only name a folder under `gpus/`), and
//! the list is taken only when it is fresh ([`HandedGpus::fresh`]) and for the driver
//! whose version the hook reads itself (`discover::Reading::gpus`). A spec that already had nvc's hook when the shim
//! saw it (a bundle started again) keeps its old list; it is then stale, and the hook
//! reads the GPUs itself.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::discover::proc::{is_version, normalize_bus_id, GpuInventory, ProcGpu};
use crate::discover::Driver;
use crate::request::excerpt;

/// The hook's argument that hands it a device mount the runtime shim removed from the
/// spec (`--device-mount <name>`, once per mount).
pub const DEVICE_MOUNT_ARG: &str = "--device-mount";

/// The hook's argument that hands it the GPUs the runtime shim read (`--gpus <json>`).
pub const GPUS_ARG: &str = "--gpus";

/// The most GPUs a handed list may name (the kernel module's minors are 0-254).
const MAX_GPUS: usize = 255;

/// What the hook was handed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handed {
    /// The device mounts, read as if the spec still had them.
    pub device_mounts: Vec<String>,
    /// The GPUs, when the shim handed them.
    pub gpus: Option<HandedGpus>,
}

/// Arguments the hook was not handed by nvc-runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandedError {
    /// An argument nvc-runtime does not write (or one without its value, or twice).
    #[error(
        "unknown argument {0:?} (nvc-hook prestart takes only --device-mount <name> and \
         --gpus <list>, written by nvc-runtime)"
    )]
    Unknown(String),
    /// A GPU list that is not one nvc-runtime writes.
    #[error(
        "the GPU list after --gpus is not one nvc-runtime writes ({why}): {excerpt}; let \
         nvc-runtime write the hook's arguments, or remove them from the spec"
    )]
    Gpus {
        /// The start of the list.
        excerpt: String,
        /// What is wrong with it.
        why: String,
    },
}

impl Handed {
    /// The hook's arguments after its mode.
    pub fn parse(args: &[String]) -> Result<Handed, HandedError> {
        let mut handed = Handed::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match (arg.as_str(), it.next()) {
                (DEVICE_MOUNT_ARG, Some(name)) => handed.device_mounts.push(name.clone()),
                (GPUS_ARG, Some(json)) if handed.gpus.is_none() => {
                    let gpus = HandedGpus::parse(json).map_err(|why| HandedError::Gpus {
                        excerpt: excerpt(json),
                        why,
                    })?;
                    handed.gpus = Some(gpus);
                }
                _ => return Err(HandedError::Unknown(arg.clone())),
            }
        }
        Ok(handed)
    }
}

/// A GPU list as the shim hands it: the driver version it read it for, when (Unix
/// milliseconds), and each GPU as `[bus id, minor, UUID, model]` in PCI bus order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandedGpus {
    driver: String,
    at_ms: u64,
    gpus: Vec<(String, u32, String, String)>,
}

impl HandedGpus {
    /// How old a handed list may be when the hook reads it: a start runs its prestart
    /// hook within a second of the shim, under load within a few.
    pub const MAX_AGE: Duration = Duration::from_secs(60);

    /// The list for `driver`'s GPUs, read now. `None` when the driver's version did not
    /// come from the kernel module (the hook could not check it against its own).
    pub fn of(driver: &Driver) -> Option<HandedGpus> {
        if !driver.version_from_proc {
            return None;
        }
        Some(HandedGpus {
            driver: driver.version.clone(),
            at_ms: now_ms(),
            gpus: driver
                .gpus
                .iter()
                .map(|g| (g.bus_id.clone(), g.minor, g.uuid.clone(), g.model.clone()))
                .collect(),
        })
    }

    /// The argument's text.
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the argument and checks every field's form.
    pub fn parse(json: &str) -> Result<HandedGpus, String> {
        let handed: HandedGpus = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if handed.gpus.len() > MAX_GPUS {
            return Err(format!("more than {MAX_GPUS} GPUs"));
        }
        if handed.driver.len() > 32 || !is_version(&handed.driver) {
            return Err(format!("the driver version {:?} is not one", handed.driver));
        }
        for (bus_id, minor, uuid, model) in &handed.gpus {
            if normalize_bus_id(bus_id).as_deref() != Some(bus_id.as_str()) {
                return Err(format!(
                    "{bus_id:?} is not a PCI bus id as the driver writes it"
                ));
            }
            if *minor >= 1 << 20 {
                return Err(format!("the minor {minor} of {bus_id} is out of range"));
            }
            if !is_gpu_uuid(uuid) {
                return Err(format!("{uuid:?} is not a GPU UUID"));
            }
            if model.len() > 256 || model.chars().any(char::is_control) {
                return Err(format!("the model name of {bus_id} is not one"));
            }
        }
        if !handed.gpus.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err("the GPUs are not in PCI bus order, each once".into());
        }
        Ok(handed)
    }

    /// The list as discovery takes it (which compares its driver with the version the
    /// kernel module reports now), when it is fresh: under [`HandedGpus::MAX_AGE`] old,
    /// not from the future. `nvidia` is `<proc root>/driver/nvidia`.
    pub fn fresh(&self, nvidia: &Path) -> Option<GpuInventory> {
        let age = now_ms().checked_sub(self.at_ms)?;
        if age > Self::MAX_AGE.as_millis() as u64 {
            return None;
        }
        let gpus = self
            .gpus
            .iter()
            .map(|(bus_id, minor, uuid, model)| ProcGpu {
                bus_id: bus_id.clone(),
                uuid: uuid.clone(),
                minor: *minor,
                model: model.clone(),
                dir: nvidia.join("gpus").join(bus_id),
            })
            .collect();
        Some(GpuInventory {
            driver: self.driver.clone(),
            gpus,
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `GPU-` and hex digits with dashes.
fn is_gpu_uuid(u: &str) -> bool {
    u.len() <= 64
        && u.strip_prefix("GPU-").is_some_and(|hex| {
            !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn gpus(at_ms: u64, list: &[(&str, u32, &str, &str)]) -> HandedGpus {
        HandedGpus {
            driver: "580.95.05".into(),
            at_ms,
            gpus: list
                .iter()
                .map(|(b, m, u, n)| (b.to_string(), *m, u.to_string(), n.to_string()))
                .collect(),
        }
    }

    const UUID: &str = "GPU-92bfdb8e-0ae7-d882-cef0-4f24bbc28ea8";

    #[test]
    fn only_the_arguments_nvc_runtime_writes_are_taken() {
        assert_eq!(Handed::parse(&[]), Ok(Handed::default()));
        let list = gpus(
            now_ms(),
            &[("0000:06:00.0", 0, UUID, "NVIDIA H100 80GB HBM3")],
        );
        let args = vec![
            "--device-mount".to_string(),
            "0".into(),
            "--gpus".into(),
            list.to_arg(),
            "--device-mount".into(),
            "imex/1".into(),
        ];
        assert_eq!(
            Handed::parse(&args),
            Ok(Handed {
                device_mounts: strings(&["0", "imex/1"]),
                gpus: Some(list.clone()),
            })
        );
        for bad in [
            strings(&["--device-mount"]),
            strings(&["-config=/x"]),
            strings(&["--gpus"]),
        ] {
            assert_eq!(
                Handed::parse(&bad),
                Err(HandedError::Unknown(bad[0].clone()))
            );
        }
        // Twice is not what the shim writes.
        let twice = vec![
            "--gpus".into(),
            list.to_arg(),
            "--gpus".into(),
            list.to_arg(),
        ];
        assert_eq!(
            Handed::parse(&twice),
            Err(HandedError::Unknown("--gpus".into()))
        );
        let bad = vec![
            "--gpus".into(),
            r#"{"driver":"1.2","at_ms":0,"gpus":[["../x",0,"GPU-1","x"]]}"#.into(),
        ];
        let err = Handed::parse(&bad).unwrap_err();
        assert!(
            matches!(&err, HandedError::Gpus { why, .. } if why.contains("not a PCI bus id")),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("the GPU list after --gpus is not one nvc-runtime writes ("),
            "{err}"
        );
    }

    #[test]
    fn a_list_is_taken_only_in_the_form_the_shim_writes() {
        let now = now_ms();
        let good = gpus(
            now,
            &[
                ("0000:06:00.0", 0, UUID, "H100"),
                ("0000:07:00.0", 1, UUID, "H100"),
            ],
        );
        assert_eq!(HandedGpus::parse(&good.to_arg()), Ok(good));
        let refused = [
            (
                gpus(now, &[("../../etc", 0, UUID, "x")]),
                "not a PCI bus id",
            ),
            (
                gpus(now, &[("0000:06:00.0/..", 0, UUID, "x")]),
                "not a PCI bus id",
            ),
            (
                gpus(now, &[("00000000:06:00.0", 0, UUID, "x")]),
                "not a PCI bus id",
            ),
            (
                gpus(now, &[("0000:06:00.0", 1 << 20, UUID, "x")]),
                "out of range",
            ),
            (
                gpus(now, &[("0000:06:00.0", 0, "MIG-1", "x")]),
                "not a GPU UUID",
            ),
            (
                gpus(now, &[("0000:06:00.0", 0, "GPU-../x", "x")]),
                "not a GPU UUID",
            ),
            (
                gpus(now, &[("0000:06:00.0", 0, UUID, "a\nb")]),
                "model name",
            ),
            (
                gpus(
                    now,
                    &[
                        ("0000:07:00.0", 0, UUID, "x"),
                        ("0000:06:00.0", 1, UUID, "x"),
                    ],
                ),
                "PCI bus order",
            ),
            (
                gpus(
                    now,
                    &[
                        ("0000:06:00.0", 0, UUID, "x"),
                        ("0000:06:00.0", 1, UUID, "x"),
                    ],
                ),
                "PCI bus order",
            ),
        ];
        for (list, why) in refused {
            let err = HandedGpus::parse(&list.to_arg()).unwrap_err();
            assert!(err.contains(why), "{list:?}: {err}");
        }
        let mut odd = gpus(now, &[]);
        odd.driver = "580.95.05; rm".into();
        assert!(HandedGpus::parse(&odd.to_arg())
            .unwrap_err()
            .contains("driver version"));
        let err = HandedGpus::parse(r#"{"driver":"1.2","at_ms":0,"gpus":[],"extra":1}"#);
        assert!(err.unwrap_err().contains("unknown field"));
        let many: Vec<(String, u32, String, String)> = (0..=MAX_GPUS as u32)
            .map(|i| {
                (
                    format!("0000:{:02x}:00.0", i % 256),
                    i,
                    UUID.into(),
                    "x".into(),
                )
            })
            .collect();
        let huge = HandedGpus {
            driver: "1.2".into(),
            at_ms: now,
            gpus: many,
        };
        assert!(HandedGpus::parse(&huge.to_arg())
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn a_list_is_used_only_fresh() {
        let nvidia = Path::new("/proc/driver/nvidia");
        let now = now_ms();
        let list = gpus(now, &[("0000:06:00.0", 3, UUID, "H100")]);
        let taken = list.fresh(nvidia).unwrap();
        assert_eq!(taken.driver, "580.95.05");
        assert_eq!(
            taken.gpus,
            [ProcGpu {
                bus_id: "0000:06:00.0".into(),
                uuid: UUID.into(),
                minor: 3,
                model: "H100".into(),
                dir: nvidia.join("gpus/0000:06:00.0"),
            }]
        );
        // A stale list, one from the future: not used.
        let old = HandedGpus::MAX_AGE.as_millis() as u64 + 1_000;
        assert_eq!(gpus(now - old, &[]).fresh(nvidia), None);
        assert_eq!(gpus(now + 60_000, &[]).fresh(nvidia), None);
    }
}
