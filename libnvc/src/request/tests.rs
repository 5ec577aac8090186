//! Tests of reading a container's request: device lists, capabilities, requirements,
//! annotations and the privilege policy.

use super::*;
use crate::require::{self, RequireError};
use crate::version::Version;

#[test]
fn errors_quote_long_values_by_their_start_and_length() {
    let policy = RequestPolicy::default();
    let long = format!("0,{}", "é".repeat(300_000));
    let env = format!("NVIDIA_VISIBLE_DEVICES={long}");
    let err = Request::from_env([env.as_str()], &policy).unwrap_err();
    let text = err.to_string();
    assert!(text.len() < 1024, "{} bytes", text.len());
    assert!(
        text.contains(&format!("({} bytes)", long.len() - 2)),
        "{text}"
    );
    assert!(
        text.starts_with("NVIDIA_VISIBLE_DEVICES: unknown device"),
        "{text}"
    );
    let mixed = format!("all,{}", "1,".repeat(10_000));
    let env = format!("NVIDIA_VISIBLE_DEVICES={mixed}");
    let text = Request::from_env([env.as_str()], &policy)
        .unwrap_err()
        .to_string();
    assert!(text.len() < 1024 && text.contains("bytes)"), "{text}");
    assert_eq!(excerpt("0,1"), "0,1");
}

use crate::report::error_chain as chain;

fn req(env: &[&str]) -> Result<Request, RequestError> {
    Request::from_env(env.iter().copied(), &RequestPolicy::default())
}

fn req_with(env: &[&str], policy: &RequestPolicy) -> Result<Request, RequestError> {
    Request::from_env(env.iter().copied(), policy)
}

fn privileged() -> RequestPolicy {
    RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    }
}

fn caps(list: &str) -> CapabilitySet {
    CapabilitySet::parse_list(list).unwrap()
}

use DeviceId::{BusId, GpuUuid, Index, MigIndex, MigUuid};

const UUID: &str = "2c1b9b6e-1b6d-4e4a-9a0b-0123456789ab";
const UUID_UPPER: &str = "2C1B9B6E-1B6D-4E4A-9A0B-0123456789AB";

fn gpu(uuid: &str) -> DeviceId {
    GpuUuid(format!("GPU-{uuid}"))
}

fn mig(uuid: &str) -> DeviceId {
    MigUuid(format!("MIG-{uuid}"))
}

fn bus(s: &str) -> DeviceId {
    BusId(s.to_string())
}

