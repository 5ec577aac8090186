//! The order of a start's effects, and what each failure releases, on a recording fake.

use super::*;

/// What the fake was asked, in order.
#[derive(Default)]
struct Fake {
    said: Vec<&'static str>,
    leases: Option<bool>,
    lock: bool,
    record: bool,
    fails: bool,
}

impl Fake {
    fn new() -> Fake {
        Fake {
            leases: Some(true),
            lock: true,
            record: true,
            ..Fake::default()
        }
    }
}

impl StartSteps for Fake {
    type Leases = ();
    type Lock = ();
    type Record = ();

    fn take_leases(&mut self) -> Result<Option<()>, LifecycleError> {
        self.said.push("leases");
        match self.leases {
            Some(true) => Ok(Some(())),
            Some(false) => Ok(None),
            None => Err(LifecycleError::State(StateError::Raced(PathBuf::from(
                "/x",
            )))),
        }
    }
    fn lock(&mut self) -> Option<()> {
        self.said.push("lock");
        self.lock.then_some(())
    }
    fn open_record(&mut self, _: &()) -> Option<()> {
        self.said.push("record");
        self.record.then_some(())
    }
    fn set_up(&mut self, record: Option<&()>) -> Result<Trace, Failed> {
        self.said.push(match record {
            Some(()) => "set-up journaled",
            None => "set-up",
        });
        match self.fails {
            false => Ok(Trace::default()),
            true => Err(Failed {
                error: SetupError::ReadOnlyRunning {
                    missing: PathBuf::from("/usr/bin/nvidia-smi"),
                },
                made: Trace::default(),
            }),
        }
    }
    fn save(&mut self, _: &(), _: (), _: &Trace) {
        self.said.push("save");
    }
    fn leave(&mut self) {
        self.said.push("leave");
    }
    fn take_back(&mut self, lock: Option<&()>, record: Option<()>, _: &Trace) {
        self.said.push(match (lock, record) {
            (Some(()), Some(())) => "take back, remove the record",
            (Some(()), None) => "take back",
            (None, _) => "take back unlocked",
        });
    }
    fn unlock(&mut self, _: ()) {
        self.said.push("unlock");
    }
    fn release(&mut self, _: ()) {
        self.said.push("release");
    }
}

#[test]
fn leases_come_before_anything_is_made_and_the_lock_before_the_record() {
    let mut fake = Fake::new();
    start(&mut fake, true).unwrap();
    assert_eq!(
        fake.said,
        [
            "leases",
            "lock",
            "record",
            "set-up journaled",
            "save",
            "unlock"
        ]
    );
}

#[test]
fn a_failed_set_up_takes_back_what_it_made_then_unlocks_then_releases_its_leases() {
    let mut fake = Fake {
        fails: true,
        ..Fake::new()
    };
    let err = start(&mut fake, true).unwrap_err();
    assert!(matches!(err, LifecycleError::Setup(_)), "{err}");
    assert_eq!(
        fake.said,
        [
            "leases",
            "lock",
            "record",
            "set-up journaled",
            "leave",
            "take back, remove the record",
            "unlock",
            "release"
        ]
    );
}

#[test]
fn a_refused_lease_makes_nothing_and_takes_no_lock() {
    let mut fake = Fake {
        leases: None,
        ..Fake::new()
    };
    assert!(start(&mut fake, true).is_err());
    assert_eq!(fake.said, ["leases"]);
}

#[test]
fn a_container_that_keeps_no_record_takes_the_lock_only_to_take_back_a_failure() {
    let mut fake = Fake::new();
    start(&mut fake, false).unwrap();
    assert_eq!(fake.said, ["leases", "set-up"]);

    let mut fake = Fake {
        fails: true,
        leases: Some(false),
        ..Fake::new()
    };
    assert!(start(&mut fake, false).is_err());
    // No lease was taken: none to give back.
    assert_eq!(
        fake.said,
        ["leases", "set-up", "leave", "lock", "take back", "unlock"]
    );
}

#[test]
fn without_the_lock_or_the_record_a_start_goes_on_and_still_takes_back_a_failure() {
    let mut fake = Fake {
        record: false,
        ..Fake::new()
    };
    start(&mut fake, true).unwrap();
    assert_eq!(fake.said, ["leases", "lock", "record", "set-up", "unlock"]);

    let mut fake = Fake {
        lock: false,
        fails: true,
        ..Fake::new()
    };
    assert!(start(&mut fake, true).is_err());
    assert_eq!(
        fake.said,
        [
            "leases",
            "lock",
            "set-up",
            "leave",
            "lock",
            "take back unlocked",
            "release"
        ]
    );
}
