use super::*;

const GPU: &str = "GPU-11111111-2222-3333-4444-555555555555";
const GPU_B: &str = "GPU-bbbbbbbb-2222-3333-4444-555555555555";

fn holder(container: &str, pid: i32, exclusive: Option<ExclusiveBy>) -> Holder {
    Holder {
        container: container.into(),
        pid,
        start_time: (1000 + i64::from(pid)) as u64,
        since: 1_795_000_000,
        exclusive,
    }
}

fn gpus(uuids: &[&str]) -> Vec<LeasedGpu> {
    uuids
        .iter()
        .enumerate()
        .map(|(index, uuid)| LeasedGpu {
            index: index as u32,
            uuid: uuid.to_string(),
        })
        .collect()
}

fn file(holder: Holder, uuids: &[&str]) -> LeaseFile {
    LeaseFile {
        version: LEASE_VERSION,
        holder,
        gpus: gpus(uuids),
    }
}

const GPU0: GpuRef = GpuRef {
    index: 0,
    uuid: GPU,
};
const GPU1: GpuRef = GpuRef {
    index: 1,
    uuid: GPU_B,
};

#[test]
fn a_lease_file_round_trips() {
    let f = file(holder("a", 10, Some(ExclusiveBy::Env)), &[GPU, GPU_B]);
    assert_eq!(parse(&render(&f), "a").unwrap(), f);
    let shared = file(holder("b", 11, None), &[GPU]);
    assert_eq!(parse(&render(&shared), "b").unwrap(), shared);
}

