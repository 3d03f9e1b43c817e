//! Stamps the git commit into the binary (`outbox_relay_build_info{git_sha}`):
//! `OUTBOX_RELAY_GIT_SHA` when set (release builds from a tarball), else `git rev-parse`,
//! else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=OUTBOX_RELAY_GIT_SHA");
    // Rebuild the stamp when the checked-out commit moves (HEAD, or the branch it names).
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    let sha = std::env::var("OUTBOX_RELAY_GIT_SHA")
        .ok()
        .filter(|sha| !sha.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=OUTBOX_RELAY_GIT_SHA={sha}");
}
