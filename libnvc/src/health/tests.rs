use std::path::PathBuf;

use super::*;
use crate::discover::{DeviceNode, MigDevice};
use crate::request::DeviceId;

const BOOT: &str = "6f0c1a52-0000-4000-8000-000000000001";

fn node(minor: u32) -> DeviceNode {
    DeviceNode {
        path: PathBuf::from(format!("/dev/nvidia{minor}")),
        host_path: PathBuf::from(format!("/dev/nvidia{minor}")),
        major: 195,
        minor,
        file_mode: 0o666,
        uid: 0,
        gid: 0,
        on_host: true,
    }
}

fn gpus() -> Vec<Gpu> {
    (0..3)
        .map(|i| Gpu {
            index: i,
            uuid: format!("GPU-{i}{i}{i}"),
            bus_id: format!("0000:0{i}:00.0"),
            minor: i,
            model: "Fake".into(),
            node: node(i),
            mig: vec![MigDevice {
                index: 0,
                gi: 1,
                ci: 0,
                caps: Vec::new(),
                uuid: None,
            }],
        })
        .collect()
}

fn record(faults: &[(&str, Fault)]) -> HealthRecord {
    HealthRecord {
        format: RECORD_FORMAT,
        written: 1000,
        boot_id: BOOT.into(),
        driver_version: "999.88.77".into(),
        gpus: (0..3)
            .map(|i| {
                let uuid = format!("GPU-{i}{i}{i}");
                GpuHealth {
                    faults: faults
                        .iter()
                        .filter(|(u, _)| *u == uuid)
                        .map(|(_, f)| *f)
                        .collect(),
                    bus_id: format!("0000:0{i}:00.0"),
                    uuid,
                }
            })
            .collect(),
    }
}

fn inputs(record: &HealthRecord, now: u64) -> HealthInputs {
    HealthInputs {
        record: RecordFile::Read(record.to_bytes()),
        boot_id: Some(format!("{BOOT}\n")),
        now,
    }
}

#[test]
fn every_fault_round_trips_by_name_and_in_the_record() {
    for fault in Fault::ALL {
        assert_eq!(Fault::from_name(fault.name()), Some(fault));
        let r = record(&[("GPU-111", fault)]);
        assert_eq!(HealthRecord::parse(&r.to_bytes()).unwrap(), r);
        let text = String::from_utf8(r.to_bytes()).unwrap();
        assert!(text.contains(&format!("\"{}\"", fault.name())), "{text}");
    }
}

#[test]
fn a_current_record_is_trusted_with_its_age() {
    let r = record(&[]);
    assert_eq!(
        assess(&inputs(&r, 1030), "999.88.77", 300),
        Assessment::Current { record: r, age: 30 }
    );
}

#[test]
fn a_stale_or_missing_record_is_ignored_with_the_reason() {
    let r = record(&[("GPU-111", Fault::Lost)]);
    let cases: Vec<(HealthInputs, &str, Ignored)> = vec![
        (
            HealthInputs {
                record: RecordFile::Missing,
                boot_id: Some(BOOT.into()),
                now: 1000,
            },
            "999.88.77",
            Ignored::Missing,
        ),
        (
            inputs(&r, 1301),
            "999.88.77",
            Ignored::TooOld { age: 301, max: 300 },
        ),
        (
            HealthInputs {
                boot_id: Some("another-boot".into()),
                ..inputs(&r, 1000)
            },
            "999.88.77",
            Ignored::OtherBoot {
                record: BOOT.into(),
                now: "another-boot".into(),
            },
        ),
        (
            HealthInputs {
                boot_id: None,
                ..inputs(&r, 1000)
            },
            "999.88.77",
            Ignored::OtherBoot {
                record: BOOT.into(),
                now: "unknown".into(),
            },
        ),
        (
            inputs(&r, 1000),
            "550.1.2",
            Ignored::OtherDriver {
                record: "999.88.77".into(),
                now: "550.1.2".into(),
            },
        ),
    ];
    for (inputs, driver, want) in cases {
        match assess(&inputs, driver, 300) {
            Assessment::Ignored { reason, .. } => assert_eq!(reason, want),
            other => panic!("{want:?}: trusted {other:?}"),
        }
    }
    let garbage = HealthInputs {
        record: RecordFile::Read(b"{not json".to_vec()),
        boot_id: Some(BOOT.into()),
        now: 1000,
    };
    assert!(matches!(
        assess(&garbage, "999.88.77", 300),
        Assessment::Ignored {
            reason: Ignored::Malformed(_),
            record: None
        }
    ));
}

#[test]
fn no_max_age_and_no_known_driver_version_accept_an_old_record() {
    let r = record(&[]);
    assert!(assess(&inputs(&r, 1_000_000), "", 0).current().is_some());
}

#[test]
fn all_leaves_out_each_kind_of_unhealthy_gpu() {
    let gpus = gpus();
    for fault in Fault::ALL {
        let r = record(&[("GPU-111", fault)]);
        let mut selected = Selected {
            gpus: gpus.iter().collect(),
            mig: Vec::new(),
        };
        let left = screen(
            &mut selected,
            &DeviceSelection::All,
            &r,
            "NVIDIA_VISIBLE_DEVICES",
        )
        .unwrap();
        let kept: Vec<u32> = selected.gpus.iter().map(|g| g.index).collect();
        assert_eq!(kept, [0, 2], "{fault}");
        assert_eq!(
            left,
            [LeftOut {
                index: 1,
                uuid: "GPU-111".into(),
                faults: vec![fault]
            }]
        );
    }
}

#[test]
fn naming_an_unhealthy_gpu_or_its_mig_device_is_refused() {
    let gpus = gpus();
    let r = record(&[("GPU-111", Fault::RowRemapFailed)]);
    let ids = DeviceSelection::List(vec![DeviceId::Index(0), DeviceId::Index(1)]);
    let mut whole = Selected {
        gpus: vec![&gpus[0], &gpus[1]],
        mig: Vec::new(),
    };
    let err = screen(&mut whole, &ids, &r, "NVIDIA_VISIBLE_DEVICES").unwrap_err();
    assert_eq!(err.index, 1);
    assert_eq!(err.uuid, "GPU-111");
    let text = err.to_string();
    for part in [
        "NVIDIA_VISIBLE_DEVICES: GPU 1 (GPU-111, bus 0000:01:00.0) failed a row remapping",
        "nvidia-smi -r -i 1",
        "health-check = false",
    ] {
        assert!(text.contains(part), "{text}");
    }
    let mig = DeviceSelection::List(vec![DeviceId::MigIndex { gpu: 1, mig: 0 }]);
    let mut through_mig = Selected {
        gpus: Vec::new(),
        mig: vec![(&gpus[1], &gpus[1].mig[0])],
    };
    assert_eq!(
        screen(&mut through_mig, &mig, &r, "NVIDIA_VISIBLE_DEVICES")
            .unwrap_err()
            .uuid,
        "GPU-111"
    );
    // A healthy GPU, and one the record does not know, are given.
    let mut healthy = Selected {
        gpus: vec![&gpus[0], &gpus[2]],
        mig: Vec::new(),
    };
    let mut unknown = r.clone();
    unknown.gpus.retain(|g| g.uuid != "GPU-222");
    assert_eq!(
        screen(&mut healthy, &ids, &unknown, "NVIDIA_VISIBLE_DEVICES"),
        Ok(Vec::new())
    );
    assert_eq!(healthy.gpus.len(), 2);
}
