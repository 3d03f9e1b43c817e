//! (owned by the decoder work; see ARCHITECTURE.md)
