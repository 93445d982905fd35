//! `cargo xtask ci`: the one command CI runs.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// Runs every check; stops at the first failure.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    // A skipped test passes, and the test runner hides a passing test's output: say up front
    // that the PostgreSQL tests will skip (under CI they fail instead).
    if std::env::var("DATABASE_URL").map_or(true, |u| u.is_empty()) {
        eprintln!(
            "WARNING: DATABASE_URL is not set: the PostgreSQL tests will skip (under CI they fail); see the README"
        );
    }
    step(root, "fmt", &["fmt", "--all", "--check"], &[])?;
    step(
        root,
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Every other step builds with all features; a crate's default features, and the checkpoint
    // crate without its backends, are what dependents and `cargo test -p` build, and a
    // `cfg(feature)` slip there would go unseen. Clippy (check mode) on the libraries only.
    step(
        root,
        "clippy-default-features",
        &["clippy", "--workspace", "--lib", "--", "-D", "warnings"],
        &[],
    )?;
    step(
        root,
        "clippy-no-backends",
        &[
            "clippy",
            "-p",
            "antler-checkpoint",
            "--lib",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    if has_nextest() {
        step(
            root,
            "test",
            &[
                "nextest",
                "run",
                "--workspace",
                "--all-features",
                "--no-fail-fast",
            ],
            &[],
        )?;
    } else {
        step(
            root,
            "test",
            &[
                "test",
                "--workspace",
                "--all-features",
                "--lib",
                "--bins",
                "--tests",
                "--examples",
            ],
            &[],
        )?;
    }
    step(
        root,
        "doctest",
        &["test", "--workspace", "--all-features", "--doc"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    step(
        root,
        "doc",
        &["doc", "--workspace", "--all-features", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    println!("==> tidy");
    crate::tidy::run(root)?;
    println!(
        "cargo xtask ci: all checks passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn has_nextest() -> bool {
    Command::new(cargo())
        .args(["nextest", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn step(root: &Path, name: &str, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<()> {
    println!("==> {name}: cargo {}", args.join(" "));
    let started = Instant::now();
    let status = Command::new(cargo())
        .args(args)
        .current_dir(root)
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("could not start cargo for step {name}"))?;
    if !status.success() {
        bail!("step {name} failed ({status})");
    }
    println!("    {name} took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
