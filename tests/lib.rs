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