enum Want {
    Sel(DeviceSelection),
    Err(&'static str),
}

fn list(ids: Vec<DeviceId>) -> Want {
    Want::Sel(DeviceSelection::List(ids))
}

#[test]
fn visible_devices() {
    use DeviceSelection as S;
    let up = format!("GPU-{UUID_UPPER}");
    let mig_up = format!("MIG-{UUID_UPPER}");
    let old_mig = format!("MIG-GPU-{UUID_UPPER}/1/0");
    let two = format!("GPU-{UUID},0");
    let dup_uuid = format!("GPU-{UUID}, gpu-{UUID_UPPER}");
    let bad_uuid_short = "GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789a".to_string();
    let bad_uuid_hex = "GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789ag".to_string();
    let bad_uuid_groups = "GPU-2c1b9b6e1b6d-4e4a-9a0b-0123456789abcd".to_string();
    let bad_old_mig = format!("MIG-GPU-{UUID}/1");
    let bad_old_mig2 = format!("MIG-GPU-{UUID}/a/0");
    let cases: Vec<(&str, Want)> = vec![
        // keywords and emptiness
        ("all", Want::Sel(S::All)),
        (" all ", Want::Sel(S::All)),
        ("all,", Want::Sel(S::All)),
        ("none", Want::Sel(S::None)),
        ("void", Want::Sel(S::NotRequested)),
        ("", Want::Sel(S::NotRequested)),
        ("  ", Want::Sel(S::NotRequested)),
        (",,", Want::Sel(S::NotRequested)),
        // indices
        ("0", list(vec![Index(0)])),
        ("0,1,2", list(vec![Index(0), Index(1), Index(2)])),
        (" 1 , 0 ", list(vec![Index(1), Index(0)])),
        ("1,,3,", list(vec![Index(1), Index(3)])),
        ("1,0,1", list(vec![Index(1), Index(0)])),
        ("01", list(vec![Index(1)])),
        ("4096", list(vec![Index(4096)])),
        ("4097", Want::Err("index in \"4097\" is too large (at most 4096)")),
        ("99999999999999999999999", Want::Err("is too large")),
        ("-1", Want::Err("unknown device \"-1\"")),
        ("+1", Want::Err("unknown device \"+1\"")),
        ("1.0", Want::Err("unknown device \"1.0\"")),
        ("0x1", Want::Err("unknown device \"0x1\"")),
        // GPU UUIDs
        (&*two, list(vec![gpu(UUID), Index(0)])),
        (&*up, list(vec![gpu(UUID)])),
        (&*dup_uuid, list(vec![gpu(UUID)])),
        (&*bad_uuid_short, Want::Err("unknown device \"GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789a\"")),
        (&*bad_uuid_hex, Want::Err("unknown device")),
        (&*bad_uuid_groups, Want::Err("unknown device")),
        ("GPU-", Want::Err("unknown device \"GPU-\"")),
        ("gpu0", Want::Err("unknown device \"gpu0\" (expected an index, GPU-<uuid>, a PCI bus id such as 0000:06:00.0, <gpu>:<mig>, MIG-<uuid>, all, none or void)")),
        // MIG UUIDs
        (&*mig_up, list(vec![mig(UUID)])),
        (&*old_mig, list(vec![MigUuid(format!("MIG-GPU-{UUID}/1/0"))])),
        (&*bad_old_mig, Want::Err("unknown device")),
        (&*bad_old_mig2, Want::Err("unknown device")),
        ("MIG-", Want::Err("unknown device \"MIG-\"")),
        // PCI bus ids
        ("06:00.0", list(vec![bus("0000:06:00.0")])),
        ("0000:06:00.0", list(vec![bus("0000:06:00.0")])),
        ("00000000:06:00.0", list(vec![bus("0000:06:00.0")])),
        ("0000:AF:1F.7", list(vec![bus("0000:af:1f.7")])),
        ("0001:3b:00.0", list(vec![bus("0001:3b:00.0")])),
        ("00010000:3b:00.0", list(vec![bus("00010000:3b:00.0")])),
        ("00051615:3B:00.1", list(vec![bus("00051615:3b:00.1")])),
        ("06:00.0,0000:06:00.0,00000000:06:00.0", list(vec![bus("0000:06:00.0")])),
        ("000:06:00.0", Want::Err("unknown device \"000:06:00.0\"")),
        ("0000:6:00.0", Want::Err("unknown device")),
        ("0000:06:20.0", Want::Err("unknown device")),
        ("0000:06:00.8", Want::Err("unknown device")),
        ("0000:06:00", Want::Err("unknown device")),
        ("0000:gg:00.0", Want::Err("unknown device")),
        // MIG indices
        ("0:1", list(vec![MigIndex { gpu: 0, mig: 1 }])),
        ("0:0,0:1,1:0,0:0", list(vec![MigIndex { gpu: 0, mig: 0 }, MigIndex { gpu: 0, mig: 1 }, MigIndex { gpu: 1, mig: 0 }])),
        ("0,0:0", list(vec![Index(0), MigIndex { gpu: 0, mig: 0 }])),
        ("0:4097", Want::Err("index in \"0:4097\" is too large")),
        ("0:", Want::Err("unknown device \"0:\"")),
        (":1", Want::Err("unknown device \":1\"")),
        ("0:1:2", Want::Err("unknown device \"0:1:2\"")),
        ("a:1", Want::Err("unknown device \"a:1\"")),
        // keywords mixed into lists
        ("all,0", Want::Err("\"all\" cannot be combined with other items in \"all,0\"")),
        ("0, none", Want::Err("\"none\" cannot be combined")),
        ("void,1", Want::Err("\"void\" cannot be combined")),
        ("all,all", Want::Err("\"all\" cannot be combined")),
        ("ALL", Want::Err("unknown device \"ALL\"")),
    ];
    assert!(cases.len() >= 40);
    for (value, want) in cases {
        let env = format!("NVIDIA_VISIBLE_DEVICES={value}");
        let got = req(&[&env]).map(|r| r.devices);
        match want {
            Want::Sel(sel) => assert_eq!(got, Ok(sel), "{value:?}"),
            Want::Err(text) => {
                let msg = got.expect_err(value).to_string();
                assert!(
                    msg.starts_with("NVIDIA_VISIBLE_DEVICES: "),
                    "{value:?}: {msg}"
                );
                assert!(msg.contains(text), "{value:?}: {msg:?} lacks {text:?}");
            }
        }
    }
}

#[test]
fn device_ids_display_normalised() {
    let r = req(&[&format!(
        "NVIDIA_VISIBLE_DEVICES=3,GPU-{UUID_UPPER},06:00.0,1:2,MIG-{UUID}"
    )])
    .unwrap();
    let DeviceSelection::List(ids) = r.devices else {
        panic!("{:?}", r.devices)
    };
    let shown: Vec<String> = ids.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "3",
            &format!("GPU-{UUID}"),
            "0000:06:00.0",
            "1:2",
            &format!("MIG-{UUID}")
        ]
    );
}

