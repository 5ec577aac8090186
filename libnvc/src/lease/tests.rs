use super::*;

const GPU: &str = "GPU-11111111-2222-3333-4444-555555555555";

fn holder(container: &str, pid: i32, exclusive: Option<ExclusiveBy>) -> Holder {
    Holder {
        container: container.into(),
        pid,
        start_time: (1000 + i64::from(pid)) as u64,
        since: 1_795_000_000,
        exclusive,
    }
}

fn file(holders: Vec<Holder>) -> LeaseFile {
    LeaseFile {
        version: LEASE_VERSION,
        gpu: GPU.into(),
        index: 0,
        holders,
    }
}

const GPU0: GpuRef = GpuRef {
    index: 0,
    uuid: GPU,
};

#[test]
fn a_lease_file_round_trips() {
    let f = file(vec![
        holder("a", 10, Some(ExclusiveBy::Env)),
        holder("b", 11, None),
    ]);
    assert_eq!(parse(&render(&f), GPU).unwrap(), f);
}

#[test]
fn garbage_is_refused_with_the_reason() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        ("not json", b"\x00\xffgarbage".to_vec()),
        ("unknown key", br#"{"version":1,"gpu":"x","index":0,"holders":[],"more":1}"#.to_vec()),
        ("version", render(&LeaseFile { version: 2, ..file(vec![]) })),
        ("other gpu", render(&LeaseFile { gpu: "GPU-other".into(), ..file(vec![]) })),
        ("pid 0", render(&file(vec![holder("a", 0, None)]))),
        ("negative pid", render(&file(vec![holder("a", -5, None)]))),
        ("id with a slash", render(&file(vec![holder("../a", 5, None)]))),
        ("empty id", render(&file(vec![holder("", 5, None)]))),
        ("id with a newline", render(&file(vec![holder("a\nb", 5, None)]))),
        ("start time 0", render(&file(vec![Holder { start_time: 0, ..holder("a", 5, None) }]))),
        ("too many", render(&file((1..=300).map(|i| holder("a", i, None)).collect()))),
        ("bad mode", br#"{"version":1,"gpu":"GPU-11111111-2222-3333-4444-555555555555","index":0,"holders":[{"container":"a","pid":1,"startTime":1,"since":1,"exclusive":"always"}]}"#.to_vec()),
    ];
    for (what, bytes) in cases {
        assert!(parse(&bytes, GPU).is_err(), "{what}");
    }
}

#[test]
fn container_ids_and_uuids_are_checked() {
    assert!(valid_container_id("abc123"));
    assert!(valid_container_id("nvc-lease_a.b+c"));
    assert!(!valid_container_id(""));
    assert!(!valid_container_id("a b"));
    assert!(!valid_container_id(&"a".repeat(MAX_CONTAINER_ID + 1)));
    assert!(valid_gpu_uuid(GPU));
    assert!(!valid_gpu_uuid("../GPU"));
    assert!(!valid_gpu_uuid(".lock"));
    assert!(!valid_gpu_uuid("-x"));
    assert!(!valid_gpu_uuid(""));
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
    let a = holder("abc123", 10, Some(ExclusiveBy::Env));
    let existing = Some(file(vec![a.clone()]));
    for exclusive in [None, Some(ExclusiveBy::Annotation)] {
        let err = claim(existing.clone(), GPU0, &holder("b", 11, exclusive), |_| {
            true
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "GPU 0 ({GPU}) is held exclusively by container abc123 since \
                 2026-11-18 11:06:40 UTC (NVC_EXCLUSIVE); stop it or ask for another GPU"
            )
        );
    }
}

#[test]
fn an_exclusive_request_is_refused_on_a_shared_gpu() {
    let existing = Some(file(vec![holder("shared1", 10, None)]));
    let err = claim(
        existing,
        GPU0,
        &holder("b", 11, Some(ExclusiveBy::Config)),
        |_| true,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("in use by container shared1"), "{text}");
    assert!(
        text.contains("requests.exclusive in the nvc config"),
        "{text}"
    );
}

#[test]
fn shared_requests_share_and_stale_holders_are_dropped() {
    let existing = Some(file(vec![
        holder("s1", 10, None),
        holder("dead", 12, Some(ExclusiveBy::Env)),
    ]));
    let me = holder("s2", 11, None);
    let got = claim(existing, GPU0, &me, |h| h.container != "dead").unwrap();
    assert_eq!(got.holders, vec![holder("s1", 10, None), me.clone()]);
    // Stale holders block no exclusive request either.
    let excl = holder("x", 13, Some(ExclusiveBy::Env));
    let got = claim(Some(got), GPU0, &excl, |h| h.container == "x").unwrap();
    assert_eq!(got.holders, vec![excl]);
}

#[test]
fn the_same_container_or_process_replaces_its_entry() {
    let me = holder("a", 10, Some(ExclusiveBy::Env));
    let got = claim(Some(file(vec![me.clone()])), GPU0, &me, |_| true).unwrap();
    assert_eq!(got.holders, vec![me.clone()]);
    assert_eq!(release(got, &me), None);
    let both = file(vec![holder("s", 9, None), me.clone()]);
    assert_eq!(
        release(both, &me).unwrap().holders,
        vec![holder("s", 9, None)]
    );
}

#[test]
fn utc_formats_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_795_667_412), "2026-11-26 04:30:12 UTC");
}
