//! Repository-level checks (see `deploy_files.rs`): the example config, the compose file
//! and the README stay true to the code. Nothing lives in the library itself; it exists so
//! the package has a target besides its tests.

use std::path::PathBuf;

/// The repository root (this package lives in `tests/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Whether `program` is on the `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// True when the tests run in CI (`CI=true`), where a missing tool is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}