#[test]
fn normalised_device_lists_read_back_the_same() {
    // Every form, written back in its normal form, parses to the same devices; a
    // domain above ffff once lost its leading zeros and no longer read as a bus id.
    let value = format!(
        "3,GPU-{UUID_UPPER},06:00.0,00051615:3b:00.1,0001:af:1f.7,1:2,MIG-{UUID},\
         MIG-GPU-{UUID}/01/2"
    );
    let devices = req(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")])
        .unwrap()
        .devices;
    let DeviceSelection::List(ids) = &devices else {
        panic!("{devices:?}")
    };
    let shown: Vec<String> = ids.iter().map(ToString::to_string).collect();
    assert!(shown.contains(&"00051615:3b:00.1".to_string()), "{shown:?}");
    let again = req(&[&format!("NVIDIA_VISIBLE_DEVICES={}", shown.join(","))])
        .unwrap()
        .devices;
    assert_eq!(again, devices);
}

#[test]
fn unset_means_nothing_requested() {
    let r = req(&["PATH=/usr/bin", "HOME=/root"]).unwrap();
    assert_eq!(r.devices, DeviceSelection::NotRequested);
    assert!(!r.wants_gpu_support());
    assert!(!r.legacy_image);
    assert_eq!(r.capabilities, caps("utility,compute"));
    assert!(r.requirements.is_empty());
    assert!(r.check_requirements);
    assert_eq!(r.mig_config, DeviceSelection::NotRequested);
    assert_eq!(r.mig_monitor, DeviceSelection::NotRequested);
    assert_eq!(r.imex_channels, ChannelSelection::None);
    assert!(req(&["NVIDIA_VISIBLE_DEVICES=none"])
        .unwrap()
        .wants_gpu_support());
    assert!(req(&["NVIDIA_VISIBLE_DEVICES=0"])
        .unwrap()
        .wants_gpu_support());
    assert!(!req(&["NVIDIA_VISIBLE_DEVICES=void"])
        .unwrap()
        .wants_gpu_support());
}

#[test]
fn env_parsing_last_occurrence_wins() {
    let r = req(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_VISIBLE_DEVICES",
        "garbage without equals",
        "NVIDIA_DRIVER_CAPABILITIES=video",
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_DRIVER_CAPABILITIES=graphics",
    ])
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::List(vec![Index(1)]));
    assert_eq!(r.capabilities, caps("graphics"));
    // a later valid value overrides an earlier invalid one
    let r = req(&["NVIDIA_VISIBLE_DEVICES=gpu0", "NVIDIA_VISIBLE_DEVICES=all"]).unwrap();
    assert_eq!(r.devices, DeviceSelection::All);
    // values may contain '='
    let r = req(&["NVIDIA_REQUIRE_CUDA=cuda>=12.0"]).unwrap();
    assert_eq!(
        r.requirements[0].to_string(),
        "NVIDIA_REQUIRE_CUDA=\"cuda>=12.0\""
    );
}

#[test]
fn legacy_images() {
    // CUDA_VERSION without NVIDIA_REQUIRE_CUDA: every GPU, every capability, cuda>=X.Y
    let r = req(&["CUDA_VERSION=12.4.1"]).unwrap();
    assert!(r.legacy_image);
    assert_eq!(r.devices, DeviceSelection::All);
    assert_eq!(r.capabilities, CapabilitySet::all());
    let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["CUDA_VERSION=\"cuda>=12.4\""]);

    let cases: &[(&str, &str)] = &[
        ("9.0.176", "cuda>=9.0"),
        ("10.0.130", "cuda>=10.0"),
        ("11.8", "cuda>=11.8"),
        ("12", "cuda>=12.0"),
        ("v12.2.0", "cuda>=12.2"),
    ];
    for (version, want) in cases {
        let r = req(&[&format!("CUDA_VERSION={version}")]).unwrap();
        assert_eq!(
            r.requirements[0].to_string(),
            format!("CUDA_VERSION=\"{want}\""),
            "{version}"
        );
    }

    for bad in ["12.x", "latest", "12.4-rc1", "."] {
        let err = req(&[&format!("CUDA_VERSION={bad}")]).unwrap_err();
        assert!(
            matches!(err, RequestError::BadCudaVersion { .. }),
            "{bad}: {err}"
        );
        assert!(
            chain(&err).contains(&format!("invalid CUDA_VERSION=\"{bad}\"")),
            "{err}"
        );
    }
    // ... but not when checks are off
    assert!(req(&["CUDA_VERSION=latest", "NVIDIA_DISABLE_REQUIRE=1"]).is_ok());

    // the image's own settings win
    let r = req(&[
        "CUDA_VERSION=12.4.1",
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_DRIVER_CAPABILITIES=compute",
    ])
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::List(vec![Index(1)]));
    assert_eq!(r.capabilities, caps("compute"));
    // set but empty is not unset: nothing requested, default capabilities
    let r = req(&[
        "CUDA_VERSION=12.4.1",
        "NVIDIA_VISIBLE_DEVICES=",
        "NVIDIA_DRIVER_CAPABILITIES=",
    ])
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::NotRequested);
    assert_eq!(r.capabilities, caps("utility,compute"));
    // legacy "all capabilities" means all the host supports
    let policy = RequestPolicy {
        supported_capabilities: caps("utility,compute,video"),
        ..RequestPolicy::default()
    };
    assert_eq!(
        req_with(&["CUDA_VERSION=12.4.1"], &policy)
            .unwrap()
            .capabilities,
        caps("utility,compute,video")
    );

    // NVIDIA_REQUIRE_CUDA set: not legacy
    let r = req(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]).unwrap();
    assert!(!r.legacy_image);
    assert_eq!(r.devices, DeviceSelection::NotRequested);
    assert_eq!(r.capabilities, caps("utility,compute"));
    assert_eq!(r.requirements.len(), 1);
    // NVIDIA_REQUIRE_CUDA empty or CUDA_VERSION empty: as if unset
    assert!(
        req(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA="])
            .unwrap()
            .legacy_image
    );
    assert!(!req(&["CUDA_VERSION="]).unwrap().legacy_image);
}

