//! outbox-checkpoint
