//! outbox-router
