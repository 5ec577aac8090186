//! Medians and ranges of timed runs, and peak memory.

use std::time::Duration;

/// The runs of one configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// Wall-clock time of each run.
    pub times: Vec<Duration>,
    /// Peak resident set of each run's child, in KiB (`ru_maxrss`).
    pub max_rss_kib: Vec<u64>,
    /// CPU time (user + system) of each run.
    pub cpu: Vec<Duration>,
}

impl Samples {
    /// Adds one run.
    pub fn push(&mut self, time: Duration, max_rss_kib: u64, cpu: Duration) {
        self.times.push(time);
        self.max_rss_kib.push(max_rss_kib);
        self.cpu.push(cpu);
    }

    /// Median, min and max of the times; `None` without runs.
    pub fn summary(&self) -> Option<Summary> {
        Summary::of(&self.times)
    }

    /// The median CPU time in milliseconds; NaN without runs.
    pub fn cpu_median_ms(&self) -> f64 {
        Summary::of(&self.cpu).map_or(f64::NAN, |s| s.median_ms)
    }

    /// The largest peak RSS of all runs, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.max_rss_kib.iter().copied().max()
    }
}

/// Median, min and max of some durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median (the mean of the middle two for an even count).
    pub median_ms: f64,
    /// The fastest run.
    pub min_ms: f64,
    /// The slowest run.
    pub max_ms: f64,
    /// How many runs.
    pub count: usize,
}

impl Summary {
    /// The summary of `times`; `None` when empty.
    pub fn of(times: &[Duration]) -> Option<Summary> {
        let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let n = ms.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => ms[n / 2],
            n => (ms[n / 2 - 1] + ms[n / 2]) / 2.0,
        };
        Some(Summary {
            median_ms: median,
            min_ms: ms[0],
            max_ms: ms[n - 1],
            count: n,
        })
    }
}

/// The `p`th percentile (0 to 100) of `times` in milliseconds, by nearest rank: the
/// smallest time at least `p` % of the runs do not exceed. NaN without runs.
pub fn percentile_ms(times: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * ms.len() as f64).ceil() as usize;
    ms.get(rank.clamp(1, ms.len().max(1)) - 1)
        .copied()
        .unwrap_or(f64::NAN)
}

/// The mean of `times` in milliseconds; NaN without runs.
pub fn mean_ms(times: &[Duration]) -> f64 {
    match times.len() {
        0 => f64::NAN,
        n => times.iter().map(Duration::as_nanos).sum::<u128>() as f64 / n as f64 / 1e6,
    }
}

/// Milliseconds with two decimals: `12.34`.
pub fn ms(value: f64) -> String {
    format!("{value:.2}")
}

/// A difference in milliseconds with its sign: `+3.21`, `-0.05`.
pub fn signed_ms(value: f64) -> String {
    format!("{value:+.2}")
}

/// KiB as MiB with one decimal: `5.3 MiB`.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: &[u64]) -> Vec<Duration> {
        ms.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn medians() {
        assert_eq!(Summary::of(&[]), None);
        let odd = Summary::of(&d(&[30, 10, 20])).unwrap();
        assert_eq!(
            (odd.median_ms, odd.min_ms, odd.max_ms, odd.count),
            (20.0, 10.0, 30.0, 3)
        );
        let even = Summary::of(&d(&[4, 1, 3, 2])).unwrap();
        assert_eq!(even.median_ms, 2.5);
        let mut s = Samples::default();
        s.push(Duration::from_millis(1), 100, Duration::from_millis(1));
        s.push(Duration::from_millis(2), 300, Duration::from_millis(3));
        assert_eq!(s.peak_rss_kib(), Some(300));
        assert_eq!(s.cpu_median_ms(), 2.0);
    }

    #[test]
    fn percentiles_and_means() {
        let ten = d(&[10, 1, 9, 2, 8, 3, 7, 4, 6, 5]);
        assert_eq!(percentile_ms(&ten, 90.0), 9.0);
        assert_eq!(percentile_ms(&ten, 50.0), 5.0);
        assert_eq!(percentile_ms(&ten, 100.0), 10.0);
        assert_eq!(percentile_ms(&ten, 0.0), 1.0);
        assert_eq!(percentile_ms(&d(&[4]), 90.0), 4.0);
        assert!(percentile_ms(&[], 90.0).is_nan());
        assert_eq!(mean_ms(&d(&[1, 2, 6])), 3.0);
        assert!(mean_ms(&[]).is_nan());
    }

    #[test]
    fn formats() {
        assert_eq!(ms(12.345_6), "12.35");
        assert_eq!(signed_ms(3.0), "+3.00");
        assert_eq!(signed_ms(-0.051), "-0.05");
        assert_eq!(mib(5 * 1024 + 307), "5.3 MiB");
    }
}
