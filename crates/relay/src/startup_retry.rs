//! One rule for a dependency the relay needs before it can start (the checkpoint store of
//! every kind, and the source and the Kafka cluster with their own loops): a transient
//! failure is retried with backoff, each retry logged with its attempt, limit and delay, and
//! visible in `/readyz`; after `max_attempts` failures (0 = forever) the relay gives up,
//! naming the dependency and the last error; a definite failure stops it at once.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::shutdown::Shutdown;

/// How long the relay waits for a dependency at startup.
pub(crate) struct StartupDependency {
    /// Failures before giving up; 0 = retry forever.
    pub(crate) max_attempts: u32,
    /// Delays between attempts.
    pub(crate) backoff: Backoff,
}

/// Why waiting for a dependency ended without it.
#[derive(Debug)]
pub(crate) enum StartupFailure<E> {
    /// A failure retrying cannot fix.
    Definite(E),
    /// `attempts` transient failures over `waited`, the last one `last`.
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// From the first attempt to giving up.
        waited: Duration,
        /// The last failure.
        last: E,
    },
}

/// Runs `attempt` until it succeeds: transient failures (`is_transient`) are retried with
/// `dependency`'s backoff, each one passed to `on_retry` (attempt number, delay) for the log
/// and readiness; a definite one ends it at once. `Ok(None)` when shutdown was requested.
pub(crate) async fn retry_at_startup<T, E, F, Fut>(
    dependency: StartupDependency,
    shutdown: &mut Shutdown,
    is_transient: impl Fn(&E) -> bool,
    mut on_retry: impl FnMut(&E, u32, Duration),
    mut attempt: F,
) -> Result<Option<T>, StartupFailure<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let StartupDependency {
        max_attempts,
        mut backoff,
    } = dependency;
    let started = Instant::now();
    let mut attempts: u32 = 0;
    loop {
        let result = tokio::select! {
            _ = shutdown.recv() => return Ok(None),
            result = attempt() => result,
        };
        attempts = attempts.saturating_add(1);
        match result {
            Ok(value) => return Ok(Some(value)),
            Err(error) if is_transient(&error) => {
                if max_attempts != 0 && attempts >= max_attempts {
                    return Err(StartupFailure::GaveUp {
                        attempts,
                        waited: started.elapsed(),
                        last: error,
                    });
                }
                let delay = backoff.next_delay();
                on_retry(&error, attempts, delay);
                tokio::select! {
                    _ = shutdown.recv() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Err(error) => return Err(StartupFailure::Definite(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::ShutdownController;

    fn dependency(max_attempts: u32) -> StartupDependency {
        StartupDependency {
            max_attempts,
            backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(2)),
        }
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_success_or_the_limit() {
        let controller = ShutdownController::new();
        let mut shutdown = controller.subscribe();
        let mut calls = 0;
        let mut retries = Vec::new();
        let result = retry_at_startup(
            dependency(0),
            &mut shutdown,
            |error: &&str| *error == "down",
            |_, attempt, _| retries.push(attempt),
            || {
                calls += 1;
                let outcome = if calls < 4 { Err("down") } else { Ok(calls) };
                async move { outcome }
            },
        )
        .await;
        assert_eq!(result.unwrap(), Some(4));
        assert_eq!(retries, [1, 2, 3]);

        let result: Result<Option<()>, _> = retry_at_startup(
            dependency(3),
            &mut shutdown,
            |_: &&str| true,
            |_, _, _| {},
            || async { Err("down") },
        )
        .await;
        assert!(matches!(
            result,
            Err(StartupFailure::GaveUp {
                attempts: 3,
                last: "down",
                ..
            })
        ));

        let result: Result<Option<()>, _> = retry_at_startup(
            dependency(0),
            &mut shutdown,
            |error: &&str| *error == "down",
            |_, _, _| panic!("a definite failure is not retried"),
            || async { Err("refused") },
        )
        .await;
        assert!(matches!(result, Err(StartupFailure::Definite("refused"))));

        controller.trigger();
        let result: Result<Option<()>, StartupFailure<&str>> = retry_at_startup(
            dependency(0),
            &mut shutdown,
            |_| true,
            |_, _, _| {},
            std::future::pending,
        )
        .await;
        assert!(matches!(result, Ok(None)), "shutdown ends the wait");
    }
}