#[test]
fn unprivileged_containers() {
    let strict = RequestPolicy {
        accept_envvar_unprivileged: false,
        ..RequestPolicy::default()
    };
    // devices from the environment are ignored...
    let r = req_with(&["NVIDIA_VISIBLE_DEVICES=all"], &strict).unwrap();
    assert_eq!(r.devices, DeviceSelection::NotRequested);
    assert!(!r.wants_gpu_support());
    // ...even invalid ones, and the legacy default
    assert!(req_with(&["NVIDIA_VISIBLE_DEVICES=gpu0"], &strict).is_ok());
    assert_eq!(
        req_with(&["CUDA_VERSION=12.4"], &strict).unwrap().devices,
        DeviceSelection::NotRequested
    );
    assert_eq!(
        req_with(&["NVIDIA_IMEX_CHANNELS=0"], &strict)
            .unwrap()
            .imex_channels,
        ChannelSelection::None
    );
    // ...unless the container is privileged
    let strict_privileged = RequestPolicy {
        privileged: true,
        ..strict
    };
    assert_eq!(
        req_with(&["NVIDIA_VISIBLE_DEVICES=all"], &strict_privileged)
            .unwrap()
            .devices,
        DeviceSelection::All
    );
    assert_eq!(
        req_with(&["CUDA_VERSION=12.4"], &strict_privileged)
            .unwrap()
            .devices,
        DeviceSelection::All
    );
    assert_eq!(
        req_with(&["NVIDIA_IMEX_CHANNELS=0"], &strict_privileged)
            .unwrap()
            .imex_channels,
        ChannelSelection::List(vec![0])
    );
    // with the default policy unprivileged containers are honoured
    assert_eq!(
        req(&["NVIDIA_VISIBLE_DEVICES=all"]).unwrap().devices,
        DeviceSelection::All
    );
}

#[test]
fn mig_devices_need_privileges() {
    for var in [MIG_CONFIG_DEVICES, MIG_MONITOR_DEVICES] {
        for (value, want) in [
            ("all", DeviceSelection::All),
            ("none", DeviceSelection::None),
            ("0,1", DeviceSelection::List(vec![Index(0), Index(1)])),
            ("void", DeviceSelection::NotRequested),
            ("", DeviceSelection::NotRequested),
        ] {
            let env = format!("{var}={value}");
            let r = req_with(&["NVIDIA_VISIBLE_DEVICES=all", &env], &privileged()).unwrap();
            let got = if var == MIG_CONFIG_DEVICES {
                &r.mig_config
            } else {
                &r.mig_monitor
            };
            assert_eq!(got, &want, "{env}");

            let unprivileged = req(&["NVIDIA_VISIBLE_DEVICES=all", &env]);
            if want == DeviceSelection::NotRequested {
                assert!(unprivileged.is_ok(), "{env}");
            } else {
                let err = unprivileged.unwrap_err();
                assert_eq!(
                    err,
                    RequestError::NeedsPrivileged {
                        variable: var,
                        value: value.to_string()
                    }
                );
                assert_eq!(
                    err.to_string(),
                    format!("{var}=\"{value}\" needs a privileged container")
                );
            }
        }
        let err = req_with(&[&format!("{var}=0,bogus")], &privileged()).unwrap_err();
        assert_eq!(
            err.to_string().split(" (").next(),
            Some(&*format!("{var}: unknown device \"bogus\""))
        );
    }
}

#[test]
fn driver_capabilities() {
    let cases: &[(&str, Result<&str, &str>)] = &[
        ("compute", Ok("compute")),
        ("compute,utility", Ok("utility,compute")),
        (" video , graphics ", Ok("video,graphics")),
        ("all", Ok("utility,compute,video,graphics,display,ngx,compat32")),
        ("compute,all", Ok("utility,compute,video,graphics,display,ngx,compat32")),
        ("", Ok("utility,compute")),
        (" , ", Ok("utility,compute")),
        ("compute,,", Ok("compute")),
        ("compute,gpu", Err("invalid NVIDIA_DRIVER_CAPABILITIES=\"compute,gpu\": unknown driver capability \"gpu\"")),
        ("Compute", Err("unknown driver capability \"Compute\"")),
    ];
    for (value, want) in cases {
        let got = req(&[&format!("NVIDIA_DRIVER_CAPABILITIES={value}")]);
        match want {
            Ok(w) => assert_eq!(
                got.map(|r| r.capabilities.to_string()).as_deref(),
                Ok(*w),
                "{value:?}"
            ),
            Err(text) => {
                let err = got.unwrap_err();
                assert!(
                    matches!(err, RequestError::UnknownCapability { .. }),
                    "{value:?}"
                );
                assert!(chain(&err).contains(text), "{value:?}: {}", chain(&err));
            }
        }
    }
}

#[test]
fn capabilities_outside_the_policy() {
    let policy = RequestPolicy {
        default_capabilities: caps("utility,compute,video"),
        supported_capabilities: caps("utility,compute,graphics"),
        ..RequestPolicy::default()
    };
    let got = |value: &str| req_with(&[&format!("NVIDIA_DRIVER_CAPABILITIES={value}")], &policy);
    assert_eq!(
        got("all").unwrap().capabilities,
        caps("utility,compute,graphics")
    );
    assert_eq!(got("graphics").unwrap().capabilities, caps("graphics"));
    // a default outside the supported set is trimmed to it, not blamed on the container
    assert_eq!(got("").unwrap().capabilities, caps("utility,compute"));
    let err = got("compute,video").unwrap_err();
    assert_eq!(
        err.to_string(),
        "NVIDIA_DRIVER_CAPABILITIES: capability \"video\" is not supported on this host \
         (supported: utility,compute,graphics)"
    );
    assert!(
        matches!(got("all,display").unwrap_err(), RequestError::UnsupportedCapability { capability, .. } if capability == "display")
    );
    let none = RequestPolicy {
        supported_capabilities: CapabilitySet::empty(),
        ..RequestPolicy::default()
    };
    let err = req_with(&["NVIDIA_DRIVER_CAPABILITIES=compute"], &none).unwrap_err();
    assert!(err.to_string().ends_with("(supported: none)"), "{err}");
    assert_eq!(
        req_with(&[], &none).unwrap().capabilities,
        CapabilitySet::empty()
    );
}

