//! Integration tests of antler-checkpoint: the conformance suite on every saver, mode gate,
//! corruption and format tests. One binary, one module per area.
#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test helpers assert by unwrapping and report skipped PostgreSQL tests on stderr"
)]

mod corruption;
mod delta;
mod gate;
mod memory;
mod postgres;
mod send;
mod sqlite;

/// A fresh database path under cargo's per-target temporary directory (`prefix-<uuid>/name`).
pub(crate) fn temp_db(prefix: &str, name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}
