//! `cargo xtask bench`: benchmark sweeps whose reports land in `target/bench/`.

use std::path::Path;

use anyhow::bail;

/// Dispatches `cargo xtask bench <name>`.
pub(crate) fn run(_root: &Path, args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some(name) => bail!("benchmark `{name}` is not available yet"),
        None => bail!("usage: cargo xtask bench write-amp [--quick]"),
    }
}
