//! Crash points for failure tests: places where the process can be made to die on purpose,
//! like `kill -9` but at an exact step of the delivery protocol.
//!
//! Shared by the relay's pipeline and the Kafka sinks (one armed point per process; the
//! relay re-exports this module as `outbox_relay::crash_points`).
//!
//! A test sets `OUTBOX_RELAY_CRASH_AT` to one of the names of [`CrashPoint`] before starting
//! the `outbox-relay` binary; the first time the relay reaches that step it logs one line and
//! calls [`std::process::abort`] (no destructors, no final checkpoint, no flush: the same as
//! a crash). Unset (the only setting in production), each check is one relaxed atomic load.
//!
//! `OUTBOX_RELAY_PAUSE_AT=NAME:MS` instead makes the relay wait MS milliseconds the first
//! time it reaches the point (a stall at an exact step, for fencing tests); the caller
//! sleeps ([`pause_once_if_armed`]).
//!
//! The points (the first two are the seeds' failure tests 1 and 2):
//! * `before-publish`: a record was routed but not yet handed to the Kafka producer. After a
//!   restart the event must be delivered (it was never acked, so the checkpoint is behind it).
//! * `before-checkpoint-commit`: Kafka acknowledged records, and the committer is about to
//!   store the checkpoint that covers them. After a restart they are delivered again with the
//!   same `id` (at-least-once), and the checkpoint then moves past them.
//! * `before-poll-mark`: poll mode; Kafka acknowledged a claim's records and the relay is
//!   about to mark the rows SENT. After the lease ends they are published again with the
//!   same `id`, then marked.

use std::sync::OnceLock;

/// The environment variable that arms a crash point.
pub const CRASH_AT_VARIABLE: &str = "OUTBOX_RELAY_CRASH_AT";

/// A step of the delivery protocol where a test can make the relay crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Right before a record is handed to the Kafka producer.
    BeforePublish,
    /// Right after acked records became committable, before the checkpoint is stored.
    BeforeCheckpointCommit,
    /// Poll mode: a claim's records are acked, its rows not marked yet.
    BeforePollMark,
}

impl CrashPoint {
    /// The name used in [`CRASH_AT_VARIABLE`].
    fn name(self) -> &'static str {
        match self {
            CrashPoint::BeforePublish => "before-publish",
            CrashPoint::BeforeCheckpointCommit => "before-checkpoint-commit",
            CrashPoint::BeforePollMark => "before-poll-mark",
        }
    }

    /// Parses a [`CRASH_AT_VARIABLE`] value.
    fn parse(text: &str) -> Option<CrashPoint> {
        [
            CrashPoint::BeforePublish,
            CrashPoint::BeforeCheckpointCommit,
            CrashPoint::BeforePollMark,
        ]
        .into_iter()
        .find(|point| point.name() == text.trim())
    }
}

/// The armed point, read once from the environment.
fn armed() -> Option<CrashPoint> {
    static ARMED: OnceLock<Option<CrashPoint>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let text = std::env::var(CRASH_AT_VARIABLE).ok()?;
        let point = CrashPoint::parse(&text);
        match point {
            Some(point) => tracing::warn!(
                crash_point = point.name(),
                "{CRASH_AT_VARIABLE} is set: this process will abort on purpose (failure tests only)"
            ),
            None => tracing::warn!(
                value = %text,
                "{CRASH_AT_VARIABLE} names no crash point (before-publish, before-checkpoint-commit, before-poll-mark); ignored"
            ),
        }
        point
    })
}

/// Logs and aborts the process if `point` is the armed crash point; otherwise does nothing.
pub fn crash_if_armed(point: CrashPoint) {
    if armed() == Some(point) {
        // eprintln, not tracing: the line must be written before abort, unbuffered.
        eprintln!(
            "crash point `{}` reached ({CRASH_AT_VARIABLE}): aborting",
            point.name()
        );
        std::process::abort();
    }
}

/// The environment variable that arms a pause point: `NAME:MILLISECONDS`.
pub const PAUSE_AT_VARIABLE: &str = "OUTBOX_RELAY_PAUSE_AT";

/// The armed pause point and its length, read once from the environment.
fn armed_pause() -> Option<(CrashPoint, std::time::Duration)> {
    static ARMED: OnceLock<Option<(CrashPoint, std::time::Duration)>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let text = std::env::var(PAUSE_AT_VARIABLE).ok()?;
        let parsed = text.split_once(':').and_then(|(name, millis)| {
            Some((
                CrashPoint::parse(name)?,
                std::time::Duration::from_millis(millis.trim().parse().ok()?),
            ))
        });
        match parsed {
            Some((point, pause)) => tracing::warn!(
                pause_point = point.name(),
                pause_ms = pause.as_millis() as u64,
                "{PAUSE_AT_VARIABLE} is set: this process will stall on purpose once (failure tests only)"
            ),
            None => tracing::warn!(value = %text, "{PAUSE_AT_VARIABLE} is not NAME:MILLISECONDS of a known point; ignored"),
        }
        parsed
    })
}

/// How long to pause if `point` is the armed pause point and this is the first time it
/// is reached (logged); `None` otherwise.
pub fn pause_once_if_armed(point: CrashPoint) -> Option<std::time::Duration> {
    static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let (armed, pause) = armed_pause()?;
    if armed != point || PAUSED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    tracing::warn!(
        pause_point = point.name(),
        pause_ms = pause.as_millis() as u64,
        "pause point reached ({PAUSE_AT_VARIABLE}): stalling"
    );
    Some(pause)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_arm_nothing() {
        for point in [
            CrashPoint::BeforePublish,
            CrashPoint::BeforeCheckpointCommit,
            CrashPoint::BeforePollMark,
        ] {
            assert_eq!(CrashPoint::parse(point.name()), Some(point));
        }
        assert_eq!(
            CrashPoint::parse(" before-publish\n"),
            Some(CrashPoint::BeforePublish)
        );
        assert_eq!(CrashPoint::parse("before_publish"), None);
        assert_eq!(CrashPoint::parse(""), None);
    }
}