#[test]
fn garbage_is_refused_with_the_reason() {
    let ok = || file(holder("a", 5, None), &[GPU]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        ("not json", b"\x00\xffgarbage".to_vec()),
        ("unknown key", {
            let mut v: serde_json::Value = serde_json::from_slice(&render(&ok())).unwrap();
            v["more"] = 1.into();
            v.to_string().into_bytes()
        }),
        ("version", render(&LeaseFile { version: 3, ..ok() })),
        ("version 1, one file per GPU", br#"{"version":1,"gpu":"GPU-1","index":0,"holders":[]}"#.to_vec()),
        ("other container", render(&file(holder("b", 5, None), &[GPU]))),
        ("pid 0", render(&file(holder("a", 0, None), &[GPU]))),
        ("negative pid", render(&file(holder("a", -5, None), &[GPU]))),
        ("start time 0", render(&file(Holder { start_time: 0, ..holder("a", 5, None) }, &[GPU]))),
        ("bad uuid", render(&file(holder("a", 5, None), &[GPU, "../x"]))),
        ("too many", render(&LeaseFile { gpus: (0..=MAX_GPUS).map(|i| LeasedGpu { index: i as u32, uuid: format!("GPU-{i}") }).collect(), ..ok() })),
        ("bad mode", br#"{"version":2,"holder":{"container":"a","pid":1,"startTime":1,"since":1,"exclusive":"always"},"gpus":[]}"#.to_vec()),
    ];
    for (what, bytes) in cases {
        assert!(parse(&bytes, "a").is_err(), "{what}");
    }
    // The container a file names must be its name's.
    assert!(matches!(
        parse(&render(&ok()), "b"),
        Err(LeaseFileError::WrongContainer { .. })
    ));
    // A holder id that could not be a file name is refused whatever the name.
    for bad in ["../a", "", "a\nb"] {
        assert!(matches!(
            parse(&render(&file(holder(bad, 5, None), &[GPU])), bad),
            Err(LeaseFileError::BadHolder)
        ));
    }
}

#[test]
fn names_in_the_folder_are_told_apart() {
    assert_eq!(file_name("abc123", true), "abc123.lease");
    assert_eq!(file_name("abc123", false), "abc123.shared-lease");
    assert_eq!(entry("abc123.shared-lease"), Entry::Shared("abc123"));
    assert_eq!(entry("a.shared.shared-lease"), Entry::Shared("a.shared"));
    // An id may end in `.shared`: its exclusive file is still told apart.
    assert_eq!(
        entry(&file_name("a.shared", true)),
        Entry::Lease("a.shared")
    );
    assert_eq!(entry(".shared-lease"), Entry::Other);
    assert_eq!(entry("a b.shared-lease"), Entry::Other);
    assert_eq!(entry("abc123.lease"), Entry::Lease("abc123"));
    assert_eq!(entry("a.b.lease"), Entry::Lease("a.b"));
    // An id may start with a dot or look like the lock: its file is still its own.
    assert_eq!(entry(&file_name(".lock", true)), Entry::Lease(".lock"));
    assert_eq!(entry(&file_name("..", true)), Entry::Lease(".."));
    assert_eq!(entry(&file_name("..", false)), Entry::Shared(".."));
    assert_eq!(entry(".lock"), Entry::Lock);
    assert_eq!(entry(".lease"), Entry::Other);
    assert_eq!(entry("a b.lease"), Entry::Other);
    // A temporary file of a lease file (files::write_atomic's names).
    assert_eq!(
        entry(".abc123.lease.4242-987654.0123456789abcdef.nvc-tmp"),
        Entry::Other
    );
    // Version 1: one file per GPU, named after its UUID.
    assert_eq!(entry(GPU), Entry::Earlier);
    assert_eq!(
        entry("MIG-11111111-2222-3333-4444-555555555555"),
        Entry::Earlier
    );
    assert_eq!(entry("notes"), Entry::Other);
    assert_eq!(entry("GPU-../x"), Entry::Other);
}

#[test]
fn container_ids_and_uuids_are_checked() {
    assert!(valid_container_id("abc123"));
    assert!(valid_container_id("nvc-lease_a.b+c"));
    assert!(!valid_container_id(""));
    assert!(!valid_container_id("a b"));
    assert!(!valid_container_id("a/b"));
    assert!(!valid_container_id(&"a".repeat(MAX_CONTAINER_ID + 1)));
    assert!(valid_gpu_uuid(GPU));
    assert!(!valid_gpu_uuid("../GPU"));
    assert!(!valid_gpu_uuid(".lock"));
    assert!(!valid_gpu_uuid("-x"));
    assert!(!valid_gpu_uuid(""));
}

#[test]
fn the_largest_lease_file_fits_the_read_limit() {
    let f = LeaseFile {
        version: LEASE_VERSION,
        holder: holder(&"c".repeat(MAX_CONTAINER_ID), i32::MAX, None),
        gpus: (0..MAX_GPUS)
            .map(|i| LeasedGpu {
                index: u32::MAX - i as u32,
                uuid: format!("GPU-{i:0>124}"),
            })
            .collect(),
    };
    assert!(f.gpus.iter().all(|g| g.uuid.len() == 128));
    let bytes = render(&f);
    assert!(bytes.len() as u64 <= MAX_LEASE_BYTES, "{}", bytes.len());
    assert_eq!(parse(&bytes, &f.holder.container).unwrap(), f);
}

#[test]
fn proc_stat_is_read_after_the_last_parenthesis() {
    let line = "4242 (sle ep) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 \
                2297856 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
    assert_eq!(
        parse_proc_stat(line),
        Some(ProcStat {
            state: 'S',
            start_time: 987654
        })
    );
    assert_eq!(parse_proc_stat("4242 (x) S 1 2"), None);
    assert_eq!(parse_proc_stat("garbage"), None);
    // This process's own line parses.
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(parse_proc_stat(&own).unwrap().start_time > 0);
}

#[test]
fn liveness_needs_the_same_start_time_and_no_zombie() {
    let h = holder("a", 10, None);
    let stat = |state, start_time| Some(ProcStat { state, start_time });
    assert_eq!(liveness(&h, stat('S', h.start_time)), Liveness::Live);
    assert_eq!(liveness(&h, stat('R', h.start_time)), Liveness::Live);
    assert_eq!(liveness(&h, stat('S', h.start_time + 1)), Liveness::Reused);
    assert_eq!(liveness(&h, stat('Z', h.start_time)), Liveness::Gone);
    assert_eq!(liveness(&h, None), Liveness::Gone);
}

#[test]
fn exclusive_holders_refuse_everyone_naming_themselves() {
    let others = [file(holder("abc123", 10, Some(ExclusiveBy::Env)), &[GPU])];
    for exclusive in [None, Some(ExclusiveBy::Annotation)] {
        let err = claim(&holder("b", 11, exclusive), &[GPU0], &others).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "GPU 0 ({GPU}) is held exclusively by container abc123 since \
                 2026-11-18 11:06:40 UTC (NVC_EXCLUSIVE); stop it or ask for another GPU"
            )
        );
    }
    // The GPU is told by its UUID, whatever index the holder saw; the index named is
    // the request's.
    let elsewhere = [LeaseFile {
        gpus: vec![LeasedGpu {
            index: 7,
            uuid: GPU_B.into(),
        }],
        ..others[0].clone()
    }];
    let err = claim(&holder("b", 11, None), &[GPU0, GPU1], &elsewhere).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("GPU 1 ({GPU_B}) is held exclusively")),
        "{err}"
    );
    assert!(claim(&holder("b", 11, None), &[GPU0], &elsewhere).is_ok());
}

