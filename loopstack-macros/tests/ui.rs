//! Compile-time behaviour of `#[tool]` and `#[workflow]`: every check has a failing
//! example whose `.stderr` shows one error at the user's token.
//!
//! The snapshots are pinned to the toolchain in `rust-toolchain.toml`; refresh them
//! with `TRYBUILD=overwrite cargo test -p loopstack-macros --test ui` and review the diff.
//! The "other types implement trait" lists in a few snapshots also follow the features
//! enabled on `serde`/`serde_json`/`schemars` in the workspace (e.g. `serde_json/raw_value`).

#[rustversion::attr(not(stable(1.95)), ignore = "ui snapshots are pinned to 1.95")]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/*/pass/*.rs");
    t.compile_fail("tests/ui/*/fail/*.rs");
}
