//! The `outbox-relay` binary: all logic lives in the library
//! ([`outbox_relay::commands::main_entry`]).

fn main() -> std::process::ExitCode {
    outbox_relay::commands::main_entry()
}
