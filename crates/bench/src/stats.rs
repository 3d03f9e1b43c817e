//! Process accounting from `/proc`: CPU seconds and peak RSS of a process (this one or a
//! child), and percentiles.

use anyhow::{Context, Result};

/// Clock ticks per second of `/proc/PID/stat` (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// CPU and memory of one process at one moment.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct ProcessSample {
    /// User + system CPU seconds of all its threads so far.
    pub cpu_seconds: f64,
    /// Peak resident set size so far (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
}

/// This process's own CPU seconds (microsecond resolution, `getrusage`) and peak RSS: the
/// child modes' self-report, where `/proc`'s 10 ms ticks would round a short run to 0.
pub fn sample_self() -> Result<ProcessSample> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which points to
    // memory of that type; the return value says whether it did.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if status != 0 {
        anyhow::bail!("getrusage failed: {}", std::io::Error::last_os_error());
    }
    // SAFETY: getrusage returned 0, so it filled the struct (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    let peak_rss_bytes = sample(None)?.peak_rss_bytes;
    Ok(ProcessSample {
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_rss_bytes,
    })
}

/// Samples `/proc/PID` (`pid = None`: this process).
pub fn sample(pid: Option<u32>) -> Result<ProcessSample> {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}"),
        None => "/proc/self".to_string(),
    };
    let stat = std::fs::read_to_string(format!("{dir}/stat"))
        .with_context(|| format!("reading {dir}/stat"))?;
    // The command name may hold spaces: the fields after it start at `state` (field 3);
    // utime and stime are fields 14 and 15.
    let after_name = stat
        .rfind(')')
        .and_then(|at| stat.get(at + 2..))
        .with_context(|| format!("{dir}/stat has no command name: {stat}"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| -> Result<u64> {
        fields
            .get(index)
            .and_then(|field| field.parse::<u64>().ok())
            .with_context(|| format!("{dir}/stat field {} unreadable: {stat}", index + 3))
    };
    let cpu_seconds = (ticks(11)? + ticks(12)?) as f64 / CLOCK_TICKS_PER_SECOND;
    let status = std::fs::read_to_string(format!("{dir}/status"))
        .with_context(|| format!("reading {dir}/status"))?;
    let peak_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .with_context(|| format!("{dir}/status has no VmHWM"))?;
    Ok(ProcessSample {
        cpu_seconds,
        peak_rss_bytes: peak_kib * 1024,
    })
}

/// The `quantile` (0..=1) of `sorted` (ascending), nearest rank; `None` when empty.
pub fn quantile(sorted: &[f64], quantile: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median of `values` (any order); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return None;
    }
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 0 {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_and_memory() {
        let mut spin = 0u64;
        for i in 0..2_000_000u64 {
            spin = spin.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(spin, 1);
        let from_proc = sample(None).expect("/proc/self");
        assert!(from_proc.peak_rss_bytes > 1 << 20, "{from_proc:?}");
        let own = sample_self().expect("getrusage");
        assert!(own.cpu_seconds > 0.0, "{own:?}");
        assert!(
            own.peak_rss_bytes >= from_proc.peak_rss_bytes,
            "{own:?} {from_proc:?}"
        );
    }

    #[test]
    fn quantiles_and_medians() {
        let sorted: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&sorted, 0.5), Some(500.0));
        assert_eq!(quantile(&sorted, 0.99), Some(990.0));
        assert_eq!(quantile(&sorted, 0.999), Some(999.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
