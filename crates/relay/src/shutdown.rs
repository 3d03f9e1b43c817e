//! Shutdown signalling shared by every task (mini-redis style).
//!
//! # Contract
//! * [`ShutdownController::trigger`] is idempotent and wakes every [`Shutdown`] listener,
//!   including those created after it fired.
//! * Each task holds its own [`Shutdown`] and selects on [`Shutdown::recv`] next to its
//!   work; a task that sees the signal finishes the item in hand and returns.
//! * Operating-system signals: the first SIGINT/SIGTERM triggers a graceful shutdown; a
//!   second one exits the process at once with status 130. That is still safe: the
//!   checkpoint only ever covers acknowledged records, so the next start replays the rest.

use tokio::sync::watch;

/// Owner side of the shutdown signal.
#[derive(Debug, Clone)]
pub struct ShutdownController {
    /// `true` once shutdown was requested; a watch so late subscribers see it too.
    sender: watch::Sender<bool>,
}

/// Listener side of the shutdown signal; one per task.
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// Receives the flag; `changed()` wakes on the trigger.
    receiver: watch::Receiver<bool>,
}

impl Default for ShutdownController {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownController {
    /// A controller that has not fired.
    pub fn new() -> Self {
        let (sender, _receiver) = watch::channel(false);
        Self { sender }
    }

    /// A new listener.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            receiver: self.sender.subscribe(),
        }
    }

    /// Requests shutdown (idempotent).
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// True once [`ShutdownController::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }
}

impl Shutdown {
    /// True once shutdown was requested.
    pub fn is_shutdown(&self) -> bool {
        *self.receiver.borrow()
    }

    /// The flag itself, for libraries that wait on a `watch` (`outbox-poll`).
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Completes when shutdown is requested (at once if it already was).
    pub async fn recv(&mut self) {
        // An error means the controller is gone: nobody can trigger any more, which we
        // treat as a shutdown as well so no task waits forever.
        let _ = self.receiver.wait_for(|fired| *fired).await;
    }
}

/// Installs the SIGINT/SIGTERM handler: the first signal triggers `controller`, a second
/// one exits the process at once (status 130).
///
/// The signals are registered before this returns (not in the spawned task), so a signal
/// that arrives right after the call already means "shut down gracefully" instead of the
/// default action (killing the process). Call it first thing in a command that needs it.
pub fn install_signal_handlers(controller: ShutdownController) {
    let mut signals = ShutdownSignals::register();
    crate::tasks::spawn_named("signal-handler", async move {
        let mut seen = 0u32;
        loop {
            let which = signals.next().await;
            seen += 1;
            if seen == 1 {
                tracing::info!(signal = which, "shutdown requested; finishing in-flight records (send the signal again to exit at once)");
                controller.trigger();
            } else {
                tracing::warn!(signal = which, "second signal: exiting at once; the next start replays from the last checkpoint");
                std::process::exit(130);
            }
        }
    });
}

/// SIGINT and SIGTERM listeners, registered when created.
struct ShutdownSignals {
    /// SIGINT (Ctrl-C); `None` if it could not be registered.
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    /// SIGTERM (what service managers send); `None` if it could not be registered.
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    #[cfg(unix)]
    fn register() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(listener) => Some(listener),
            Err(error) => {
                tracing::error!(%error, signal = name, "cannot listen for this signal; it will not stop the relay gracefully");
                None
            }
        };
        Self {
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
        }
    }

    #[cfg(not(unix))]
    fn register() -> Self {
        Self {}
    }

    /// The next signal's name.
    #[cfg(unix)]
    async fn next(&mut self) -> &'static str {
        async fn receive(listener: &mut Option<tokio::signal::unix::Signal>) {
            match listener {
                Some(listener) => {
                    if listener.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = receive(&mut self.interrupt) => "SIGINT",
            _ = receive(&mut self.terminate) => "SIGTERM",
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn late_and_early_listeners_both_see_the_trigger() {
        let controller = ShutdownController::new();
        let mut early = controller.subscribe();
        assert!(!early.is_shutdown());
        let waiter = tokio::spawn(async move {
            early.recv().await;
            true
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        controller.trigger();
        controller.trigger();
        assert!(tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap());
        let mut late = controller.subscribe();
        assert!(late.is_shutdown());
        tokio::time::timeout(Duration::from_secs(1), late.recv())
            .await
            .unwrap();
    }
}
