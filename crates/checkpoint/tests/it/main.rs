//! Integration tests of antler-checkpoint: the conformance suite on every saver, mode gate,
//! corruption and format tests. One binary, one module per area.
#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test helpers assert by unwrapping and report skipped PostgreSQL tests on stderr"
)]

mod ancestry;
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

/// Puts the next checkpoint of thread `t` (on its latest), by run `run`, with channel `a` at
/// version `v`: the run-index migration tests' writer.
pub(crate) async fn put_for_run(saver: &dyn antler_checkpoint::Saver, t: &str, run: &str, v: u64) {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{ChannelVersions, CheckpointConfig, CheckpointSource};
    let cp = checkpoint(&[("a", v, serde_json::json!(v))]);
    let nv: ChannelVersions = cp.channel_versions.clone();
    let at = CheckpointConfig::latest(t);
    let at = CheckpointConfig {
        checkpoint_id: saver.get_tuple(&at).await.unwrap().map(|c| c.checkpoint.id),
        ..at
    };
    saver
        .put(&at, cp, metadata(CheckpointSource::Loop, 0, Some(run)), &nv)
        .await
        .unwrap();
}

/// How many checkpoints thread `t` holds.
pub(crate) async fn checkpoint_count(saver: &dyn antler_checkpoint::Saver, t: &str) -> usize {
    saver
        .list(&antler_checkpoint::ListQuery::thread(t))
        .await
        .unwrap()
        .len()
}
