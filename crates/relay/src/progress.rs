//! Progress of the long-running file commands (`recover`, `inspect` over large binlog
//! files): one line on stderr, redrawn in place, with the bytes read of the total, the row
//! events read and the read rate.
//!
//! Shown only when stderr is a terminal (and `TERM` is not `dumb`): a script, a pipe or a
//! log file sees no progress bytes at all, so the commands' output stays machine-readable.
//! Drawing is throttled ([`REDRAW_INTERVAL`]) and the line is cleared when the command is
//! done, so the summary printed afterwards stands alone.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Least time between two redraws: enough for a person, nothing for the read loop.
pub const REDRAW_INTERVAL: Duration = Duration::from_millis(200);

/// Where a long read stands, for [`render_progress`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressSnapshot {
    /// Bytes of the files read so far.
    pub bytes_read: u64,
    /// Total size of the files (0: unknown, shown without a percentage).
    pub total_bytes: u64,
    /// Row events of watched tables read so far.
    pub events: u64,
    /// Time since the read started, for the rate.
    pub elapsed: Duration,
}

/// `1536` -> `1.5 KiB`: binary units, one decimal.
fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The progress line, e.g. `publishing: 12.3 MiB of 40.0 MiB (30%), 1234 events, 5.1 MiB/s`.
pub fn render_progress(label: &str, snapshot: &ProgressSnapshot) -> String {
    let seconds = snapshot.elapsed.as_secs_f64();
    // A read that counts rows or records, not file bytes (`audit`): the count and its rate.
    if snapshot.bytes_read == 0 && snapshot.total_bytes == 0 {
        let mut line = format!("{label}: {} read", snapshot.events);
        if seconds > 0.0 {
            line.push_str(&format!(", {:.0}/s", snapshot.events as f64 / seconds));
        }
        return line;
    }
    let mut line = format!("{label}: {}", human_bytes(snapshot.bytes_read as f64));
    if snapshot.total_bytes > 0 {
        let percent = (snapshot.bytes_read.min(snapshot.total_bytes) as f64 * 100.0
            / snapshot.total_bytes as f64)
            .floor();
        line.push_str(&format!(
            " of {} ({percent:.0}%)",
            human_bytes(snapshot.total_bytes as f64)
        ));
    }
    line.push_str(&format!(", {} events", snapshot.events));
    if seconds > 0.0 {
        line.push_str(&format!(
            ", {}/s",
            human_bytes(snapshot.bytes_read as f64 / seconds)
        ));
    }
    line
}

/// A progress line on stderr while a command reads files; inert when stderr is not a
/// terminal.
pub struct FileProgress {
    /// Where to draw; `None`: not on a terminal, draw nothing.
    terminal: Option<Box<dyn Write + Send>>,
    /// Shown before the numbers (which pass of the command this is).
    label: String,
    /// Total size of the files.
    total_bytes: u64,
    /// When the read started, for the rate.
    started: Instant,
    /// When the line was last drawn (`None`: not yet, so the first update draws at once).
    last_drawn: Option<Instant>,
}

impl FileProgress {
    /// Progress on stderr if it is a terminal (and `TERM` is not `dumb`), else inert.
    pub fn on_stderr(label: &str, total_bytes: u64) -> FileProgress {
        let dumb = std::env::var("TERM").is_ok_and(|term| term == "dumb");
        let terminal: Option<Box<dyn Write + Send>> = if std::io::stderr().is_terminal() && !dumb {
            Some(Box::new(std::io::stderr()))
        } else {
            None
        };
        FileProgress::new(terminal, label, total_bytes)
    }

    /// Progress drawn on `terminal` (`None`: inert).
    pub fn new(
        terminal: Option<Box<dyn Write + Send>>,
        label: &str,
        total_bytes: u64,
    ) -> FileProgress {
        FileProgress {
            terminal,
            label: label.to_owned(),
            total_bytes,
            started: Instant::now(),
            last_drawn: None,
        }
    }

    /// Starts another pass over the same files: a new label, the rate measured afresh.
    pub fn restart(&mut self, label: &str) {
        self.label = label.to_owned();
        self.started = Instant::now();
        self.last_drawn = None;
    }