#[test]
fn requirements_are_wired() {
    let r = req(&[
        "NVIDIA_REQUIRE_DRIVER=driver>=535",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471",
        "NVIDIA_REQUIRE_ARCH=arch>=8.0",
        "NVIDIA_REQUIRE_EMPTY=",
        "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
        "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=",
        "NVIDIA_REQUIREMENTS=ignored, not the prefix",
        "NVIDIA_VISIBLE_DEVICES=all",
    ])
    .unwrap();
    let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "NVIDIA_REQUIRE_ARCH=\"arch>=8.0\"",
            "NVIDIA_REQUIRE_CUDA=\"cuda>=12.0 brand=tesla,driver>=470,driver<471\"",
            "NVIDIA_REQUIRE_DRIVER=\"driver>=535\"",
        ]
    );
    assert!(r.check_requirements);

    // a bad requirement names its variable and constraint
    let err = req(&["NVIDIA_REQUIRE_FOO=cuda>=12 bar>=1"]).unwrap_err();
    assert!(matches!(
        err,
        RequestError::Requirement(RequireError::UnknownKey { .. })
    ));
    assert!(
        err.to_string()
            .starts_with("NVIDIA_REQUIRE_FOO: unknown key \"bar\" in \"bar>=1\""),
        "{err}"
    );

    // legacy requirement comes after the image's own
    let r = req(&["CUDA_VERSION=11.8.0", "NVIDIA_REQUIRE_Z=driver>=450"]).unwrap();
    let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "NVIDIA_REQUIRE_Z=\"driver>=450\"",
            "CUDA_VERSION=\"cuda>=11.8\""
        ]
    );
}

#[test]
fn disable_require_values() {
    let cases: &[(&str, Result<bool, ()>)] = &[
        ("1", Ok(true)),
        ("true", Ok(true)),
        ("TRUE", Ok(true)),
        ("yes", Ok(true)),
        ("Yes", Ok(true)),
        ("on", Ok(true)),
        (" on ", Ok(true)),
        ("0", Ok(false)),
        ("false", Ok(false)),
        ("False", Ok(false)),
        ("no", Ok(false)),
        ("off", Ok(false)),
        ("", Ok(false)),
        ("2", Err(())),
        ("enabled", Err(())),
        ("y", Err(())),
    ];
    for (value, want) in cases {
        let env = [
            &*format!("NVIDIA_DISABLE_REQUIRE={value}"),
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        ];
        match want {
            Ok(disabled) => {
                let r = req(&env).unwrap();
                assert_eq!(r.check_requirements, !disabled, "{value:?}");
                assert_eq!(r.requirements.is_empty(), *disabled, "{value:?}");
            }
            Err(()) => {
                let err = req(&env).unwrap_err();
                assert_eq!(
                    err,
                    RequestError::BadDisableRequire {
                        value: value.to_string()
                    }
                );
                assert!(err.to_string().starts_with(&format!(
                    "NVIDIA_DISABLE_REQUIRE: \"{value}\" is not a boolean"
                )));
            }
        }
    }
    // when disabled, malformed requirements are not parsed
    assert!(req(&["NVIDIA_DISABLE_REQUIRE=1", "NVIDIA_REQUIRE_CUDA=cuda>>1"]).is_ok());
    // the policy can disable checks host-wide
    let policy = RequestPolicy {
        disable_require: true,
        ..RequestPolicy::default()
    };
    let r = req_with(
        &["NVIDIA_REQUIRE_CUDA=cuda>>1", "NVIDIA_DISABLE_REQUIRE=0"],
        &policy,
    )
    .unwrap();
    assert!(!r.check_requirements);
    assert!(r.requirements.is_empty());
    // a bad NVIDIA_DISABLE_REQUIRE is an error even then
    assert!(req_with(&["NVIDIA_DISABLE_REQUIRE=maybe"], &policy).is_err());
}

#[test]
fn imex_channels() {
    use ChannelSelection as C;
    let cases: &[(&str, Result<C, &str>)] = &[
        ("all", Ok(C::All)),
        ("none", Ok(C::None)),
        ("void", Ok(C::None)),
        ("", Ok(C::None)),
        ("0", Ok(C::List(vec![0]))),
        ("0, 1,,2", Ok(C::List(vec![0, 1, 2]))),
        ("3,1,3", Ok(C::List(vec![3, 1]))),
        ("65535", Ok(C::List(vec![65535]))),
        ("65536", Err("NVIDIA_IMEX_CHANNELS: channel \"65536\" is too large (at most 65535)")),
        ("99999999999999999999", Err("is too large")),
        ("channel0", Err("NVIDIA_IMEX_CHANNELS: unknown channel \"channel0\" (expected a channel number, all or none)")),
        ("-1", Err("unknown channel \"-1\"")),
        ("0,all", Err("NVIDIA_IMEX_CHANNELS: \"all\" cannot be combined with other items in \"0,all\"")),
        ("none,1", Err("\"none\" cannot be combined")),
    ];
    for (value, want) in cases {
        let got = req(&[&format!("NVIDIA_IMEX_CHANNELS={value}")]).map(|r| r.imex_channels);
        match want {
            Ok(w) => assert_eq!(got.as_ref(), Ok(w), "{value:?}"),
            Err(text) => {
                let msg = got.unwrap_err().to_string();
                assert!(msg.contains(text), "{value:?}: {msg:?} lacks {text:?}");
            }
        }
    }
    assert_eq!(req(&[]).unwrap().imex_channels, C::None);
}

