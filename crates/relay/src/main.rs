//! The `outbox-relay` binary: all logic lives in the library
//! ([`outbox_relay::commands::main_entry`]).

/// mimalloc for small allocations, the system allocator for big ones: see
/// `outbox_relay::RelayAllocator`.
#[global_allocator]
static GLOBAL_ALLOCATOR: outbox_relay::RelayAllocator = outbox_relay::RelayAllocator;

fn main() -> std::process::ExitCode {
    outbox_relay::commands::main_entry()
}
