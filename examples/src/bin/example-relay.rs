//! The relay, built inside the examples package: the same `main` as
//! `crates/relay/src/main.rs` (all logic lives in the `outbox_relay` library), so the
//! examples' tests can run the relay binary by `CARGO_BIN_EXE_example-relay`.

use clap::Parser;
use outbox_relay::cli::{Cli, LogFormat};
use outbox_relay::commands::{execute, init_logging, render_error_chain};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    init_logging(log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("outbox-relay")
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = runtime.block_on(execute(cli));
    // Blocking helpers (a metadata request to a frozen broker, a producer flushing on drop)
    // must not hold the exit past the shutdown deadline: everything that matters (the final
    // checkpoint) is done by now.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => {
            let message = render_error_chain(&error);
            match log_format {
                LogFormat::Json => tracing::error!(error = %message, "outbox-relay failed"),
                LogFormat::Human => eprintln!("error: {message}"),
            }
            std::process::ExitCode::from(1)
        }
    }
}
