//! Named tasks: `tokio::task::Builder::name` needs `tokio_unstable`, so each task runs
//! inside a tracing span carrying its name instead; every log line of the task names it.

use std::future::Future;

use tracing::Instrument;

/// Spawns `future` on the current runtime inside a `task` span named `name`.
pub fn spawn_named<F>(name: &'static str, future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let span = tracing::info_span!("task", name);
    tokio::spawn(future.instrument(span))
}
