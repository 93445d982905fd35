//! Integration tests of `antler-state-reducers`: the reference fixtures and
//! the algebraic laws.

mod fixtures;
mod laws;

use std::path::PathBuf;

/// The `shared/` folder beside the repository (or `ANTLER_SHARED_DIR`).
pub(crate) fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ANTLER_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}