#[test]
fn deterministic_regardless_of_env_order() {
    let env = [
        "NVIDIA_REQUIRE_B=driver>=1",
        "NVIDIA_VISIBLE_DEVICES=1,0",
        "NVIDIA_REQUIRE_A=cuda>=1",
        "NVIDIA_DRIVER_CAPABILITIES=video,compute",
        "NVIDIA_REQUIRE_C=arch>=1",
        "NVIDIA_IMEX_CHANNELS=2,1",
    ];
    let first = req(&env).unwrap();
    let mut reversed = env;
    reversed.reverse();
    assert_eq!(req(&reversed).unwrap(), first);
    let mut rotated = env;
    rotated.rotate_left(2);
    assert_eq!(req(&rotated).unwrap(), first);
    assert_eq!(req(&env).unwrap(), first);
    let names: Vec<&str> = first
        .requirements
        .iter()
        .map(|r| r.variable.as_str())
        .collect();
    assert_eq!(
        names,
        ["NVIDIA_REQUIRE_A", "NVIDIA_REQUIRE_B", "NVIDIA_REQUIRE_C"]
    );
    // list order within a variable is the container's, kept as given
    assert_eq!(
        first.devices,
        DeviceSelection::List(vec![Index(1), Index(0)])
    );
}

/// Facts for checking a request's requirements: an old driver, no GPU.
struct OldDriver;

impl require::Facts for OldDriver {
    fn cuda_version(&self) -> Result<Version, require::FactError> {
        Ok(Version::from_cuda_int(11040))
    }
    fn driver_version(&self) -> Result<Version, require::FactError> {
        "470.57.02"
            .parse()
            .map_err(|e| require::FactError::new(require::Fact::DriverVersion, e))
    }
    fn gpus(&self) -> Result<Vec<require::GpuFacts>, require::FactError> {
        Ok(Vec::new())
    }
}

#[test]
fn verifies_requirements_unless_disabled() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
    ];
    let request = req(&env).unwrap();
    assert!(request.check_requirements);
    let err = require::check(&request.requirements, &OldDriver).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"cuda>=12.0\": requires cuda>=12.0, driver provides 11.4"
    );
    let legacy = req(&["CUDA_VERSION=12.2.0"]).unwrap();
    assert!(legacy.check_requirements);
    assert!(require::check(&legacy.requirements, &OldDriver)
        .unwrap_err()
        .to_string()
        .starts_with("unsatisfied requirement CUDA_VERSION=\"cuda>=12.2\""));
    let met = req(&["NVIDIA_REQUIRE_CUDA=cuda>=11.0"]).unwrap();
    assert!(met.check_requirements);
    assert!(require::check(&met.requirements, &OldDriver).is_ok());
    // Turned off, by the container or by the host: nothing is left to check.
    let disabled = [env[0], env[1], "NVIDIA_DISABLE_REQUIRE=true"];
    let policy = RequestPolicy {
        disable_require: true,
        ..RequestPolicy::default()
    };
    for off in [req(&disabled).unwrap(), req_with(&env, &policy).unwrap()] {
        assert!(!off.check_requirements);
        assert!(off.requirements.is_empty());
        assert!(require::check(&off.requirements, &OldDriver).is_ok());
    }
}

#[test]
fn cdi_names_in_visible_devices() {
    let uuid = "GPU-fa4ed71e-0001-4e57-8fa4-ed71e0000001";
    let cases: &[(&str, Result<DeviceSelection, &str>)] = &[
        (
            "nvidia.com/gpu=1",
            Ok(DeviceSelection::List(vec![Index(1)])),
        ),
        ("nvidia.com/gpu=all", Ok(DeviceSelection::All)),
        (
            "nvidia.com/gpu=0, nvidia.com/gpu=GPU-FA4ED71E-0001-4E57-8FA4-ED71E0000001",
            Ok(DeviceSelection::List(vec![Index(0), GpuUuid(uuid.into())])),
        ),
        (
            "nvidia.com/gpu=0:1",
            Ok(DeviceSelection::List(vec![MigIndex { gpu: 0, mig: 1 }])),
        ),
        // plain and CDI forms mix; duplicates collapse
        (
            "2,nvidia.com/gpu=2,nvidia.com/gpu=0",
            Ok(DeviceSelection::List(vec![Index(2), Index(0)])),
        ),
        // another vendor's devices are not ours
        ("vendor.com/x=1", Ok(DeviceSelection::NotRequested)),
        (
            "vendor.com/x=1,nvidia.com/gpu=1",
            Ok(DeviceSelection::List(vec![Index(1)])),
        ),
        ("nvidia.com/gpu=bogus", Err("unknown device \"bogus\"")),
        ("nvidia.com/gpu=all,1", Err("\"all\" cannot be combined")),
        ("nvidia.com/tpu0=1", Ok(DeviceSelection::NotRequested)),
    ];
    for (value, want) in cases {
        let got = req(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]).map(|r| r.devices);
        match want {
            Ok(w) => assert_eq!(got.as_ref(), Ok(w), "{value:?}"),
            Err(text) => {
                let msg = got.unwrap_err().to_string();
                assert!(msg.contains(text), "{value:?}: {msg}");
            }
        }
    }
}