#[test]
fn an_exclusive_request_is_refused_on_a_shared_gpu() {
    let others = [file(holder("shared1", 10, None), &[GPU_B, GPU])];
    let err = claim(
        &holder("b", 11, Some(ExclusiveBy::Config)),
        &[GPU0],
        &others,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "GPU 0 ({GPU}) is in use by container shared1 since 2026-11-18 11:06:40 UTC, and \
             requests.exclusive in the nvc config asks for it alone; stop that container or \
             ask for another GPU"
        )
    );
}

#[test]
fn shared_requests_share() {
    let others = [
        file(holder("s1", 10, None), &[GPU]),
        file(holder("s2", 12, None), &[GPU, GPU_B]),
    ];
    let me = holder("s3", 11, None);
    let got = claim(&me, &[GPU0, GPU1], &others).unwrap();
    assert_eq!(got, file(me, &[GPU, GPU_B]));
}

#[test]
fn the_earliest_holder_is_named_and_exclusive_ones_first() {
    let early = Holder {
        since: 1,
        ..holder("early", 10, None)
    };
    let late_exclusive = Holder {
        since: 2,
        ..holder("late", 12, Some(ExclusiveBy::Env))
    };
    let others = [
        file(holder("later", 13, None), &[GPU]),
        file(late_exclusive, &[GPU]),
        file(early, &[GPU]),
    ];
    let err = claim(&holder("me", 11, Some(ExclusiveBy::Env)), &[GPU0], &others).unwrap_err();
    assert!(matches!(err, Conflict::HeldExclusively { ref holder, .. } if holder == "late"));
    let err = claim(
        &holder("me", 11, Some(ExclusiveBy::Env)),
        &[GPU0],
        &[others[0].clone(), others[2].clone()],
    )
    .unwrap_err();
    assert!(matches!(err, Conflict::InUse { ref holder, .. } if holder == "early"));
}

#[test]
fn the_same_container_or_process_is_no_conflict() {
    let me = holder("a", 10, Some(ExclusiveBy::Env));
    // The same id (a container restarted under it) or the same process.
    let earlier = [
        file(holder("a", 9, Some(ExclusiveBy::Env)), &[GPU]),
        file(
            Holder {
                container: "renamed".into(),
                ..me.clone()
            },
            &[GPU],
        ),
    ];
    assert!(supersedes(&me, &earlier[0].holder));
    assert!(supersedes(&me, &earlier[1].holder));
    assert!(!supersedes(&me, &holder("b", 11, None)));
    assert_eq!(
        claim(&me, &[GPU0], &earlier).unwrap(),
        file(me.clone(), &[GPU])
    );
    assert!(is_own(&file(me.clone(), &[GPU]), &me));
    assert!(!is_own(&earlier[0], &me));
    assert!(!is_own(&earlier[1], &me));
}

#[test]
fn utc_formats_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_795_667_412), "2026-11-26 04:30:12 UTC");
}