    /// Redraws the line if [`REDRAW_INTERVAL`] passed since the last time (or it was never
    /// drawn). A failing terminal write turns the progress off, never the command.
    pub fn update(&mut self, bytes_read: u64, events: u64) {
        let Some(terminal) = self.terminal.as_mut() else {
            return;
        };
        let now = Instant::now();
        if self
            .last_drawn
            .is_some_and(|at| now.duration_since(at) < REDRAW_INTERVAL)
        {
            return;
        }
        self.last_drawn = Some(now);
        let line = render_progress(
            &self.label,
            &ProgressSnapshot {
                bytes_read,
                total_bytes: self.total_bytes,
                events,
                elapsed: now.duration_since(self.started),
            },
        );
        // `\r` + "erase line": the line is redrawn in place.
        if write!(terminal, "\r\x1b[2K{line}")
            .and_then(|()| terminal.flush())
            .is_err()
        {
            self.terminal = None;
        }
    }

    /// Clears the line (the command's own output follows).
    pub fn finish(&mut self) {
        if let Some(terminal) = self.terminal.as_mut() {
            if self.last_drawn.is_some() {
                let _ = write!(terminal, "\r\x1b[2K").and_then(|()| terminal.flush());
            }
        }
        self.last_drawn = None;
    }
}

impl Drop for FileProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Total size of `files` (a file whose size cannot be read counts 0; opening it reports
/// the error).
pub fn total_size(files: &[std::path::PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|file| std::fs::metadata(file).ok())
        .map(|metadata| metadata.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn renders_bytes_of_total_events_and_rate() {
        let line = render_progress(
            "publishing",
            &ProgressSnapshot {
                bytes_read: 12 * 1024 * 1024 + 300 * 1024,
                total_bytes: 40 * 1024 * 1024,
                events: 1234,
                elapsed: Duration::from_secs(2),
            },
        );
        assert_eq!(
            line,
            "publishing: 12.3 MiB of 40.0 MiB (30%), 1234 events, 6.1 MiB/s"
        );
        let line = render_progress(
            "reading",
            &ProgressSnapshot {
                bytes_read: 512,
                total_bytes: 0,
                events: 0,
                elapsed: Duration::ZERO,
            },
        );
        assert_eq!(line, "reading: 512 B, 0 events");
        // Never above 100 %, even when a file grew while it was read.
        let line = render_progress(
            "x",
            &ProgressSnapshot {
                bytes_read: 3000,
                total_bytes: 2048,
                events: 1,
                elapsed: Duration::from_secs(1),
            },
        );
        assert!(line.contains("of 2.0 KiB (100%)"), "{line}");
        // A count without bytes (the audit's rows and records).
        let line = render_progress(
            "audit: reading the topics",
            &ProgressSnapshot {
                bytes_read: 0,
                total_bytes: 0,
                events: 5000,
                elapsed: Duration::from_secs(2),
            },
        );
        assert_eq!(line, "audit: reading the topics: 5000 read, 2500/s");
    }

    /// A `Write` into a shared buffer, to see what a terminal would get.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn draws_in_place_throttled_and_clears_at_the_end() {
        let captured = Captured::default();
        let mut progress = FileProgress::new(Some(Box::new(captured.clone())), "reading", 4096);
        progress.update(1024, 3);
        // Within the redraw interval: not drawn again.
        progress.update(2048, 5);
        let drawn = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            drawn.starts_with("\r\x1b[2Kreading: 1.0 KiB of 4.0 KiB (25%), 3 events"),
            "{drawn:?}"
        );
        assert_eq!(drawn.matches('\r').count(), 1, "{drawn:?}");
        std::thread::sleep(REDRAW_INTERVAL);
        progress.update(4096, 9);
        progress.finish();
        let drawn = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            drawn.contains("4.0 KiB of 4.0 KiB (100%), 9 events"),
            "{drawn:?}"
        );
        assert!(drawn.ends_with("\r\x1b[2K"), "{drawn:?}");
    }

    #[test]
    fn draws_nothing_without_a_terminal() {
        let mut progress = FileProgress::new(None, "reading", 4096);
        progress.update(1024, 3);
        progress.finish();
        assert!(progress.terminal.is_none());
    }
}
