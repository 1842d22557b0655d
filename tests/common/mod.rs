//! Helpers shared by the integration tests: the examples as processes, a browser
//! ([`browser`]), and a
//! PostgreSQL schema per test ([`postgres`]), one store of each kind ([`stores`]), the worker example ([`worker`]).

use std::path::PathBuf;
use std::process::Command;

#[allow(dead_code)] // (not every test crate drives a browser)
pub(crate) mod browser;
#[allow(dead_code)] // (not every test crate uses PostgreSQL)
pub(crate) mod postgres;
#[allow(dead_code, unused_macros, unused_imports)] // (nor every store)
pub(crate) mod stores;
#[allow(dead_code)] // (nor the worker example)
pub(crate) mod worker;

/// The example `name`, built (or found up to date) by cargo next to the running
/// test's binary, in the same profile and with the crate's features this test was
/// built with (so it is the example `cargo test` built, and one that needs a feature
/// off by default builds).
#[allow(dead_code)] // (not every test crate runs an example without features)
pub(crate) fn example(name: &str) -> PathBuf {
    example_with(name, &[])
}

/// The crate's features this test was built with. A feature missing here is left
/// out of the examples the tests build (which then build again, without it).
const FEATURES: [(&str, bool); 16] = [
    ("macros", cfg!(feature = "macros")),
    ("anthropic", cfg!(feature = "anthropic")),
    ("openai", cfg!(feature = "openai")),
    ("gemini", cfg!(feature = "gemini")),
    ("bedrock", cfg!(feature = "bedrock")),
    ("sqlite", cfg!(feature = "sqlite")),
    ("postgres", cfg!(feature = "postgres")),
    ("cli", cfg!(feature = "cli")),
    ("serve", cfg!(feature = "serve")),
    ("a2a", cfg!(feature = "a2a")),
    ("metrics", cfg!(feature = "metrics")),
    ("mcp", cfg!(feature = "mcp")),
    ("mcp-oauth", cfg!(feature = "mcp-oauth")),
    ("mcp-server", cfg!(feature = "mcp-server")),
    ("otel", cfg!(feature = "otel")),
    ("testing", cfg!(feature = "testing")),
];

/// The example `name` built with the crate's `features` besides this test's, as
/// [`example`] builds it.
pub(crate) fn example_with(name: &str, features: &[&str]) -> PathBuf {
    let mut dir = std::env::current_exe().unwrap();
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "--example", name, "--no-default-features"]);
    let on = FEATURES.iter().filter(|(_, on)| *on).map(|(feature, _)| *feature);
    let features: Vec<&str> = on.chain(features.iter().copied()).collect();
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    if dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(build.status().unwrap().success(), "building the {name} example failed");
    dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}
