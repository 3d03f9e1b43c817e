//! The relay, built inside the examples package so the examples' tests can run it by
//! `CARGO_BIN_EXE_example-relay` (Cargo hands a test only its own package's binaries); the
//! same one call as `crates/relay/src/main.rs`.

fn main() -> std::process::ExitCode {
    outbox_relay::commands::main_entry()
}
