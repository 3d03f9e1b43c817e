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
//! The two points are the seeds' failure tests 1 and 2:
//! * `before-publish`: a record was routed but not yet handed to the Kafka producer. After a
//!   restart the event must be delivered (it was never acked, so the checkpoint is behind it).
//! * `before-checkpoint-commit`: Kafka acknowledged records, and the committer is about to
//!   store the checkpoint that covers them. After a restart they are delivered again with the
//!   same `id` (at-least-once), and the checkpoint then moves past them.

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
}

impl CrashPoint {
    /// The name used in [`CRASH_AT_VARIABLE`].
    fn name(self) -> &'static str {
        match self {
            CrashPoint::BeforePublish => "before-publish",
            CrashPoint::BeforeCheckpointCommit => "before-checkpoint-commit",
        }
    }

    /// Parses a [`CRASH_AT_VARIABLE`] value.
    fn parse(text: &str) -> Option<CrashPoint> {
        [
            CrashPoint::BeforePublish,
            CrashPoint::BeforeCheckpointCommit,
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
                "{CRASH_AT_VARIABLE} names no crash point (before-publish, before-checkpoint-commit); ignored"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_arm_nothing() {
        for point in [
            CrashPoint::BeforePublish,
            CrashPoint::BeforeCheckpointCommit,
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
