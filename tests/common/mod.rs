//! Helpers shared by the integration tests: the examples as processes, and a
//! PostgreSQL schema per test ([`postgres`]), one store of each kind ([`stores`]), the worker example ([`worker`]).

use std::path::PathBuf;
use std::process::Command;

#[allow(dead_code)] // (not every test crate uses PostgreSQL)
pub(crate) mod postgres;
#[allow(dead_code, unused_macros, unused_imports)] // (nor every store)
pub(crate) mod stores;
#[allow(dead_code)] // (nor the worker example)
pub(crate) mod worker;

/// The example `name`, built (or found up to date) by cargo next to the running
/// test's binary, in the same profile.
#[allow(dead_code)] // (not every test crate runs an example without features)
pub(crate) fn example(name: &str) -> PathBuf {
    example_with(name, &[])
}

/// The example `name` built with the crate's `features`, as [`example`] builds it.
pub(crate) fn example_with(name: &str, features: &[&str]) -> PathBuf {
    let mut dir = std::env::current_exe().unwrap();
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "--example", name]);
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    if dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(build.status().unwrap().success(), "building the {name} example failed");
    dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}
