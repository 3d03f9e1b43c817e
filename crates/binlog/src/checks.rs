//! (owned by the live-source work; see ARCHITECTURE.md)
