//! Where a one-shot program's time goes: the phases it marks, one debug line at the end
//! (`set [log] level = "debug"`), for profiling on machines without `strace` or `perf`.

use std::time::Instant;

/// Named phases, each timed from the end of the one before.
#[derive(Debug)]
pub struct Phases {
    what: &'static str,
    start: Instant,
    last: Instant,
    marks: Vec<(&'static str, f64)>,
}

impl Phases {
    /// Starts timing `what` (`prestart`, `set up`).
    pub fn start(what: &'static str) -> Phases {
        let now = Instant::now();
        Phases {
            what,
            start: now,
            last: now,
            marks: Vec::new(),
        }
    }

    /// Ends the phase `name`, which began at the last mark.
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        let ms = (now - self.last).as_secs_f64() * 1e3;
        self.marks.push((name, ms));
        self.last = now;
    }

    /// The line [`Phases::log`] writes: `prestart phases ms: config 0.052 plan 0.411
    /// total 0.463`.
    pub fn line(&self) -> String {
        let mut line = format!("{} phases ms:", self.what);
        for (name, ms) in &self.marks {
            line.push_str(&format!(" {name} {ms:.3}"));
        }
        let total = (self.last - self.start).as_secs_f64() * 1e3;
        line.push_str(&format!(" total {total:.3}"));
        line
    }

    /// Logs [`Phases::line`] at debug level.
    pub fn log(&self) {
        if log::log_enabled!(log::Level::Debug) {
            log::debug!("{}", self.line());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_is_timed_from_the_one_before() {
        let mut phases = Phases::start("prestart");
        phases.mark("config");
        std::thread::sleep(std::time::Duration::from_millis(2));
        phases.mark("plan");
        let line = phases.line();
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(&fields[..3], ["prestart", "phases", "ms:"]);
        assert_eq!(
            (fields[3], fields[5], fields[7]),
            ("config", "plan", "total")
        );
        let plan: f64 = fields[6].parse().unwrap();
        let total: f64 = fields[8].parse().unwrap();
        assert!(plan >= 2.0 && total >= plan, "{line}");
    }
}
