//! Project automation, run as `cargo xtask <command>`.
//!
//! - `ci`: everything CI checks: formatting, lints, tests (doc tests included), docs, tidy.
//! - `tidy`: layering and hygiene rules that the compiler cannot check.
//! - `bench write-amp`: the write-amplification sweep of `shared/bench/write-amp.md`.
//! - `bench flatness`: the invoke-latency flatness check of the same workload (medians over runs).
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on its streams"
)]

mod bench;
mod ci;
mod tidy;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("ci") if args.len() == 1 => ci::run(&root),
        Some("tidy") if args.len() == 1 => tidy::run(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | tidy | bench write-amp [--quick] | bench flatness [--runs N]>"
            );
            std::process::exit(2);
        }
    }
}

/// The workspace root: xtask lives one level below it.
fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}