#[test]
fn cdi_annotations_select_gpus() {
    let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let from = |env: &[&str], a: &BTreeMap<String, String>, p: &RequestPolicy| {
        Request::from_container(env.iter().copied(), a, &[], p).map(|r| r.devices)
    };
    let default = RequestPolicy::default();
    let gpu0 = ann(&[("cdi.k8s.io/x", "nvidia.com/gpu=0")]);
    assert_eq!(
        from(&[], &gpu0, &default),
        Ok(DeviceSelection::List(vec![Index(0)]))
    );
    // several annotations, in key order; other kinds and other prefixes ignored
    let many = ann(&[
        ("cdi.k8s.io/b", "nvidia.com/gpu=2, vendor.com/nic=eth1"),
        ("cdi.k8s.io/a", "nvidia.com/gpu=1"),
        ("io.kubernetes.cri.x", "nvidia.com/gpu=0"),
        ("cdi.k8s.iox", "nvidia.com/gpu=0"),
    ]);
    assert_eq!(
        from(&[], &many, &default),
        Ok(DeviceSelection::List(vec![Index(1), Index(2)]))
    );
    let all = ann(&[
        ("cdi.k8s.io/a", "nvidia.com/gpu=1"),
        ("cdi.k8s.io/b", "nvidia.com/gpu=all"),
    ]);
    assert_eq!(from(&[], &all, &default), Ok(DeviceSelection::All));
    // only other vendors' devices: not a GPU container
    let nic = ann(&[("cdi.k8s.io/a", "vendor.com/nic=eth1")]);
    assert_eq!(from(&[], &nic, &default), Ok(DeviceSelection::NotRequested));
    // the variable decides when set and honoured...
    assert_eq!(
        from(&["NVIDIA_VISIBLE_DEVICES=1"], &gpu0, &default),
        Ok(DeviceSelection::List(vec![Index(1)]))
    );
    // ...and void, what nvc's CDI spec sets, always wins
    let strict = RequestPolicy {
        accept_envvar_unprivileged: false,
        ..RequestPolicy::default()
    };
    for policy in [&default, &strict] {
        assert_eq!(
            from(&["NVIDIA_VISIBLE_DEVICES=void"], &gpu0, policy),
            Ok(DeviceSelection::NotRequested)
        );
    }
    // the annotations obey the same privilege policy as the variables: an
    // unprivileged container under the strict policy gets no GPU from them, with or
    // without the variable, and a malformed one is not even read...
    for env in [&[][..], &["NVIDIA_VISIBLE_DEVICES=all"]] {
        assert_eq!(
            from(env, &gpu0, &strict),
            Ok(DeviceSelection::NotRequested),
            "{env:?}"
        );
    }
    let bogus = ann(&[("cdi.k8s.io/x", "nvidia.com/gpu=bogus")]);
    assert_eq!(
        from(&[], &bogus, &strict),
        Ok(DeviceSelection::NotRequested)
    );
    // ...while a privileged container still gets the annotation's GPUs
    let strict_privileged = RequestPolicy {
        privileged: true,
        ..strict
    };
    assert_eq!(
        from(&[], &gpu0, &strict_privileged),
        Ok(DeviceSelection::List(vec![Index(0)]))
    );
    assert_eq!(
        from(&["NVIDIA_VISIBLE_DEVICES=void"], &gpu0, &strict_privileged),
        Ok(DeviceSelection::NotRequested)
    );
    // a legacy image's implied all gives way to the annotations
    assert_eq!(
        from(&["CUDA_VERSION=12.4"], &gpu0, &default),
        Ok(DeviceSelection::List(vec![Index(0)]))
    );
    for bad in ["nvidia.com/gpu=bogus", "0", "nvidia.com/gpu=none"] {
        let err = from(&[], &ann(&[("cdi.k8s.io/x", bad)]), &default).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "annotation cdi.k8s.io/x: invalid CDI device {bad:?}"
            )),
            "{err}"
        );
    }
}

#[test]
fn default_policy() {
    let p = RequestPolicy::default();
    assert!(!p.privileged);
    assert!(p.accept_envvar_unprivileged);
    assert_eq!(p.default_capabilities, caps("utility,compute"));
    assert_eq!(p.supported_capabilities, CapabilitySet::all());
    assert!(!p.disable_require);
}

