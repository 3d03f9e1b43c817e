//! Records the optimisation level this harness (and so the relay code it runs) was built
//! with, for the report: figures of an unoptimised build are not comparable.

fn main() {
    let opt_level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".to_string());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=BENCH_BUILD=profile {profile}, opt-level {opt_level}");
    println!("cargo:rerun-if-env-changed=OPT_LEVEL");
    println!("cargo:rerun-if-env-changed=PROFILE");
}