#[test]
fn device_mounts_are_read_only_when_accepted_and_then_win() {
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let uuid = "GPU-9e4c2f7a-1b2c-3d4e-5f60-718293a4b5c6";
    let uuid_id = DeviceId::GpuUuid(uuid.to_string());
    let strict = RequestPolicy {
        accept_envvar_unprivileged: false,
        accept_device_mounts: true,
        ..RequestPolicy::default()
    };
    let from = |env: &[&str], mounts: &[&str], policy: &RequestPolicy| {
        Request::from_container(
            env.iter().copied(),
            &BTreeMap::new(),
            &names(mounts),
            policy,
        )
    };
    // The secure setting: the environment is ignored, the mounts are honoured.
    let r = from(&["NVIDIA_VISIBLE_DEVICES=all"], &[uuid, "1"], &strict).unwrap();
    assert_eq!(
        r.devices,
        DeviceSelection::List(vec![uuid_id.clone(), Index(1)])
    );
    assert!(r.from_device_mounts);
    // They win over an accepted environment too (as NVIDIA's toolkit has it), and keep
    // the capabilities the environment asks for.
    let open = RequestPolicy {
        accept_device_mounts: true,
        ..RequestPolicy::default()
    };
    let r = from(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=video",
        ],
        &["all"],
        &open,
    )
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::All);
    assert_eq!(r.capabilities, caps("video"));
    // What NVIDIA's device plugin sets with DEVICE_LIST_STRATEGY=volume-mounts: the
    // variable names the mounts' folder, which is no device; the mounts decide, under
    // either policy.
    for policy in [&open, &strict] {
        let r = from(
            &["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"],
            &[uuid],
            policy,
        )
        .unwrap();
        assert_eq!(r.devices, DeviceSelection::List(vec![uuid_id.clone()]));
    }
    // CDI names and IMEX channels; another vendor's CDI device is not ours.
    let r = from(
        &[],
        &[
            "cdi/nvidia.com/gpu=0",
            "cdi/example.com/fpga=3",
            "imex/2",
            "imex/0",
        ],
        &strict,
    )
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::List(vec![Index(0)]));
    assert_eq!(r.imex_channels, ChannelSelection::List(vec![2, 0]));
    let r = from(&[], &["imex/1"], &strict).unwrap();
    assert_eq!(r.devices, DeviceSelection::None);
    assert!(!from(&[], &["cdi/example.com/fpga=3"], &strict)
        .unwrap()
        .wants_gpu_support());
    // Not accepted: the mounts are ignored and the environment decides.
    let r = from(
        &["NVIDIA_VISIBLE_DEVICES=0"],
        &[uuid],
        &RequestPolicy::default(),
    )
    .unwrap();
    assert_eq!(r.devices, DeviceSelection::List(vec![Index(0)]));
    assert!(!r.from_device_mounts);
    // A mount that names nothing is an error that names it.
    for bad in ["GPU-", "cdi/nvidia.com", "imex/x", "what"] {
        let e = from(&[], &[bad], &strict).unwrap_err();
        assert!(
            matches!(e, RequestError::BadDeviceMount { .. }),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains(bad), "{e}");
    }
}

#[test]
fn device_mount_names_come_only_from_under_the_root() {
    for (destination, want) in [
        ("/var/run/nvidia-container-devices/0", Some("0")),
        ("/var/run/nvidia-container-devices/GPU-1/", Some("GPU-1")),
        (
            "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=all",
            Some("cdi/nvidia.com/gpu=all"),
        ),
        ("/var/run/nvidia-container-devices", None),
        ("/var/run/nvidia-container-devices/", None),
        ("/var/run/nvidia-container-devicesX/0", None),
        ("/var/run/nvidia-container-devices/../0", None),
        ("/var/run/nvidia-container-devices/a//b", None),
        ("/run/nvidia-container-devices/0", None),
    ] {
        assert_eq!(
            device_mount_name(destination).as_deref(),
            want,
            "{destination}"
        );
    }
}

#[test]
fn exclusivity_comes_from_the_variable_the_annotation_or_the_config() {
    let policy = RequestPolicy::default();
    let none = BTreeMap::new();
    let annotated = |v: &str| BTreeMap::from([("nvc.exclusive".to_string(), v.to_string())]);
    let read = |env: &[&str], annotations: &BTreeMap<String, String>, policy: &RequestPolicy| {
        Request::from_container(env.iter().copied(), annotations, &[], policy)
    };
    let gpu = "NVIDIA_VISIBLE_DEVICES=0";
    assert_eq!(read(&[gpu], &none, &policy).unwrap().exclusive, None);
    for on in ["1", "true", "yes", "ON"] {
        let env = format!("NVC_EXCLUSIVE={on}");
        assert_eq!(
            read(&[gpu, &env], &none, &policy).unwrap().exclusive,
            Some(ExclusiveBy::Env)
        );
    }
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=0"], &none, &policy)
            .unwrap()
            .exclusive,
        None
    );
    assert_eq!(
        read(&[gpu], &annotated("true"), &policy).unwrap().exclusive,
        Some(ExclusiveBy::Annotation)
    );
    // The variable, when it asks, is the one named.
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=1"], &annotated("true"), &policy)
            .unwrap()
            .exclusive,
        Some(ExclusiveBy::Env)
    );
    // The config key: no opt-out.
    let config = RequestPolicy {
        exclusive: true,
        ..RequestPolicy::default()
    };
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=0"], &annotated("false"), &config)
            .unwrap()
            .exclusive,
        Some(ExclusiveBy::Config)
    );
    // Bad values name the variable or the annotation.
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=maybe"], &none, &policy).unwrap_err(),
        RequestError::BadExclusive {
            name: "NVC_EXCLUSIVE",
            value: "maybe".into()
        }
    );
    assert!(matches!(
        read(&[gpu], &annotated("sure"), &policy),
        Err(RequestError::BadExclusive {
            name: "nvc.exclusive",
            ..
        })
    ));
    // Unprivileged containers whose variables the config does not accept: ignored.
    let strict = RequestPolicy {
        accept_envvar_unprivileged: false,
        ..RequestPolicy::default()
    };
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=1"], &annotated("true"), &strict)
            .unwrap()
            .exclusive,
        None
    );
    let strict_privileged = RequestPolicy {
        privileged: true,
        ..strict
    };
    assert_eq!(
        read(&[gpu, "NVC_EXCLUSIVE=1"], &none, &strict_privileged)
            .unwrap()
            .exclusive,
        Some(ExclusiveBy::Env)
    );
}
