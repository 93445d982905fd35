//! The saver conformance suite (feature `test-util`): runtime-spec §7's groups — put,
//! put_writes, get_tuple, list, delete_thread, delete_for_runs, copy_thread, prune,
//! delta history — plus antler's own obligations (typed errors, delta-safe pruning).
//!
//! Every case is a public async function taking a fresh, empty saver.
//! [`conformance_suite!`](crate::conformance_suite) turns them into one `#[test]` each:
//!
//! ```
//! antler_checkpoint::conformance_suite!(|| async {
//!     Some(Box::new(antler_checkpoint::MemorySaver::new(antler_checkpoint::StoreConfig::full()))
//!         as Box<dyn antler_checkpoint::Saver>)
//! });
//! # fn main() {}
//! ```
//!
//! A factory returns `None` to skip (for example PostgreSQL without `DATABASE_URL`);
//! it should say so on stderr, and fail instead under `CI=true`.
#![expect(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "conformance cases are test assertions: a failed expectation panics the test"
)]

use std::collections::BTreeMap;
use std::future::Future;

use serde_json::{Value, json};

use crate::blob::{Blob, MessagesKind};
use crate::error::ErrorKind;
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, RunId, TaskId, TaskPath, ThreadId,
};
use crate::model::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointSource, ListQuery,
    PendingWrite, PruneStrategy,
};
use crate::saver::Saver;

/// Runs a future to completion on a fresh current-thread runtime (what each generated test does).
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("invariant: a current-thread runtime builds")
        .block_on(future)
}

/// Expands to one `#[test]` per conformance case, each on a fresh saver from `$factory`
/// (an expression callable as `$factory().await -> Option<Box<dyn Saver>>`).
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        $crate::__conformance_cases!($factory;
            put_returns_config, put_roundtrip, put_preserves_channel_values, put_preserves_channel_versions,
            put_preserves_versions_seen, put_preserves_metadata, put_root_namespace, put_child_namespace,
            put_default_namespace, put_multiple_checkpoints_same_thread, put_multiple_threads_isolated,
            put_parent_config, put_incremental_channel_update, put_new_channel_added, put_channel_removed,
            put_preserves_run_id, put_preserves_versions_seen_values,
            put_writes_basic, put_writes_multiple_writes_same_task, put_writes_multiple_tasks,
            put_writes_preserves_task_id, put_writes_preserves_channel_and_value, put_writes_task_path,
            put_writes_idempotent, put_writes_special_channels, put_writes_across_namespaces,
            put_writes_cleared_on_next_checkpoint,
            get_tuple_nonexistent_returns_none, get_tuple_latest_when_no_checkpoint_id,
            get_tuple_specific_checkpoint_id, get_tuple_config_structure, get_tuple_checkpoint_fields,
            get_tuple_metadata, get_tuple_parent_config, get_tuple_pending_writes, get_tuple_respects_namespace,
            get_tuple_nonexistent_checkpoint_id,
            list_all, list_by_thread, list_by_namespace, list_ordering, list_metadata_filter_single_key,
            list_metadata_filter_step, list_before, list_limit, list_limit_plus_before,
            list_combined_thread_and_filter, list_empty_result, list_includes_pending_writes,
            list_multiple_namespaces, list_metadata_filter_multiple_keys, list_metadata_filter_no_match,
            list_metadata_custom_keys,
            delete_thread_removes_checkpoints, delete_thread_removes_writes, delete_thread_removes_all_namespaces,
            delete_thread_preserves_other_threads, delete_thread_nonexistent_noop,
            delete_for_runs_single, delete_for_runs_multiple, delete_for_runs_preserves_other_runs,
            delete_for_runs_removes_writes, delete_for_runs_empty_list_noop, delete_for_runs_nonexistent_noop,
            delete_for_runs_across_namespaces,
            copy_thread_basic, copy_thread_all_checkpoints, copy_thread_preserves_metadata,
            copy_thread_preserves_namespaces, copy_thread_preserves_writes, copy_thread_preserves_ordering,
            copy_thread_source_unchanged, copy_thread_nonexistent_source,
            prune_keep_latest_single_thread, prune_keep_latest_multiple_threads,
            prune_keep_latest_across_namespaces, prune_keep_latest_preserves_writes, prune_delete_all,
            prune_preserves_other_threads, prune_empty_list_noop, prune_nonexistent_noop,
            history_returns_writes_oldest_first, history_seed_is_nearest_snapshot,
            history_excludes_target_pending_writes, history_multi_channel, history_empty_channels_returns_empty,
            history_walk_to_root_no_seed, history_migration_plain_value_as_seed,
            history_seed_ancestor_own_writes_are_replayed,
            antler_put_writes_unknown_checkpoint_is_error, antler_history_missing_parent_is_error,
            antler_a_nul_character_in_a_key_is_invalid_input, antler_a_relative_record_needs_its_parent,
            antler_history_skips_writes_a_relative_child_did_not_apply,
            antler_history_parent_cycle_is_error, antler_history_version_bump_without_value_keeps_older_seed,
            antler_history_null_value_is_a_seed, antler_history_unknown_checkpoint_is_error,
            antler_messages_blob_round_trips, antler_prune_keep_latest_keeps_delta_history,
            antler_delete_for_runs_keeps_what_remaining_checkpoints_need, antler_copy_thread_keeps_delta_history,
            antler_writes_sorted_by_task_path_then_task_id_then_idx,
            antler_put_writes_repeated_control_write_keeps_the_last,
            antler_put_same_version_with_another_value_is_a_conflict,
            antler_put_a_version_beyond_what_stores_keep_is_invalid_input,
            antler_get_tuple_without_values_is_get_tuple_minus_values,
            antler_get_tuple_without_values_absent_is_none,
            antler_get_tuple_without_values_is_mode_gated,
            antler_get_tuple_without_values_reads_no_value,
            antler_get_tuple_without_values_reads_every_write,
            antler_ancestors_nearest_first_without_values_or_writes,
            antler_ancestors_respect_the_limit_and_stop_at_the_root,
            antler_ancestors_stop_before_a_missing_parent,
            antler_ancestors_of_an_unknown_checkpoint_are_empty,
            antler_ancestors_parent_cycle_is_error,
            antler_ancestors_damaged_metadata_is_error,
            antler_ancestors_are_mode_gated,
            antler_delta_history_is_mode_gated,
            antler_ancestors_default_implementation_agrees,
            antler_copy_thread_refuses_other_bodies_under_the_same_numbers,
            antler_list_without_values_is_list_minus_values_and_writes,
            antler_list_pages_agree_with_the_whole_list,
            antler_delete_for_runs_pages_through_a_large_store,
            antler_delete_for_runs_reads_only_the_runs_threads,
            antler_json_deeper_than_a_store_reads_back_is_refused,
            antler_channel_values_are_read_by_key_wherever_stored,
            antler_channel_values_reach_past_records_that_do_not_list_the_channel,
            antler_channel_values_are_mode_gated,
            antler_channel_values_damaged_value_is_error,
            antler_copy_thread_refuses_other_values_under_the_same_versions,
            antler_copy_thread_refuses_other_writes_or_checkpoints_under_the_same_keys,
            antler_max_channel_version_covers_every_branch,
            antler_max_channel_version_survives_deletes_and_copies,
            antler_a_refused_write_leaves_no_message_behind,
            antler_history_stops_at_a_full_record_without_the_channel,
            antler_ancestry_completes_a_relative_record,
            antler_ancestry_respects_the_limit,
            antler_ancestry_absent_is_none,
            antler_ancestry_parent_cycle_is_error,
            antler_prune_and_delete_for_runs_stop_at_a_parent_cycle,
            antler_list_filter_compares_missing_as_null_and_numbers_by_value,
            antler_ancestry_is_mode_gated,
            antler_ancestry_damaged_value_is_error
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::testing::block_on(async {
                    let factory = $factory;
                    if let Some(saver) = factory().await {
                        $crate::testing::$case(&*saver).await;
                        saver
                            .discard_for_conformance()
                            .await
                            .expect("discarding the case's store");
                    }
                });
            }
        )*
    };
}

/// The number of cases [`conformance_suite!`](crate::conformance_suite) expands to.
pub const CASE_COUNT: usize = 144;

/// Stored bytes the conformance suite overwrites on purpose, through
/// [`Saver::tamper_for_conformance`]; not an API.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub enum Tamper {
    /// Every channel value blob of the thread becomes these bytes.
    Blobs(Vec<u8>),
    /// Every write value of the thread becomes these bytes.
    Writes(Vec<u8>),
    /// Every message body of the thread becomes these bytes.
    Messages(Vec<u8>),
    /// Every checkpoint of the thread gets this metadata.
    Metadata(CheckpointMetadata),
    /// Every checkpoint of the thread gets these metadata bytes (which need not decode).
    MetadataBytes(Vec<u8>),
}

// ---- fixtures -------------------------------------------------------------------------------

fn thread(name: &str) -> ThreadId {
    ThreadId::new(name)
}

fn cfg(thread_id: &str, ns: &str, id: Option<CheckpointId>) -> CheckpointConfig {
    CheckpointConfig {
        thread_id: thread(thread_id),
        checkpoint_ns: CheckpointNs::new(ns),
        checkpoint_id: id,
    }
}

/// A checkpoint whose channels have the given versions and JSON values.
pub fn checkpoint(channels: &[(&str, u64, Value)]) -> Checkpoint {
    let mut cp = Checkpoint::empty();
    for (name, version, value) in channels {
        cp.channel_versions
            .insert(ChannelName::new(*name), ChannelVersion::new(*version));
        cp.channel_values
            .insert(ChannelName::new(*name), Blob::json(value).unwrap());
    }
    cp
}

/// Metadata with a source, a step and optionally a run id.
pub fn metadata(source: CheckpointSource, step: i64, run: Option<&str>) -> CheckpointMetadata {
    CheckpointMetadata {
        source: Some(source),
        step,
        run_id: run.map(RunId::new),
        ..CheckpointMetadata::default()
    }
}

async fn put_all(
    saver: &dyn Saver,
    at: CheckpointConfig,
    cp: Checkpoint,
    meta: CheckpointMetadata,
) -> CheckpointConfig {
    let versions: ChannelVersions = cp.channel_versions.clone();
    saver.put(&at, cp, meta, &versions).await.unwrap()
}

/// Puts a linear chain of `n` checkpoints (channel `a` = step number) and returns their configs.
async fn chain(
    saver: &dyn Saver,
    thread_id: &str,
    ns: &str,
    n: usize,
    run: Option<&str>,
) -> Vec<CheckpointConfig> {
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for i in 0..n {
        let parent = out.last().and_then(|c| c.checkpoint_id);
        let cp = checkpoint(&[("a", i as u64 + 1, json!(i))]);
        let source = if i == 0 {
            CheckpointSource::Input
        } else {
            CheckpointSource::Loop
        };
        let c = put_all(
            saver,
            cfg(thread_id, ns, parent),
            cp,
            metadata(source, i as i64 - 1, run),
        )
        .await;
        out.push(c);
    }
    out
}

async fn write(
    saver: &dyn Saver,
    at: &CheckpointConfig,
    task: &str,
    path: &str,
    writes: &[(&str, Value)],
) {
    let writes = writes
        .iter()
        .map(|(c, v)| (ChannelName::new(*c), Blob::json(v).unwrap()))
        .collect();
    saver
        .put_writes(at, writes, &TaskId::new(task), &TaskPath::new(path))
        .await
        .unwrap();
}

async fn get(saver: &dyn Saver, at: &CheckpointConfig) -> crate::model::CheckpointTuple {
    saver
        .get_tuple(at)
        .await
        .unwrap()
        .expect("checkpoint exists")
}

fn json_of(b: &Blob) -> Value {
    b.decode_json().unwrap()
}

fn ids(tuples: &[crate::model::CheckpointTuple]) -> Vec<CheckpointId> {
    tuples.iter().map(|t| t.checkpoint.id).collect()
}

fn write_values(ws: &[PendingWrite]) -> Vec<(String, String, Value)> {
    ws.iter()
        .map(|w| {
            (
                w.task_id.to_string(),
                w.channel.to_string(),
                json_of(&w.value),
            )
        })
        .collect()
}

async fn count(saver: &dyn Saver, q: ListQuery) -> usize {
    saver.list(&q).await.unwrap().len()
}

// ---- put ------------------------------------------------------------------------------------

/// `put` returns the thread, namespace and the new checkpoint's id.
pub async fn put_returns_config(saver: &dyn Saver) {
    let cp = checkpoint(&[("a", 1, json!(1))]);
    let id = cp.id;
    let c = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    assert_eq!(c, cfg("t", "", Some(id)));
}

/// A stored checkpoint reads back equal.
pub async fn put_roundtrip(saver: &dyn Saver) {
    let mut cp = checkpoint(&[("a", 1, json!("x")), ("b", 2, json!([1, 2]))]);
    cp.updated_channels = Some(vec!["a".into()]);
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(get(saver, &c).await.checkpoint, cp);
}

/// Values of every JSON shape and raw bytes survive.
pub async fn put_preserves_channel_values(saver: &dyn Saver) {
    let mut cp = checkpoint(&[
        ("s", 1, json!("text ü")),
        ("n", 1, json!(1.5)),
        ("l", 1, json!([1, "two", null])),
        ("d", 1, json!({"z": 1, "a": {"b": [true]}})),
        ("nul", 1, Value::Null),
    ]);
    cp.channel_versions.insert("raw".into(), 1.into());
    cp.channel_values
        .insert("raw".into(), Blob::bytes(vec![0u8, 255, 7]));
    cp.channel_versions.insert("none".into(), 1.into());
    cp.channel_values.insert("none".into(), Blob::Null);
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(
        get(saver, &c).await.checkpoint.channel_values,
        cp.channel_values
    );
}

/// Channel versions survive.
pub async fn put_preserves_channel_versions(saver: &dyn Saver) {
    let cp = checkpoint(&[("a", 7, json!(1)), ("b", 12, json!(2))]);
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(
        get(saver, &c).await.checkpoint.channel_versions,
        cp.channel_versions
    );
}

/// `versions_seen` survives.
pub async fn put_preserves_versions_seen(saver: &dyn Saver) {
    let mut cp = checkpoint(&[("a", 1, json!(1))]);
    cp.versions_seen
        .entry("node".into())
        .or_default()
        .insert("a".into(), 1.into());
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(
        get(saver, &c).await.checkpoint.versions_seen,
        cp.versions_seen
    );
}

/// Metadata (typed keys and free keys) survives.
pub async fn put_preserves_metadata(saver: &dyn Saver) {
    let mut m = metadata(CheckpointSource::Update, 4, Some("run-1"));
    m.parents
        .insert(CheckpointNs::root(), CheckpointId::generate());
    m.extra.insert("user".into(), json!("ann"));
    m.extra.insert("score".into(), json!(3));
    let c = put_all(saver, cfg("t", "", None), checkpoint(&[]), m.clone()).await;
    assert_eq!(get(saver, &c).await.metadata, m);
}

/// The root namespace is `""`.
pub async fn put_root_namespace(saver: &dyn Saver) {
    let c = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[]),
        CheckpointMetadata::default(),
    )
    .await;
    assert!(c.checkpoint_ns.is_root());
    assert!(
        saver
            .get_tuple(&cfg("t", "", None))
            .await
            .unwrap()
            .is_some()
    );
}

/// A child namespace is separate from the root.
pub async fn put_child_namespace(saver: &dyn Saver) {
    let c = put_all(
        saver,
        cfg("t", "child:1", None),
        checkpoint(&[]),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(c.checkpoint_ns.as_str(), "child:1");
    assert!(
        saver
            .get_tuple(&cfg("t", "child:1", None))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        saver
            .get_tuple(&cfg("t", "", None))
            .await
            .unwrap()
            .is_none()
    );
}

/// `CheckpointConfig::latest` addresses the root namespace.
pub async fn put_default_namespace(saver: &dyn Saver) {
    let c = put_all(
        saver,
        CheckpointConfig::latest("t"),
        checkpoint(&[]),
        CheckpointMetadata::default(),
    )
    .await;
    assert_eq!(get(saver, &cfg("t", "", None)).await.config, c);
}

/// Several checkpoints on one thread: each readable, the last is latest.
pub async fn put_multiple_checkpoints_same_thread(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, None).await;
    for (i, c) in cs.iter().enumerate() {
        assert_eq!(
            json_of(&get(saver, c).await.checkpoint.channel_values["a"]),
            json!(i)
        );
    }
    assert_eq!(get(saver, &cfg("t", "", None)).await.config, cs[2]);
}

/// Threads do not see each other.
pub async fn put_multiple_threads_isolated(saver: &dyn Saver) {
    let a = chain(saver, "t1", "", 1, None).await;
    let b = chain(saver, "t2", "", 2, None).await;
    assert_eq!(get(saver, &cfg("t1", "", None)).await.config, a[0]);
    assert_eq!(get(saver, &cfg("t2", "", None)).await.config, b[1]);
    assert_eq!(count(saver, ListQuery::thread("t1")).await, 1);
}

/// The config passed to `put` becomes the parent.
pub async fn put_parent_config(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 2, None).await;
    assert_eq!(get(saver, &cs[1]).await.parent_config, Some(cs[0].clone()));
    assert_eq!(get(saver, &cs[0]).await.parent_config, None);
}

/// A channel not in `new_versions` loads from the version stored earlier.
pub async fn put_incremental_channel_update(saver: &dyn Saver) {
    let c1 = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("a", 1, json!("a1")), ("b", 1, json!("b1"))]),
        CheckpointMetadata::default(),
    )
    .await;
    let mut cp2 = checkpoint(&[("a", 2, json!("a2"))]);
    cp2.channel_versions.insert("b".into(), 1.into());
    let new_versions: ChannelVersions = [(ChannelName::new("a"), ChannelVersion::new(2))].into();
    let c2 = saver
        .put(&c1, cp2, CheckpointMetadata::default(), &new_versions)
        .await
        .unwrap();
    let t = get(saver, &c2).await;
    assert_eq!(json_of(&t.checkpoint.channel_values["a"]), json!("a2"));
    assert_eq!(json_of(&t.checkpoint.channel_values["b"]), json!("b1"));
}

/// A channel that appears later is stored and read.
pub async fn put_new_channel_added(saver: &dyn Saver) {
    let c1 = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("a", 1, json!(1))]),
        CheckpointMetadata::default(),
    )
    .await;
    let mut cp2 = checkpoint(&[("c", 2, json!("new"))]);
    cp2.channel_versions.insert("a".into(), 1.into());
    let nv: ChannelVersions = [(ChannelName::new("c"), ChannelVersion::new(2))].into();
    let c2 = saver
        .put(&c1, cp2, CheckpointMetadata::default(), &nv)
        .await
        .unwrap();
    let t = get(saver, &c2).await;
    assert_eq!(t.checkpoint.channel_values.len(), 2);
    assert_eq!(json_of(&t.checkpoint.channel_values["c"]), json!("new"));
}

/// A channel dropped from `channel_versions` is not read back.
pub async fn put_channel_removed(saver: &dyn Saver) {
    let c1 = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("a", 1, json!(1)), ("b", 1, json!(2))]),
        CheckpointMetadata::default(),
    )
    .await;
    let mut cp2 = Checkpoint::empty();
    cp2.channel_versions.insert("a".into(), 1.into());
    let c2 = saver
        .put(
            &c1,
            cp2,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let t = get(saver, &c2).await;
    assert!(!t.checkpoint.channel_values.contains_key("b"));
    assert!(t.checkpoint.channel_values.contains_key("a"));
}

/// `run_id` survives.
pub async fn put_preserves_run_id(saver: &dyn Saver) {
    let c = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[]),
        metadata(
            CheckpointSource::Loop,
            1,
            Some("0e4f8a52-1d2b-4c3a-9f7e-5b6a7c8d9e0f"),
        ),
    )
    .await;
    assert_eq!(
        get(saver, &c).await.metadata.run_id,
        Some(RunId::new("0e4f8a52-1d2b-4c3a-9f7e-5b6a7c8d9e0f"))
    );
}

/// Every node and channel entry of `versions_seen` keeps its exact version.
pub async fn put_preserves_versions_seen_values(saver: &dyn Saver) {
    let mut cp = checkpoint(&[("a", 3, json!(1)), ("b", 5, json!(1))]);
    cp.versions_seen
        .entry("n1".into())
        .or_default()
        .insert("a".into(), 2.into());
    cp.versions_seen
        .entry("n1".into())
        .or_default()
        .insert("b".into(), 5.into());
    cp.versions_seen
        .entry("__interrupt__".into())
        .or_default()
        .insert("a".into(), 3.into());
    cp.versions_seen.entry("empty".into()).or_default();
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    let seen = get(saver, &c).await.checkpoint.versions_seen;
    assert_eq!(seen, cp.versions_seen);
    assert_eq!(seen["n1"]["b"], ChannelVersion::new(5));
}

// ---- put_writes -----------------------------------------------------------------------------

/// A write shows up as a pending write of its checkpoint.
pub async fn put_writes_basic(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "task1", "", &[("a", json!(5))]).await;
    assert_eq!(
        write_values(&get(saver, &c).await.pending_writes),
        vec![("task1".into(), "a".into(), json!(5))]
    );
}

/// Several writes of one task keep their order (idx 0, 1, …).
pub async fn put_writes_multiple_writes_same_task(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(
        saver,
        &c,
        "task1",
        "",
        &[("a", json!(1)), ("b", json!(2)), ("a", json!(3))],
    )
    .await;
    let ws = get(saver, &c).await.pending_writes;
    assert_eq!(ws.iter().map(|w| w.idx).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(
        write_values(&ws)
            .into_iter()
            .map(|w| w.2)
            .collect::<Vec<_>>(),
        vec![json!(1), json!(2), json!(3)]
    );
}

/// Writes of several tasks are all kept.
pub async fn put_writes_multiple_tasks(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "task1", "", &[("a", json!(1))]).await;
    write(saver, &c, "task2", "", &[("a", json!(2))]).await;
    assert_eq!(get(saver, &c).await.pending_writes.len(), 2);
}

/// The task id survives (including the NULL task).
pub async fn put_writes_preserves_task_id(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    saver
        .put_writes(
            &c,
            vec![("a".into(), Blob::json(&1).unwrap())],
            &TaskId::null(),
            &TaskPath::default(),
        )
        .await
        .unwrap();
    let ws = get(saver, &c).await.pending_writes;
    assert!(ws[0].task_id.is_null());
}

/// Channel and value survive.
pub async fn put_writes_preserves_channel_and_value(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    let v = json!({"nested": [1, {"k": "v"}]});
    write(saver, &c, "task1", "", &[("chan", v.clone())]).await;
    let w = &get(saver, &c).await.pending_writes[0];
    assert_eq!(w.channel.as_str(), "chan");
    assert_eq!(json_of(&w.value), v);
}

/// The task path is stored, and writes are ordered by it.
pub async fn put_writes_task_path(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "zzz", "~__pregel_pull, a", &[("a", json!(1))]).await;
    write(saver, &c, "aaa", "~__pregel_pull, b", &[("a", json!(2))]).await;
    let ws = get(saver, &c).await.pending_writes;
    assert_eq!(ws[0].task_path.as_str(), "~__pregel_pull, a");
    assert_eq!(ws[0].task_id.as_str(), "zzz");
    assert_eq!(ws[1].task_id.as_str(), "aaa");
}

/// A regular write is insert-if-absent: the first one wins.
pub async fn put_writes_idempotent(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "task1", "", &[("a", json!("first"))]).await;
    write(saver, &c, "task1", "", &[("a", json!("second"))]).await;
    let ws = get(saver, &c).await.pending_writes;
    assert_eq!(ws.len(), 1);
    assert_eq!(json_of(&ws[0].value), json!("first"));
}

/// Control writes take fixed negative indexes (`__error__` -1, `__scheduled__` -2,
/// `__interrupt__` -3, `__resume__` -4) and are upserts.
pub async fn put_writes_special_channels(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "task1", "", &[("__error__", json!("boom"))]).await;
    write(
        saver,
        &c,
        "task1",
        "",
        &[("__error__", json!("boom again"))],
    )
    .await;
    write(
        saver,
        &c,
        "task2",
        "",
        &[("__interrupt__", json!([{"value": "ask"}]))],
    )
    .await;
    write(saver, &c, "task2", "", &[("__resume__", json!("answer"))]).await;
    // Every control write is an upsert, whatever else the batch holds: a second interrupt
    // list and a second resume value of the same task replace the first.
    write(
        saver,
        &c,
        "task2",
        "",
        &[
            ("__interrupt__", json!([{"value": "ask again"}])),
            ("__resume__", json!("second answer")),
        ],
    )
    .await;
    write(saver, &c, "task3", "", &[("__scheduled__", json!(1))]).await;
    write(saver, &c, "task3", "", &[("__scheduled__", json!(2))]).await;
    let ws = get(saver, &c).await.pending_writes;
    let by_channel: BTreeMap<String, (i64, Value)> = ws
        .iter()
        .map(|w| (w.channel.to_string(), (w.idx, json_of(&w.value))))
        .collect();
    assert_eq!(by_channel["__error__"], (-1, json!("boom again")));
    assert_eq!(by_channel["__scheduled__"], (-2, json!(2)));
    assert_eq!(
        by_channel["__interrupt__"],
        (-3, json!([{"value": "ask again"}]))
    );
    assert_eq!(by_channel["__resume__"], (-4, json!("second answer")));
    assert_eq!(ws.len(), 4);
}

/// Writes in one namespace are invisible in another.
pub async fn put_writes_across_namespaces(saver: &dyn Saver) {
    let root = chain(saver, "t", "", 1, None).await.remove(0);
    let child = chain(saver, "t", "child:1", 1, None).await.remove(0);
    write(saver, &root, "task1", "", &[("a", json!("root"))]).await;
    write(saver, &child, "task1", "", &[("a", json!("child"))]).await;
    assert_eq!(
        json_of(&get(saver, &root).await.pending_writes[0].value),
        json!("root")
    );
    assert_eq!(
        json_of(&get(saver, &child).await.pending_writes[0].value),
        json!("child")
    );
    assert_eq!(get(saver, &child).await.pending_writes.len(), 1);
}

/// A new checkpoint starts without pending writes; the old ones stay on its parent.
pub async fn put_writes_cleared_on_next_checkpoint(saver: &dyn Saver) {
    let c1 = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c1, "task1", "", &[("a", json!(1))]).await;
    let c2 = put_all(
        saver,
        c1.clone(),
        checkpoint(&[("a", 2, json!(1))]),
        CheckpointMetadata::default(),
    )
    .await;
    assert!(get(saver, &c2).await.pending_writes.is_empty());
    assert_eq!(get(saver, &c1).await.pending_writes.len(), 1);
}

// ---- get_tuple ------------------------------------------------------------------------------

/// An unknown thread reads as `None`.
pub async fn get_tuple_nonexistent_returns_none(saver: &dyn Saver) {
    assert!(
        saver
            .get_tuple(&cfg("nope", "", None))
            .await
            .unwrap()
            .is_none()
    );
}

/// Without an id, the latest checkpoint is returned.
pub async fn get_tuple_latest_when_no_checkpoint_id(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, None).await;
    assert_eq!(
        get(saver, &cfg("t", "", None)).await.checkpoint.id,
        cs[2].checkpoint_id.unwrap()
    );
}

/// With an id, that checkpoint is returned.
pub async fn get_tuple_specific_checkpoint_id(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, None).await;
    assert_eq!(
        get(saver, &cs[1]).await.checkpoint.id,
        cs[1].checkpoint_id.unwrap()
    );
}

/// The tuple's config names thread, namespace and id.
pub async fn get_tuple_config_structure(saver: &dyn Saver) {
    let c = chain(saver, "t", "ns:1", 1, None).await.remove(0);
    let t = get(saver, &cfg("t", "ns:1", None)).await;
    assert_eq!(t.config, c);
    assert!(t.config.checkpoint_id.is_some());
}

/// Format version, id, timestamp and updated channels are returned.
pub async fn get_tuple_checkpoint_fields(saver: &dyn Saver) {
    let mut cp = checkpoint(&[("a", 1, json!(1))]);
    cp.updated_channels = Some(vec!["a".into()]);
    let (id, ts) = (cp.id, cp.ts);
    let c = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    let t = get(saver, &c).await.checkpoint;
    assert_eq!(
        (t.v, t.id, t.ts),
        (crate::model::CHECKPOINT_FORMAT_VERSION, id, ts)
    );
    assert_eq!(t.updated_channels, Some(vec![ChannelName::new("a")]));
}

/// Metadata is returned.
pub async fn get_tuple_metadata(saver: &dyn Saver) {
    let c = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    let m = get(saver, &c).await.metadata;
    assert_eq!((m.source, m.step), (Some(CheckpointSource::Input), -1));
}

/// The parent config is returned.
pub async fn get_tuple_parent_config(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, None).await;
    assert_eq!(get(saver, &cs[2]).await.parent_config, Some(cs[1].clone()));
}

/// Pending writes are returned.
pub async fn get_tuple_pending_writes(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "task1", "", &[("a", json!(1)), ("b", json!(2))]).await;
    assert_eq!(
        get(saver, &cfg("t", "", None)).await.pending_writes.len(),
        2
    );
}

/// The namespace narrows the lookup.
pub async fn get_tuple_respects_namespace(saver: &dyn Saver) {
    let root = chain(saver, "t", "", 2, None).await;
    let child = chain(saver, "t", "sub:x", 1, None).await;
    assert_eq!(get(saver, &cfg("t", "", None)).await.config, root[1]);
    assert_eq!(get(saver, &cfg("t", "sub:x", None)).await.config, child[0]);
    let cross = cfg("t", "sub:x", root[0].checkpoint_id);
    assert!(saver.get_tuple(&cross).await.unwrap().is_none());
}

/// An unknown id reads as `None`.
pub async fn get_tuple_nonexistent_checkpoint_id(saver: &dyn Saver) {
    chain(saver, "t", "", 1, None).await;
    assert!(
        saver
            .get_tuple(&cfg("t", "", Some(CheckpointId::generate())))
            .await
            .unwrap()
            .is_none()
    );
}

// ---- list -----------------------------------------------------------------------------------

/// An empty query lists every checkpoint of every thread.
pub async fn list_all(saver: &dyn Saver) {
    chain(saver, "t1", "", 2, None).await;
    chain(saver, "t2", "", 3, None).await;
    assert_eq!(count(saver, ListQuery::default()).await, 5);
}

/// A thread query lists only that thread.
pub async fn list_by_thread(saver: &dyn Saver) {
    chain(saver, "t1", "", 2, None).await;
    chain(saver, "t2", "", 3, None).await;
    let l = saver.list(&ListQuery::thread("t2")).await.unwrap();
    assert_eq!(l.len(), 3);
    assert!(l.iter().all(|t| t.config.thread_id.as_str() == "t2"));
}

/// A namespace narrows the list.
pub async fn list_by_namespace(saver: &dyn Saver) {
    chain(saver, "t", "", 2, None).await;
    chain(saver, "t", "c:1", 1, None).await;
    let q = ListQuery {
        checkpoint_ns: Some(CheckpointNs::new("c:1")),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 1);
    let q = ListQuery {
        checkpoint_ns: Some(CheckpointNs::root()),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 2);
}

/// Newest first.
pub async fn list_ordering(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 4, None).await;
    let l = saver.list(&ListQuery::thread("t")).await.unwrap();
    let expected: Vec<_> = cs.iter().rev().map(|c| c.checkpoint_id.unwrap()).collect();
    assert_eq!(ids(&l), expected);
}

/// A one-key metadata filter.
pub async fn list_metadata_filter_single_key(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    let q = ListQuery {
        filter: json!({"source": "input"}).as_object().unwrap().clone(),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 1);
}

/// A filter on `step`.
pub async fn list_metadata_filter_step(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    let q = ListQuery {
        filter: json!({"step": 1}).as_object().unwrap().clone(),
        ..ListQuery::thread("t")
    };
    let l = saver.list(&q).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].metadata.step, 1);
}

/// The metadata filter compares as the reference's in-memory saver: a key the metadata lacks
/// compares as `null`, and numbers by value (`1.0` matches step `1`); also with a limit, which
/// pages through the rows the filter rejects.
pub async fn antler_list_filter_compares_missing_as_null_and_numbers_by_value(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    chain(saver, "u", "", 3, Some("r")).await;
    let listed = |filter: Value, thread: Option<&str>, limit: Option<usize>| {
        let q = ListQuery {
            filter: filter.as_object().unwrap().clone(),
            limit,
            ..thread.map_or_else(ListQuery::default, ListQuery::thread)
        };
        async move {
            saver
                .list(&q)
                .await
                .unwrap()
                .iter()
                .map(|t| (t.config.thread_id.as_str().to_owned(), t.metadata.step))
                .collect::<Vec<_>>()
        }
    };
    let t = |steps: &[i64]| {
        steps
            .iter()
            .map(|s| ("t".to_owned(), *s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed(json!({"run_id": null}), None, None).await,
        t(&[1, 0, -1])
    );
    assert_eq!(
        listed(json!({"run_id": null}), None, Some(1)).await,
        t(&[1])
    );
    assert_eq!(
        listed(json!({"absent": null}), Some("t"), None).await,
        t(&[1, 0, -1])
    );
    assert_eq!(listed(json!({"absent": 0}), Some("t"), None).await, t(&[]));
    assert_eq!(listed(json!({"step": 1.0}), Some("t"), None).await, t(&[1]));
    assert_eq!(
        listed(json!({"step": -1.0}), Some("t"), None).await,
        t(&[-1])
    );
    assert_eq!(listed(json!({"step": 0.5}), Some("t"), None).await, t(&[]));
    assert_eq!(
        listed(json!({"run_id": "r", "step": 0.0}), None, None).await,
        [("u".to_owned(), 0)]
    );
}

/// `before` lists only older checkpoints.
pub async fn list_before(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 4, None).await;
    let q = ListQuery {
        before: cs[2].checkpoint_id,
        ..ListQuery::thread("t")
    };
    assert_eq!(
        ids(&saver.list(&q).await.unwrap()),
        vec![cs[1].checkpoint_id.unwrap(), cs[0].checkpoint_id.unwrap()]
    );
}

/// `limit` caps the result, newest first.
pub async fn list_limit(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 4, None).await;
    let q = ListQuery {
        limit: Some(2),
        ..ListQuery::thread("t")
    };
    assert_eq!(
        ids(&saver.list(&q).await.unwrap()),
        vec![cs[3].checkpoint_id.unwrap(), cs[2].checkpoint_id.unwrap()]
    );
    let q = ListQuery {
        limit: Some(0),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 0);
}

/// `limit` and `before` combine.
pub async fn list_limit_plus_before(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 5, None).await;
    let q = ListQuery {
        limit: Some(2),
        before: cs[3].checkpoint_id,
        ..ListQuery::thread("t")
    };
    assert_eq!(
        ids(&saver.list(&q).await.unwrap()),
        vec![cs[2].checkpoint_id.unwrap(), cs[1].checkpoint_id.unwrap()]
    );
}

/// Thread and filter combine.
pub async fn list_combined_thread_and_filter(saver: &dyn Saver) {
    chain(saver, "t1", "", 3, None).await;
    chain(saver, "t2", "", 3, None).await;
    let q = ListQuery {
        filter: json!({"source": "loop"}).as_object().unwrap().clone(),
        ..ListQuery::thread("t1")
    };
    let l = saver.list(&q).await.unwrap();
    assert_eq!(l.len(), 2);
    assert!(l.iter().all(|t| t.config.thread_id.as_str() == "t1"));
}

/// An unknown thread lists nothing.
pub async fn list_empty_result(saver: &dyn Saver) {
    chain(saver, "t", "", 2, None).await;
    assert_eq!(count(saver, ListQuery::thread("other")).await, 0);
}

/// Listed tuples carry their pending writes.
pub async fn list_includes_pending_writes(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 2, None).await;
    write(saver, &cs[0], "task1", "", &[("a", json!("w"))]).await;
    let l = saver.list(&ListQuery::thread("t")).await.unwrap();
    assert!(l[0].pending_writes.is_empty());
    assert_eq!(json_of(&l[1].pending_writes[0].value), json!("w"));
}

/// Without a namespace, every namespace of the thread is listed.
pub async fn list_multiple_namespaces(saver: &dyn Saver) {
    chain(saver, "t", "", 2, None).await;
    chain(saver, "t", "a:1", 1, None).await;
    chain(saver, "t", "b:2", 2, None).await;
    assert_eq!(count(saver, ListQuery::thread("t")).await, 5);
}

/// Every key of a multi-key filter must match.
pub async fn list_metadata_filter_multiple_keys(saver: &dyn Saver) {
    chain(saver, "t", "", 3, Some("r1")).await;
    let q = ListQuery {
        filter: json!({"source": "loop", "step": 1, "run_id": "r1"})
            .as_object()
            .unwrap()
            .clone(),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 1);
}

/// A filter that matches nothing lists nothing.
pub async fn list_metadata_filter_no_match(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    let q = ListQuery {
        filter: json!({"source": "fork"}).as_object().unwrap().clone(),
        ..ListQuery::thread("t")
    };
    assert_eq!(count(saver, q).await, 0);
}

/// Free metadata keys can be filtered on.
pub async fn list_metadata_custom_keys(saver: &dyn Saver) {
    let mut m = metadata(CheckpointSource::Loop, 0, None);
    m.extra.insert("user".into(), json!("ann"));
    put_all(saver, cfg("t", "", None), checkpoint(&[]), m).await;
    put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[]),
        metadata(CheckpointSource::Loop, 1, None),
    )
    .await;
    let q = ListQuery {
        filter: json!({"user": "ann"}).as_object().unwrap().clone(),
        ..ListQuery::thread("t")
    };
    let l = saver.list(&q).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].metadata.extra["user"], json!("ann"));
}

// ---- delete_thread --------------------------------------------------------------------------

/// Deleting a thread removes its checkpoints.
pub async fn delete_thread_removes_checkpoints(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    saver.delete_thread(&thread("t")).await.unwrap();
    assert!(
        saver
            .get_tuple(&cfg("t", "", None))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(count(saver, ListQuery::thread("t")).await, 0);
}

/// Deleting a thread removes its writes (a re-put checkpoint has none).
pub async fn delete_thread_removes_writes(saver: &dyn Saver) {
    let cp = checkpoint(&[("a", 1, json!(1))]);
    let c = put_all(
        saver,
        cfg("t", "", None),
        cp.clone(),
        CheckpointMetadata::default(),
    )
    .await;
    write(saver, &c, "task1", "", &[("a", json!(2))]).await;
    saver.delete_thread(&thread("t")).await.unwrap();
    let c = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    assert!(get(saver, &c).await.pending_writes.is_empty());
}

/// Deleting a thread removes every namespace.
pub async fn delete_thread_removes_all_namespaces(saver: &dyn Saver) {
    chain(saver, "t", "", 1, None).await;
    chain(saver, "t", "child:1", 2, None).await;
    saver.delete_thread(&thread("t")).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 0);
}

/// Other threads survive.
pub async fn delete_thread_preserves_other_threads(saver: &dyn Saver) {
    chain(saver, "t1", "", 2, None).await;
    let keep = chain(saver, "t2", "", 2, None).await;
    write(saver, &keep[1], "task1", "", &[("a", json!(1))]).await;
    saver.delete_thread(&thread("t1")).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t2")).await, 2);
    assert_eq!(get(saver, &keep[1]).await.pending_writes.len(), 1);
}

/// Deleting an unknown thread is a no-op.
pub async fn delete_thread_nonexistent_noop(saver: &dyn Saver) {
    chain(saver, "t", "", 1, None).await;
    saver.delete_thread(&thread("nope")).await.unwrap();
    assert_eq!(count(saver, ListQuery::default()).await, 1);
}

// ---- delete_for_runs ------------------------------------------------------------------------

async fn two_runs(
    saver: &dyn Saver,
    t: &str,
    ns: &str,
) -> (Vec<CheckpointConfig>, Vec<CheckpointConfig>) {
    // Run r2's checkpoints are children of r1's, so deleting r2 never strands r1.
    let r1 = chain(saver, t, ns, 2, Some("r1")).await;
    let mut r2 = Vec::new();
    let mut parent = r1[1].clone();
    for i in 0..2u64 {
        let c = put_all(
            saver,
            parent.clone(),
            checkpoint(&[("a", 10 + i, json!(i))]),
            metadata(CheckpointSource::Loop, 10 + i as i64, Some("r2")),
        )
        .await;
        parent = c.clone();
        r2.push(c);
    }
    (r1, r2)
}

/// The checkpoints of one run are deleted.
pub async fn delete_for_runs_single(saver: &dyn Saver) {
    let (r1, _) = two_runs(saver, "t", "").await;
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    assert_eq!(
        ids(&saver.list(&ListQuery::thread("t")).await.unwrap()),
        vec![r1[1].checkpoint_id.unwrap(), r1[0].checkpoint_id.unwrap()]
    );
}

/// Several runs at once.
pub async fn delete_for_runs_multiple(saver: &dyn Saver) {
    two_runs(saver, "t", "").await;
    saver
        .delete_for_runs(&[RunId::new("r1"), RunId::new("r2")])
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 0);
}

/// Other runs survive.
pub async fn delete_for_runs_preserves_other_runs(saver: &dyn Saver) {
    two_runs(saver, "t", "").await;
    chain(saver, "u", "", 2, Some("r3")).await;
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("u")).await, 2);
    assert_eq!(count(saver, ListQuery::thread("t")).await, 2);
}

/// Writes of deleted checkpoints go too.
pub async fn delete_for_runs_removes_writes(saver: &dyn Saver) {
    let (r1, r2) = two_runs(saver, "t", "").await;
    write(saver, &r2[0], "task1", "", &[("a", json!(1))]).await;
    write(saver, &r1[1], "task1", "", &[("a", json!(2))]).await;
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    let all = saver.list(&ListQuery::thread("t")).await.unwrap();
    let writes: usize = all.iter().map(|t| t.pending_writes.len()).sum();
    assert_eq!(writes, 1);
}

/// An empty list deletes nothing.
pub async fn delete_for_runs_empty_list_noop(saver: &dyn Saver) {
    two_runs(saver, "t", "").await;
    saver.delete_for_runs(&[]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 4);
}

/// An unknown run deletes nothing.
pub async fn delete_for_runs_nonexistent_noop(saver: &dyn Saver) {
    two_runs(saver, "t", "").await;
    saver.delete_for_runs(&[RunId::new("nope")]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 4);
}

/// A run's checkpoints are deleted in every namespace.
pub async fn delete_for_runs_across_namespaces(saver: &dyn Saver) {
    two_runs(saver, "t", "").await;
    two_runs(saver, "t", "child:1").await;
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    assert_eq!(
        count(
            saver,
            ListQuery {
                checkpoint_ns: Some("child:1".into()),
                ..ListQuery::thread("t")
            }
        )
        .await,
        2
    );
    assert_eq!(count(saver, ListQuery::thread("t")).await, 4);
}

// ---- copy_thread ----------------------------------------------------------------------------

/// The latest checkpoint is copied.
pub async fn copy_thread_basic(saver: &dyn Saver) {
    let cs = chain(saver, "src", "", 2, None).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    let t = get(saver, &cfg("dst", "", None)).await;
    assert_eq!(t.checkpoint.id, cs[1].checkpoint_id.unwrap());
    assert_eq!(json_of(&t.checkpoint.channel_values["a"]), json!(1));
    assert_eq!(t.config.thread_id.as_str(), "dst");
}

/// Every checkpoint is copied.
pub async fn copy_thread_all_checkpoints(saver: &dyn Saver) {
    chain(saver, "src", "", 4, None).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("dst")).await, 4);
}

/// Metadata is copied.
pub async fn copy_thread_preserves_metadata(saver: &dyn Saver) {
    let mut m = metadata(CheckpointSource::Update, 7, Some("r"));
    m.extra.insert("k".into(), json!("v"));
    put_all(saver, cfg("src", "", None), checkpoint(&[]), m.clone()).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    assert_eq!(get(saver, &cfg("dst", "", None)).await.metadata, m);
}

/// Namespaces are copied.
pub async fn copy_thread_preserves_namespaces(saver: &dyn Saver) {
    chain(saver, "src", "", 1, None).await;
    chain(saver, "src", "sub:1", 2, None).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    assert_eq!(
        count(
            saver,
            ListQuery {
                checkpoint_ns: Some("sub:1".into()),
                ..ListQuery::thread("dst")
            }
        )
        .await,
        2
    );
}

/// Pending writes are copied.
pub async fn copy_thread_preserves_writes(saver: &dyn Saver) {
    let cs = chain(saver, "src", "", 1, None).await;
    write(saver, &cs[0], "task1", "p", &[("a", json!("w"))]).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    let ws = get(saver, &cfg("dst", "", cs[0].checkpoint_id))
        .await
        .pending_writes;
    assert_eq!(
        write_values(&ws),
        vec![("task1".into(), "a".into(), json!("w"))]
    );
    assert_eq!(ws[0].task_path.as_str(), "p");
}

/// Order and parent pointers are kept.
pub async fn copy_thread_preserves_ordering(saver: &dyn Saver) {
    chain(saver, "src", "", 3, None).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    let a = saver.list(&ListQuery::thread("src")).await.unwrap();
    let b = saver.list(&ListQuery::thread("dst")).await.unwrap();
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(
        b[0].parent_config.as_ref().and_then(|p| p.checkpoint_id),
        Some(b[1].checkpoint.id)
    );
}

/// The source is unchanged.
pub async fn copy_thread_source_unchanged(saver: &dyn Saver) {
    chain(saver, "src", "", 2, None).await;
    let before = saver.list(&ListQuery::thread("src")).await.unwrap();
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    assert_eq!(saver.list(&ListQuery::thread("src")).await.unwrap(), before);
}

/// Copying an unknown thread creates nothing.
pub async fn copy_thread_nonexistent_source(saver: &dyn Saver) {
    saver
        .copy_thread(&thread("nope"), &thread("dst"))
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("dst")).await, 0);
}

// ---- prune ----------------------------------------------------------------------------------

/// Keep-latest leaves one checkpoint.
pub async fn prune_keep_latest_single_thread(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 4, None).await;
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(
        ids(&saver.list(&ListQuery::thread("t")).await.unwrap()),
        vec![cs[3].checkpoint_id.unwrap()]
    );
    assert_eq!(
        json_of(&get(saver, &cs[3]).await.checkpoint.channel_values["a"]),
        json!(3)
    );
}

/// Keep-latest on several threads.
pub async fn prune_keep_latest_multiple_threads(saver: &dyn Saver) {
    let a = chain(saver, "t1", "", 3, None).await;
    let b = chain(saver, "t2", "", 2, None).await;
    saver
        .prune(&[thread("t1"), thread("t2")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::default()).await, 2);
    // The latest of each thread is the one kept.
    for head in [&a[2], &b[1]] {
        assert!(saver.get_tuple(head).await.unwrap().is_some(), "{head:?}");
    }
}

/// Keep-latest keeps the latest of each namespace.
pub async fn prune_keep_latest_across_namespaces(saver: &dyn Saver) {
    let root = chain(saver, "t", "", 3, None).await;
    let sub = chain(saver, "t", "sub:1", 3, None).await;
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 2);
    // The latest of each namespace is the one kept.
    for head in [&root[2], &sub[2]] {
        assert!(saver.get_tuple(head).await.unwrap().is_some(), "{head:?}");
    }
}

/// The kept checkpoint keeps its pending writes.
pub async fn prune_keep_latest_preserves_writes(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, None).await;
    write(saver, &cs[2], "task1", "", &[("a", json!("keep"))]).await;
    write(saver, &cs[0], "task1", "", &[("a", json!("drop"))]).await;
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(
        json_of(&get(saver, &cs[2]).await.pending_writes[0].value),
        json!("keep")
    );
}

/// The delete strategy removes the thread.
pub async fn prune_delete_all(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    saver
        .prune(&[thread("t")], PruneStrategy::Delete)
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 0);
}

/// Unlisted threads are untouched.
pub async fn prune_preserves_other_threads(saver: &dyn Saver) {
    chain(saver, "t1", "", 3, None).await;
    chain(saver, "t2", "", 3, None).await;
    saver
        .prune(&[thread("t1")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::thread("t2")).await, 3);
}

/// An empty thread list prunes nothing.
pub async fn prune_empty_list_noop(saver: &dyn Saver) {
    chain(saver, "t", "", 3, None).await;
    saver.prune(&[], PruneStrategy::Delete).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 3);
}

/// Pruning an unknown thread is a no-op.
pub async fn prune_nonexistent_noop(saver: &dyn Saver) {
    chain(saver, "t", "", 2, None).await;
    saver
        .prune(&[thread("nope")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(count(saver, ListQuery::default()).await, 2);
}

// ---- delta history --------------------------------------------------------------------------

/// One step of a delta fixture chain.
pub struct Step {
    /// A snapshot value of channel `ch` stored at this checkpoint (a JSON list), if any.
    pub snapshot: Option<Value>,
    /// Writes to channel `ch` stored against this checkpoint (by one task each).
    pub writes: Vec<Value>,
}

/// Builds a delta chain on channel `ch`: every checkpoint bumps the channel's version; only
/// snapshot steps store a value (a `Snapshot` message list when `messages`, else JSON).
pub async fn delta_chain(
    saver: &dyn Saver,
    t: &str,
    ch: &str,
    steps: &[Step],
) -> Vec<CheckpointConfig> {
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let mut cp = Checkpoint::empty();
        let v = ChannelVersion::new(i as u64 + 1);
        cp.channel_versions.insert(ch.into(), v);
        if let Some(value) = &s.snapshot {
            let blob = match value.as_array() {
                Some(items) => Blob::messages(MessagesKind::Snapshot, items).unwrap(),
                None => Blob::json(value).unwrap(),
            };
            cp.channel_values.insert(ch.into(), blob);
        }
        let parent = out.last().cloned().unwrap_or_else(|| cfg(t, "", None));
        let nv: ChannelVersions = [(ChannelName::new(ch), v)].into();
        // No mode marker: the walk is the same in both modes, and the suite runs on full-mode stores too.
        let m = metadata(CheckpointSource::Loop, i as i64, None);
        let c = saver.put(&parent, cp, m, &nv).await.unwrap();
        for (k, w) in s.writes.iter().enumerate() {
            let blob = Blob::messages(MessagesKind::Write, std::slice::from_ref(w)).unwrap();
            saver
                .put_writes(
                    &c,
                    vec![(ch.into(), blob)],
                    &TaskId::new(format!("task-{i}-{k}")),
                    &TaskPath::new(format!("~{k}")),
                )
                .await
                .unwrap();
        }
        out.push(c);
    }
    out
}

fn step(snapshot: Option<Value>, writes: &[Value]) -> Step {
    Step {
        snapshot,
        writes: writes.to_vec(),
    }
}

async fn history(
    saver: &dyn Saver,
    at: &CheckpointConfig,
    chs: &[&str],
) -> BTreeMap<ChannelName, crate::model::DeltaChannelHistory> {
    let chs: Vec<ChannelName> = chs.iter().map(|c| ChannelName::new(*c)).collect();
    saver.delta_channel_history(at, &chs).await.unwrap()
}

fn flat(h: &crate::model::DeltaChannelHistory) -> Vec<Value> {
    h.writes
        .iter()
        .flat_map(|w| match json_of(&w.value) {
            Value::Array(items) => items,
            other => vec![other],
        })
        .collect()
}

/// Writes come back oldest first.
pub async fn history_returns_writes_oldest_first(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(None, &[json!("a")]),
            step(None, &[json!("b"), json!("c")]),
            step(None, &[json!("d")]),
            step(None, &[]),
        ],
    )
    .await;
    let h = history(saver, &cs[3], &["m"]).await;
    assert_eq!(
        flat(&h["m"]),
        vec![json!("a"), json!("b"), json!("c"), json!("d")]
    );
    assert!(h["m"].seed.is_none());
}

/// The seed is the nearest snapshot on the path.
pub async fn history_seed_is_nearest_snapshot(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(Some(json!(["s0"])), &[json!("a")]),
            step(Some(json!(["s0", "a"])), &[json!("b")]),
            step(None, &[json!("c")]),
            step(None, &[]),
        ],
    )
    .await;
    let h = history(saver, &cs[3], &["m"]).await;
    assert_eq!(json_of(h["m"].seed.as_ref().unwrap()), json!(["s0", "a"]));
    assert_eq!(h["m"].seed_checkpoint, cs[1].checkpoint_id);
    assert_eq!(flat(&h["m"]), vec![json!("b"), json!("c")]);
}

/// The target's own writes are not part of its history.
pub async fn history_excludes_target_pending_writes(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[step(None, &[json!("a")]), step(None, &[json!("own")])],
    )
    .await;
    assert_eq!(
        flat(&history(saver, &cs[1], &["m"]).await["m"]),
        vec![json!("a")]
    );
}

/// Each channel stops at its own nearest stored value.
pub async fn history_multi_channel(saver: &dyn Saver) {
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for i in 0..4u64 {
        let mut cp = Checkpoint::empty();
        let v = ChannelVersion::new(i + 1);
        cp.channel_versions.insert("x".into(), v);
        cp.channel_versions.insert("y".into(), v);
        if i == 0 {
            cp.channel_values
                .insert("y".into(), Blob::json(&json!(["y0"])).unwrap());
        }
        if i == 2 {
            cp.channel_values
                .insert("x".into(), Blob::json(&json!(["x2"])).unwrap());
        }
        let parent = out.last().cloned().unwrap_or_else(|| cfg("t", "", None));
        let c = put_all(saver, parent, cp, CheckpointMetadata::default()).await;
        write(
            saver,
            &c,
            &format!("task{i}"),
            "",
            &[("x", json!(format!("x{i}"))), ("y", json!(format!("y{i}")))],
        )
        .await;
        out.push(c);
    }
    let h = history(saver, &out[3], &["x", "y"]).await;
    assert_eq!(json_of(h["x"].seed.as_ref().unwrap()), json!(["x2"]));
    assert_eq!(flat(&h["x"]), vec![json!("x2")]);
    assert_eq!(json_of(h["y"].seed.as_ref().unwrap()), json!(["y0"]));
    assert_eq!(flat(&h["y"]), vec![json!("y0"), json!("y1"), json!("y2")]);
}

/// No channels asked, nothing returned.
pub async fn history_empty_channels_returns_empty(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[step(None, &[json!("a")]), step(None, &[])],
    )
    .await;
    assert!(
        saver
            .delta_channel_history(&cs[1], &[])
            .await
            .unwrap()
            .is_empty()
    );
}

/// Reaching the root without a stored value gives no seed and every write.
pub async fn history_walk_to_root_no_seed(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(None, &[json!("a")]),
            step(None, &[json!("b")]),
            step(None, &[]),
        ],
    )
    .await;
    let h = history(saver, &cs[2], &["m"]).await;
    assert!(h["m"].seed.is_none() && h["m"].seed_checkpoint.is_none());
    assert_eq!(flat(&h["m"]).len(), 2);
}

/// The walk for a channel stops at the nearest full record that has no version of it: the
/// channel was empty there, so nothing older belongs to its value (here an older write that
/// was never applied), and a pruned history beyond it is not needed.
pub async fn antler_history_stops_at_a_full_record_without_the_channel(saver: &dyn Saver) {
    let c0 = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("x", 1, json!(0))]),
        CheckpointMetadata::default(),
    )
    .await;
    write(
        saver,
        &c0,
        "abandoned",
        "",
        &[("m", json!("never applied"))],
    )
    .await;
    let mut cp1 = Checkpoint::empty();
    cp1.channel_versions.insert("x".into(), 1.into());
    let c1 = put_all(saver, c0, cp1, CheckpointMetadata::default()).await;
    write(saver, &c1, "task", "", &[("m", json!("a"))]).await;
    let mut cp2 = Checkpoint::empty();
    cp2.channel_versions.insert("x".into(), 1.into());
    cp2.channel_versions.insert("m".into(), 2.into());
    let c2 = saver
        .put(
            &c1,
            cp2,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let h = history(saver, &c2, &["m"]).await;
    assert!(h["m"].seed.is_none() && h["m"].seed_checkpoint.is_none());
    assert_eq!(flat(&h["m"]), vec![json!("a")]);
}

/// A legacy plain (full-mode JSON) value is a seed.
pub async fn history_migration_plain_value_as_seed(saver: &dyn Saver) {
    let c0 = put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("m", 1, json!(["p1", "p2"]))]),
        CheckpointMetadata::default(),
    )
    .await;
    // The first delta step: same version (unchanged by the input step), delta writes on top.
    let mut cp1 = Checkpoint::empty();
    cp1.channel_versions.insert("m".into(), 1.into());
    let c1 = saver
        .put(
            &c0,
            cp1,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let blob = Blob::messages(MessagesKind::Write, &[json!("d1")]).unwrap();
    saver
        .put_writes(
            &c1,
            vec![("m".into(), blob)],
            &TaskId::new("task"),
            &TaskPath::default(),
        )
        .await
        .unwrap();
    let mut cp2 = Checkpoint::empty();
    cp2.channel_versions.insert("m".into(), 2.into());
    let nv: ChannelVersions = [(ChannelName::new("m"), ChannelVersion::new(2))].into();
    let c2 = saver
        .put(&c1, cp2, CheckpointMetadata::default(), &nv)
        .await
        .unwrap();
    let h = history(saver, &c2, &["m"]).await;
    assert_eq!(json_of(h["m"].seed.as_ref().unwrap()), json!(["p1", "p2"]));
    assert_eq!(flat(&h["m"]), vec![json!("d1")]);
}

/// The seed ancestor's own writes are part of the history.
pub async fn history_seed_ancestor_own_writes_are_replayed(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(Some(json!(["s"])), &[json!("after-seed")]),
            step(None, &[]),
        ],
    )
    .await;
    let h = history(saver, &cs[1], &["m"]).await;
    assert_eq!(json_of(h["m"].seed.as_ref().unwrap()), json!(["s"]));
    assert_eq!(flat(&h["m"]), vec![json!("after-seed")]);
}

// ---- antler's own obligations ---------------------------------------------------------------

/// A relative record is completed from its parent's, so a put of one whose parent does not
/// exist in its namespace (never put, or deleted by a `delete_for_runs` while a run held it
/// as its head) fails with [`crate::Error::MissingParent`] and stores nothing, where it used
/// to leave a record no other reader could complete; one without a parent is bad input.
pub async fn antler_a_relative_record_needs_its_parent(saver: &dyn Saver) {
    let stored = chain(saver, "t", "", 2, Some("r1")).await;
    let head = stored[1].checkpoint_id.expect("stored");
    let relative = |id: CheckpointId| {
        let mut cp = checkpoint(&[("a", 7, json!(7))]);
        cp.id = id;
        cp.v = crate::model::RELATIVE_RECORD_V;
        cp
    };
    let versions = ChannelVersions::from([(ChannelName::new("a"), ChannelVersion::new(7))]);
    // Below an existing parent, in its namespace: stored.
    let below = saver
        .put(
            &cfg("t", "", Some(head)),
            relative(CheckpointId::generate()),
            metadata(CheckpointSource::Loop, 1, Some("r1")),
            &versions,
        )
        .await
        .unwrap();
    let refused = |e: crate::Error, what: &str| {
        assert!(
            matches!(e, crate::Error::MissingParent { .. }),
            "{what}: {e}"
        );
        assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
        assert!(e.to_string().contains("thread t"), "{what}: {e}");
    };
    let unknown = CheckpointId::generate();
    let err = saver
        .put(
            &cfg("t", "", Some(unknown)),
            relative(CheckpointId::generate()),
            metadata(CheckpointSource::Loop, 1, None),
            &ChannelVersions::new(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&unknown.to_string()), "{err}");
    refused(err, "a parent never put");
    // Reported before a version clash (the chain stores other bytes under `a` 1).
    let mut clashing = relative(CheckpointId::generate());
    clashing
        .channel_versions
        .insert("a".into(), ChannelVersion::new(1));
    clashing
        .channel_values
        .insert("a".into(), Blob::json(&"other").unwrap());
    refused(
        saver
            .put(
                &cfg("t", "", Some(unknown)),
                clashing,
                metadata(CheckpointSource::Loop, 1, None),
                &ChannelVersions::from([(ChannelName::new("a"), ChannelVersion::new(1))]),
            )
            .await
            .unwrap_err(),
        "a parent never put, and a clash",
    );
    // The parent exists, but in another namespace.
    refused(
        saver
            .put(
                &cfg("t", "child", Some(head)),
                relative(CheckpointId::generate()),
                metadata(CheckpointSource::Loop, 1, None),
                &ChannelVersions::new(),
            )
            .await
            .unwrap_err(),
        "a parent of another namespace",
    );
    let err = saver
        .put(
            &cfg("t", "", None),
            relative(CheckpointId::generate()),
            metadata(CheckpointSource::Loop, 1, None),
            &ChannelVersions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "no parent: {err}");
    // A run's head deleted under it (nothing remaining needs run r1's checkpoints), then the
    // run's next record, written relative to the head it still holds: refused, with its
    // values and bodies, and the thread stays as the delete left it.
    saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
    let gone = below.checkpoint_id.expect("stored");
    let next = CheckpointId::generate();
    let mut cp = relative(next);
    cp.channel_versions
        .insert("a".into(), ChannelVersion::new(8));
    cp.channel_values
        .insert("a".into(), Blob::json(&"refused").unwrap());
    refused(
        saver
            .put(
                &cfg("t", "", Some(gone)),
                cp,
                metadata(CheckpointSource::Loop, 2, Some("r1")),
                &ChannelVersions::from([(ChannelName::new("a"), ChannelVersion::new(8))]),
            )
            .await
            .unwrap_err(),
        "a parent deleted under the run",
    );
    assert!(
        saver
            .get_tuple(&cfg("t", "", Some(next)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        saver
            .get_tuple(&cfg("t", "", None))
            .await
            .unwrap()
            .is_none()
    );
    // The refused put left no value: another one under the same version is no clash.
    put_all(
        saver,
        cfg("t", "", None),
        checkpoint(&[("a", 8, json!("stored"))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
}

/// A NUL character in a text key (thread id, namespace, channel, task id or path, run id) is
/// the caller's bad input on every saver, refused before anything is read or written:
/// PostgreSQL's text columns cannot hold one, and its own error read as a backend error,
/// while the other savers stored the key.
pub async fn antler_a_nul_character_in_a_key_is_invalid_input(saver: &dyn Saver) {
    let stored = chain(saver, "t", "", 1, None).await;
    let head = stored[0].checkpoint_id.expect("stored");
    let refused = |e: crate::Error, what: &str| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
        assert!(e.to_string().contains("NUL"), "{what}: {e}");
    };
    let mut cp = checkpoint(&[("a", 9, json!(1))]);
    let versions = cp.channel_versions.clone();
    refused(
        saver
            .put(
                &cfg("a\0b", "", None),
                cp.clone(),
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .unwrap_err(),
        "put on such a thread",
    );
    refused(
        saver
            .put(
                &cfg("t", "n\0s", None),
                cp.clone(),
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .unwrap_err(),
        "put in such a namespace",
    );
    refused(
        saver
            .put(
                &cfg("t", "", Some(head)),
                cp.clone(),
                metadata(CheckpointSource::Loop, 1, Some("r\0")),
                &versions,
            )
            .await
            .unwrap_err(),
        "put with such a run id",
    );
    cp.channel_versions
        .insert(ChannelName::new("c\0"), ChannelVersion::new(10));
    let versions = cp.channel_versions.clone();
    refused(
        saver
            .put(
                &cfg("t", "", Some(head)),
                cp,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .unwrap_err(),
        "put of such a channel",
    );
    for (writes, task, path, what) in [
        (
            vec![("c\0".into(), Blob::Null)],
            "x",
            "",
            "a write to such a channel",
        ),
        (
            vec![("a".into(), Blob::Null)],
            "x\0",
            "",
            "a write of such a task",
        ),
        (
            vec![("a".into(), Blob::Null)],
            "x",
            "p\0",
            "a write at such a task path",
        ),
    ] {
        refused(
            saver
                .put_writes(
                    &cfg("t", "", Some(head)),
                    writes,
                    &TaskId::new(task),
                    &TaskPath::new(path),
                )
                .await
                .unwrap_err(),
            what,
        );
    }
    refused(
        saver.get_tuple(&cfg("a\0b", "", None)).await.unwrap_err(),
        "a read",
    );
    refused(
        saver.list(&ListQuery::thread("a\0b")).await.unwrap_err(),
        "a listing",
    );
    refused(
        saver
            .delete_thread(&ThreadId::new("a\0b"))
            .await
            .unwrap_err(),
        "a delete",
    );
    refused(
        saver
            .delete_for_runs(&[RunId::new("r\0")])
            .await
            .unwrap_err(),
        "a delete of runs",
    );
    refused(
        saver
            .copy_thread(&ThreadId::new("t"), &ThreadId::new("a\0b"))
            .await
            .unwrap_err(),
        "a copy",
    );
    // Nothing of the refused writes was stored.
    let all = saver.list(&ListQuery::default()).await.expect("list");
    assert_eq!(all.len(), 1, "only the first checkpoint");
    assert!(all[0].pending_writes.is_empty());
}

/// A write for an unknown checkpoint is a typed error naming it, also with no writes at all.
pub async fn antler_put_writes_unknown_checkpoint_is_error(saver: &dyn Saver) {
    chain(saver, "t", "", 1, None).await;
    let missing = CheckpointId::generate();
    let err = saver
        .put_writes(
            &cfg("t", "", Some(missing)),
            vec![("a".into(), Blob::Null)],
            &TaskId::new("x"),
            &TaskPath::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string().contains(&missing.to_string()) && err.to_string().contains("thread t"),
        "{err}"
    );
    // No writes at all: refused alike for an unknown checkpoint, nothing stored for a known one.
    let err = saver
        .put_writes(
            &cfg("t", "", Some(missing)),
            Vec::new(),
            &TaskId::new("x"),
            &TaskPath::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let known = saver
        .get_tuple(&cfg("t", "", None))
        .await
        .unwrap()
        .expect("the chain's checkpoint");
    saver
        .put_writes(
            &known.config,
            Vec::new(),
            &TaskId::new("x"),
            &TaskPath::default(),
        )
        .await
        .expect("an empty write on a known checkpoint");
    let after = saver
        .get_tuple(&known.config)
        .await
        .unwrap()
        .expect("still there");
    assert_eq!(after.pending_writes.len(), known.pending_writes.len());
}

/// A write refused because its checkpoint does not exist stores nothing, and the saver does
/// not remember its message bodies as stored either: a later checkpoint listing the same
/// message reads it back whole (before, the index kept the refused body's number and the next
/// snapshot referenced a body no row held).
pub async fn antler_a_refused_write_leaves_no_message_behind(saver: &dyn Saver) {
    let m0 = json!({"type": "human", "content": "first", "id": "0"});
    let m1 = json!({"type": "ai", "content": "refused once", "id": "1"});
    let snapshot = |items: &[Value]| Blob::messages(MessagesKind::Snapshot, items).unwrap();
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 1.into());
    cp.channel_values
        .insert("messages".into(), snapshot(std::slice::from_ref(&m0)));
    let c1 = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    let missing = CheckpointId::generate();
    let err = saver
        .put_writes(
            &cfg("t", "", Some(missing)),
            vec![(
                "messages".into(),
                Blob::messages(MessagesKind::Write, std::slice::from_ref(&m1)).unwrap(),
            )],
            &TaskId::new("x"),
            &TaskPath::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let both = snapshot(&[m0, m1]);
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 2.into());
    cp.channel_values.insert("messages".into(), both.clone());
    let c2 = put_all(saver, c1, cp, CheckpointMetadata::default()).await;
    assert_eq!(
        get(saver, &c2).await.checkpoint.channel_values["messages"],
        both
    );
}

/// A walk that meets a missing parent fails naming thread and checkpoints.
pub async fn antler_history_missing_parent_is_error(saver: &dyn Saver) {
    let ghost = CheckpointId::generate();
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("m".into(), 1.into());
    let c = saver
        .put(
            &cfg("t", "", Some(ghost)),
            cp,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let err = saver
        .delta_channel_history(&c, &["m".into()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains(&ghost.to_string()), "{err}");
}

/// A relative record that does not list a channel carries its parent's version of it, so its
/// parent's writes to the channel were not applied on this path (a sibling branch applied
/// them): the walk from below must not replay them. Here `s` stores `m` and has a write to it
/// that only another branch applied; `u`, an update on `s` written as a relative record,
/// carries `m` unchanged and has its own write, which `c` (moving `m`) applied.
pub async fn antler_history_skips_writes_a_relative_child_did_not_apply(saver: &dyn Saver) {
    let mut s_cp = checkpoint(&[("m", 1, json!(["s"]))]);
    s_cp.v = 2;
    let s = put_all(
        saver,
        cfg("t", "", None),
        s_cp,
        metadata(CheckpointSource::Loop, 0, None),
    )
    .await;
    write(saver, &s, "sibling", "a", &[("m", json!(["sibling"]))]).await;
    let mut u_cp = Checkpoint::empty();
    u_cp.v = crate::model::RELATIVE_RECORD_V;
    let u = saver
        .put(
            &s,
            u_cp,
            metadata(CheckpointSource::Update, 1, None),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    write(saver, &u, "task", "b", &[("m", json!(["u"]))]).await;
    let mut c_cp = Checkpoint::empty();
    c_cp.v = crate::model::RELATIVE_RECORD_V;
    c_cp.channel_versions.insert("m".into(), 2.into());
    let c = saver
        .put(
            &u,
            c_cp,
            metadata(CheckpointSource::Loop, 2, None),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let history = saver
        .delta_channel_history(&c, &["m".into()])
        .await
        .unwrap()
        .remove(&ChannelName::new("m"))
        .unwrap();
    assert_eq!(history.seed.as_ref().map(json_of), Some(json!(["s"])));
    assert_eq!(
        write_values(&history.writes),
        vec![("task".to_owned(), "m".to_owned(), json!(["u"]))],
        "only the write the path applied"
    );
}

/// Two checkpoints `a` and `b` of thread `t` whose parent pointers form a cycle (`a` → `b` →
/// `a`), each listing `channel` at version 1 if given.
async fn put_parent_cycle(
    saver: &dyn Saver,
    channel: Option<&str>,
) -> (CheckpointId, CheckpointId) {
    let (a, b) = (CheckpointId::generate(), CheckpointId::generate());
    for (id, parent) in [(a, b), (b, a)] {
        let mut cp = Checkpoint::empty();
        cp.id = id;
        if let Some(c) = channel {
            cp.channel_versions.insert(c.into(), 1.into());
        }
        saver
            .put(
                &cfg("t", "", Some(parent)),
                cp,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
    }
    (a, b)
}

/// A parent cycle is an error, not an endless walk.
pub async fn antler_history_parent_cycle_is_error(saver: &dyn Saver) {
    let (a, b) = put_parent_cycle(saver, Some("m")).await;
    let err = saver
        .delta_channel_history(&cfg("t", "", Some(a)), &["m".into()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    // Named: the thread, and a checkpoint of the cycle.
    let text = err.to_string();
    assert!(text.contains("thread t"), "{text}");
    assert!(
        text.contains(&a.to_string()) || text.contains(&b.to_string()),
        "{text}"
    );
}

/// A version bump without a stored value does not hide an older seed.
pub async fn antler_history_version_bump_without_value_keeps_older_seed(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(Some(json!(["seed"])), &[json!("w0")]),
            step(None, &[json!("w1")]),
            step(None, &[]),
        ],
    )
    .await;
    let h = history(saver, &cs[2], &["m"]).await;
    assert_eq!(json_of(h["m"].seed.as_ref().unwrap()), json!(["seed"]));
    assert_eq!(flat(&h["m"]), vec![json!("w0"), json!("w1")]);
}

/// A stored `Null` is a value (a seed), unlike an absent one.
pub async fn antler_history_null_value_is_a_seed(saver: &dyn Saver) {
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("m".into(), 1.into());
    cp.channel_values.insert("m".into(), Blob::Null);
    let c0 = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    let mut cp1 = Checkpoint::empty();
    cp1.channel_versions.insert("m".into(), 2.into());
    let c1 = saver
        .put(
            &c0,
            cp1,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap();
    let h = history(saver, &c1, &["m"]).await;
    assert_eq!(h["m"].seed, Some(Blob::Null));
}

/// A walk from an unknown checkpoint is an error; from an empty thread it is empty.
pub async fn antler_history_unknown_checkpoint_is_error(saver: &dyn Saver) {
    let err = saver
        .delta_channel_history(&cfg("t", "", Some(CheckpointId::generate())), &["m".into()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let h = history(saver, &cfg("t", "", None), &["m"]).await;
    assert!(h["m"].seed.is_none() && h["m"].writes.is_empty());
}

/// `copy_thread` onto a thread that stores other message bodies under the numbers the source
/// uses fails with a conflict naming the target, and copies nothing; a copy onto a thread
/// without bodies (or with the same ones) succeeds.
pub async fn antler_copy_thread_refuses_other_bodies_under_the_same_numbers(saver: &dyn Saver) {
    let put_list = |thread: &'static str, text: &'static str| async move {
        let list = [json!({"type": "human", "content": text, "id": "1"})];
        let blob = Blob::messages(MessagesKind::Snapshot, &list).unwrap();
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 1.into());
        cp.channel_values.insert("messages".into(), blob.clone());
        let c = put_all(
            saver,
            cfg(thread, "", None),
            cp,
            CheckpointMetadata::default(),
        )
        .await;
        (c, blob)
    };
    put_list("src", "from the source").await;
    let (own, own_blob) = put_list("dst", "the target's own").await;
    let err = saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("dst"), "{err}");
    assert_eq!(
        get(saver, &own).await.checkpoint.channel_values["messages"],
        own_blob
    );
    assert_eq!(count(saver, ListQuery::thread("dst")).await, 1);
    saver
        .copy_thread(&thread("src"), &thread("new"))
        .await
        .unwrap();
    // The same bodies again: nothing collides.
    saver
        .copy_thread(&thread("src"), &thread("new"))
        .await
        .unwrap();
}

/// A copy onto a thread that stores another value under a channel version the source uses
/// is a `Conflict` and copies nothing: overwriting the value would change what the target's
/// own checkpoints read. The same values again copy fine.
pub async fn antler_copy_thread_refuses_other_values_under_the_same_versions(saver: &dyn Saver) {
    let src = put_all(
        saver,
        cfg("src", "", None),
        checkpoint(&[("title", 1, json!("theirs"))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    let own = put_all(
        saver,
        cfg("dst", "", None),
        checkpoint(&[("title", 1, json!("mine"))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    let err = saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("dst"), "{err}");
    assert_eq!(
        json_of(&get(saver, &own).await.checkpoint.channel_values["title"]),
        json!("mine")
    );
    assert_eq!(count(saver, ListQuery::thread("dst")).await, 1);
    // The same value under the same version is no collision.
    put_all(
        saver,
        cfg("same", "", None),
        checkpoint(&[("title", 1, json!("theirs"))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    saver
        .copy_thread(&thread("src"), &thread("same"))
        .await
        .unwrap();
    let copied = cfg("same", "", src.checkpoint_id);
    assert_eq!(
        json_of(&get(saver, &copied).await.checkpoint.channel_values["title"]),
        json!("theirs")
    );
}

/// A copy onto a thread whose own pending write or checkpoint row differs from the source's
/// under the same key is a `Conflict` and copies nothing: replacing it would change what the
/// target's checkpoints read (a pending write is insert-if-absent everywhere else). The same
/// rows again copy fine.
pub async fn antler_copy_thread_refuses_other_writes_or_checkpoints_under_the_same_keys(
    saver: &dyn Saver,
) {
    let src = chain(saver, "src", "", 1, None).await;
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    // Copying the same rows again is no collision.
    saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap();
    let at_dst = cfg("dst", "", src[0].checkpoint_id);
    write(saver, &at_dst, "k", "", &[("m", json!("mine"))]).await;
    write(saver, &src[0], "k", "", &[("m", json!("theirs"))]).await;
    let err = saver
        .copy_thread(&thread("src"), &thread("dst"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("pending writes"), "{err}");
    assert_eq!(
        write_values(&get(saver, &at_dst).await.pending_writes),
        vec![("k".into(), "m".into(), json!("mine"))]
    );
    // A checkpoint stored on both threads under one id with other metadata.
    let cp = checkpoint(&[("a", 1, json!(0))]);
    let shared = put_all(
        saver,
        cfg("one", "", None),
        cp.clone(),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    put_all(
        saver,
        cfg("two", "", None),
        cp,
        metadata(CheckpointSource::Update, 7, None),
    )
    .await;
    let err = saver
        .copy_thread(&thread("one"), &thread("two"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("checkpoints"), "{err}");
    let kept = get(saver, &cfg("two", "", shared.checkpoint_id)).await;
    assert_eq!(kept.metadata.step, 7);
}

/// Message lists round-trip item by item, including repeated and shared items.
pub async fn antler_messages_blob_round_trips(saver: &dyn Saver) {
    let items = vec![
        json!({"type": "human", "content": "hi", "id": "1"}),
        json!({"type": "ai", "content": "yo", "id": "2"}),
        json!({"type": "human", "content": "hi", "id": "1"}),
    ];
    let blob = Blob::messages(MessagesKind::Snapshot, &items).unwrap();
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 1.into());
    cp.channel_values.insert("messages".into(), blob.clone());
    let c = put_all(saver, cfg("t", "", None), cp, CheckpointMetadata::default()).await;
    let w = Blob::messages(MessagesKind::Write, &items[1..]).unwrap();
    saver
        .put_writes(
            &c,
            vec![("messages".into(), w.clone())],
            &TaskId::new("task"),
            &TaskPath::default(),
        )
        .await
        .unwrap();
    let t = get(saver, &c).await;
    assert_eq!(t.checkpoint.channel_values["messages"], blob);
    assert_eq!(t.pending_writes[0].value, w);
    saver.copy_thread(&thread("t"), &thread("u")).await.unwrap();
    assert_eq!(
        get(saver, &cfg("u", "", None))
            .await
            .checkpoint
            .channel_values["messages"],
        blob
    );
}

/// Keep-latest keeps every ancestor a delta head needs, so the history is unchanged.
pub async fn antler_prune_keep_latest_keeps_delta_history(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(Some(json!(["s0"])), &[json!("a")]),
            step(None, &[json!("b")]),
            step(Some(json!(["s0", "a", "b"])), &[json!("c")]),
            step(None, &[json!("d")]),
            step(None, &[]),
        ],
    )
    .await;
    let before = history(saver, &cs[4], &["m"]).await;
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(history(saver, &cs[4], &["m"]).await, before);
    assert_eq!(count(saver, ListQuery::thread("t")).await, 3);
    assert!(saver.get_tuple(&cs[0]).await.unwrap().is_none());
}

/// Deleting a run keeps those of its checkpoints a remaining checkpoint needs to stay readable
/// (runtime-spec §5.8: its delta history replays from them) and deletes the others: the
/// remaining checkpoints read as before. Before, the call refused (`Conflict`) and deleted
/// nothing, which on a thread the graph runtime wrote meant almost any run but the newest.
pub async fn antler_delete_for_runs_keeps_what_remaining_checkpoints_need(saver: &dyn Saver) {
    // Run r1 also wrote thread `a`, where nothing else remains: all of it goes.
    chain(saver, "a", "", 2, Some("r1")).await;
    // On `t` and `s`, r1 writes two checkpoints and r2 two after them. No checkpoint of `t`
    // stores a value of `m` (each replays every write before it); on `s`, r2's first stores
    // one, so r2's checkpoints need nothing of r1.
    let mut lines: BTreeMap<&str, Vec<CheckpointConfig>> = BTreeMap::new();
    for t in ["t", "s"] {
        let mut out: Vec<CheckpointConfig> = Vec::new();
        for (i, run) in ["r1", "r1", "r2", "r2"].iter().enumerate() {
            let mut cp = Checkpoint::empty();
            let v = ChannelVersion::new(i as u64 + 1);
            cp.channel_versions.insert("m".into(), v);
            let mut new_versions = ChannelVersions::new();
            if t == "s" && i == 2 {
                cp.channel_values
                    .insert("m".into(), Blob::json(&json!([0, 1])).unwrap());
                new_versions.insert("m".into(), v);
            }
            let parent = out.last().cloned().unwrap_or_else(|| cfg(t, "", None));
            let c = saver
                .put(
                    &parent,
                    cp,
                    metadata(CheckpointSource::Loop, i as i64, Some(run)),
                    &new_versions,
                )
                .await
                .unwrap();
            write(saver, &c, "task", "", &[("m", json!(i))]).await;
            out.push(c);
        }
        lines.insert(t, out);
    }
    let t_before = history(saver, &lines["t"][3], &["m"]).await;
    let s_before = history(saver, &lines["s"][3], &["m"]).await;
    saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("a")).await, 0);
    // `t`: r2's checkpoints replay from r1's, which stay, writes included.
    assert_eq!(count(saver, ListQuery::thread("t")).await, 4);
    assert_eq!(history(saver, &lines["t"][3], &["m"]).await, t_before);
    // `s`: r1's checkpoints are needed by none and go.
    assert_eq!(count(saver, ListQuery::thread("s")).await, 2);
    assert!(saver.get_tuple(&lines["s"][0]).await.unwrap().is_none());
    assert_eq!(history(saver, &lines["s"][3], &["m"]).await, s_before);
    // r2's checkpoints are needed by none (r1's kept ones are their ancestors).
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("t")).await, 2);
    assert!(saver.get_tuple(&lines["t"][1]).await.unwrap().is_some());
    assert_eq!(count(saver, ListQuery::thread("s")).await, 0);

    // Thread `g`: r1's root checkpoint `c`, where a subgraph task runs in namespace `sub`;
    // r1 and then r3 (a resume that stored nothing at the root) wrote the subgraph's
    // checkpoints, which name `c` as their enclosing checkpoint. Deleting r1 keeps `c` with
    // the subgraph checkpoint r3's needs.
    let c = chain(saver, "g", "", 1, Some("r1")).await.remove(0);
    let mut below: Vec<CheckpointConfig> = Vec::new();
    for (i, run) in ["r1", "r3"].iter().enumerate() {
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("m".into(), ChannelVersion::new(i as u64 + 1));
        let mut meta = metadata(CheckpointSource::Loop, i as i64, Some(run));
        meta.parents
            .insert(CheckpointNs::root(), c.checkpoint_id.unwrap());
        let parent = below
            .last()
            .cloned()
            .unwrap_or_else(|| cfg("g", "sub", None));
        let at = saver
            .put(&parent, cp, meta, &ChannelVersions::new())
            .await
            .unwrap();
        below.push(at);
    }
    saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
    assert!(
        saver.get_tuple(&c).await.unwrap().is_some(),
        "the enclosing checkpoint stays"
    );
    assert!(saver.get_tuple(&below[0]).await.unwrap().is_some());
    // Once r3 goes, nothing holds them.
    saver.delete_for_runs(&[RunId::new("r3")]).await.unwrap();
    saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
    assert_eq!(count(saver, ListQuery::thread("g")).await, 0);
}

/// A copied delta thread has the same history.
pub async fn antler_copy_thread_keeps_delta_history(saver: &dyn Saver) {
    let cs = delta_chain(
        saver,
        "t",
        "m",
        &[
            step(Some(json!(["s0"])), &[json!("a")]),
            step(None, &[json!("b")]),
            step(None, &[]),
        ],
    )
    .await;
    saver.copy_thread(&thread("t"), &thread("u")).await.unwrap();
    let a = history(saver, &cs[2], &["m"]).await;
    let b = history(saver, &cfg("u", "", cs[2].checkpoint_id), &["m"]).await;
    assert_eq!(a, b);
}

/// Pending writes sort by task path, then task id, then index; writes without a path first.
pub async fn antler_writes_sorted_by_task_path_then_task_id_then_idx(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(saver, &c, "b", "~1", &[("a", json!(1)), ("a", json!(2))]).await;
    write(saver, &c, "a", "~1", &[("a", json!(3))]).await;
    write(saver, &c, "z", "", &[("a", json!(4))]).await;
    write(saver, &c, "c", "~0", &[("__error__", json!(5))]).await;
    let order: Vec<Value> = get(saver, &c)
        .await
        .pending_writes
        .iter()
        .map(|w| json_of(&w.value))
        .collect();
    assert_eq!(
        order,
        vec![json!(4), json!(5), json!(3), json!(1), json!(2)]
    );
}

/// Two writes of one control channel in one call: the later one wins (an upsert), on every backend.
pub async fn antler_put_writes_repeated_control_write_keeps_the_last(saver: &dyn Saver) {
    let c = chain(saver, "t", "", 1, None).await.remove(0);
    write(
        saver,
        &c,
        "task",
        "",
        &[
            ("__error__", json!("first")),
            ("a", json!(1)),
            ("__error__", json!("second")),
        ],
    )
    .await;
    let ws = get(saver, &c).await.pending_writes;
    let errors: Vec<Value> = ws
        .iter()
        .filter(|w| w.channel.as_str() == "__error__")
        .map(|w| json_of(&w.value))
        .collect();
    assert_eq!(errors, vec![json!("second")]);
    assert_eq!(ws.len(), 2);
}

/// Two branches forked from one checkpoint that store the same channel version with different
/// values: the second `put` is a conflict (nothing written), never a silently shared value;
/// re-putting the same value is idempotent.
pub async fn antler_put_same_version_with_another_value_is_a_conflict(saver: &dyn Saver) {
    let root = chain(saver, "t", "", 1, None).await.remove(0);
    let a = put_all(
        saver,
        root.clone(),
        checkpoint(&[("a", 7, json!("branch a"))]),
        CheckpointMetadata::default(),
    )
    .await;
    let clash = checkpoint(&[("a", 7, json!("branch b"))]);
    let clash_id = clash.id;
    let versions = clash.channel_versions.clone();
    let err = saver
        .put(&root, clash, CheckpointMetadata::default(), &versions)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(
        saver
            .get_tuple(&cfg("t", "", Some(clash_id)))
            .await
            .unwrap()
            .is_none(),
        "nothing was written"
    );
    assert_eq!(
        json_of(&get(saver, &a).await.checkpoint.channel_values["a"]),
        json!("branch a")
    );
    put_all(
        saver,
        root,
        checkpoint(&[("a", 7, json!("branch a"))]),
        CheckpointMetadata::default(),
    )
    .await;
}

/// A channel version above `i64::MAX` (what the databases' version columns hold) is refused by
/// every saver alike, before anything is written, with an error naming the thread, the
/// checkpoint and the channel. Before, the memory saver stored it, and the database savers
/// refused it with a message naming neither thread nor checkpoint.
pub async fn antler_put_a_version_beyond_what_stores_keep_is_invalid_input(saver: &dyn Saver) {
    let root = chain(saver, "t", "", 1, None).await.remove(0);
    let big = u64::try_from(i64::MAX).unwrap() + 1;
    let cp = checkpoint(&[("huge", big, json!(1))]);
    let id = cp.id;
    let versions = cp.channel_versions.clone();
    let err = saver
        .put(&root, cp, CheckpointMetadata::default(), &versions)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let text = err.to_string();
    for part in ["t", &id.to_string(), "huge", &big.to_string()] {
        assert!(text.contains(part), "{part} in {text}");
    }
    assert!(
        saver
            .get_tuple(&cfg("t", "", Some(id)))
            .await
            .unwrap()
            .is_none()
    );
    // The largest version a store keeps is stored.
    put_all(
        saver,
        root,
        checkpoint(&[("huge", big - 1, json!(1))]),
        CheckpointMetadata::default(),
    )
    .await;
}

// ---- get_tuple_without_values ---------------------------------------------------------------

/// Bytes that no stored payload can be: a known tag (JSON blob) with a wrong checksum.
const DAMAGE: &[u8] = &[0x32, 0, 0, 0, 0, b'x'];

/// Marks every checkpoint of thread `t` as written in delta mode (kernel-spec R32), the way a
/// delta-mode process would have, for the mode-gate cases.
async fn mark_delta(saver: &dyn Saver, t: &str) {
    let delta = CheckpointMetadata {
        channel_mode: Some(crate::mode::ChannelMode::Delta),
        ..CheckpointMetadata::default()
    };
    tamper(saver, t, Tamper::Metadata(delta)).await;
}

async fn tamper(saver: &dyn Saver, t: &str, what: Tamper) {
    assert!(
        saver
            .tamper_for_conformance(&thread(t), what)
            .await
            .unwrap(),
        "the saver supports the conformance suite's tamper hook"
    );
}

/// Two checkpoints on thread `t`, each with a JSON channel and a message-list snapshot,
/// and pending writes of every kind: JSON, a message list (sharing a body with the
/// snapshot), and a control write. Returns the configs, oldest first.
async fn valued_thread(saver: &dyn Saver, t: &str) -> Vec<CheckpointConfig> {
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for i in 0..2u64 {
        let items = vec![
            json!({"type": "human", "content": format!("q{i}"), "id": format!("h{i}")}),
            json!({"type": "ai", "content": format!("a{i}"), "id": format!("a{i}")}),
        ];
        let mut cp = checkpoint(&[("a", i + 1, json!({"step": i}))]);
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(i + 1));
        cp.channel_values.insert(
            "messages".into(),
            Blob::messages(MessagesKind::Snapshot, &items).unwrap(),
        );
        let parent = out.last().cloned().unwrap_or_else(|| cfg(t, "", None));
        let c = put_all(
            saver,
            parent,
            cp,
            metadata(CheckpointSource::Loop, i as i64, None),
        )
        .await;
        write(
            saver,
            &c,
            "task-json",
            "~1",
            &[("a", json!(i)), ("b", json!("x"))],
        )
        .await;
        let list = vec![
            items[1].clone(),
            json!({"type": "human", "content": format!("next{i}"), "id": format!("n{i}")}),
        ];
        saver
            .put_writes(
                &c,
                vec![(
                    "messages".into(),
                    Blob::messages(MessagesKind::Write, &list).unwrap(),
                )],
                &TaskId::new("task-messages"),
                &TaskPath::new("~0"),
            )
            .await
            .unwrap();
        write(
            saver,
            &c,
            "task-error",
            "~2",
            &[("__error__", json!("boom"))],
        )
        .await;
        out.push(c);
    }
    out
}

/// Asserts that the value-less read of `at` is `get_tuple` of `at` without its values.
async fn assert_without_values_matches(saver: &dyn Saver, at: &CheckpointConfig) {
    let mut full = get(saver, at).await;
    let bare = saver
        .get_tuple_without_values(at)
        .await
        .unwrap()
        .expect("checkpoint exists");
    assert!(bare.checkpoint.channel_values.is_empty());
    assert!(!full.checkpoint.channel_values.is_empty());
    full.checkpoint.channel_values.clear();
    assert_eq!(bare, full);
}

/// `get_tuple_without_values` is `get_tuple` with no channel values: same checkpoint,
/// metadata, parent and pending writes (message lists included, in the same order), by
/// id and latest.
pub async fn antler_get_tuple_without_values_is_get_tuple_minus_values(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    for at in [&cs[0], &cs[1], &cfg("t", "", None)] {
        assert_without_values_matches(saver, at).await;
        // The trait's default gives the same tuple.
        assert_without_values_matches(&Defaults(saver), at).await;
    }
    let bare = saver
        .get_tuple_without_values(&cs[1])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bare.parent_config, Some(cs[0].clone()));
    let channels: Vec<&str> = bare
        .pending_writes
        .iter()
        .map(|w| w.channel.as_str())
        .collect();
    assert_eq!(channels, ["messages", "a", "b", "__error__"]);
    assert_eq!(
        bare.pending_writes[0].value,
        Blob::messages(
            MessagesKind::Write,
            &[
                json!({"type": "ai", "content": "a1", "id": "a1"}),
                json!({"type": "human", "content": "next1", "id": "n1"}),
            ]
        )
        .unwrap()
    );
}

/// An unknown thread, id or namespace reads as `None`, as with `get_tuple`.
pub async fn antler_get_tuple_without_values_absent_is_none(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    for at in [
        cfg("nope", "", None),
        cfg("t", "", Some(CheckpointId::generate())),
        cfg("t", "sub:x", None),
        cfg("t", "sub:x", cs[0].checkpoint_id),
    ] {
        assert!(saver.get_tuple(&at).await.unwrap().is_none());
        assert!(saver.get_tuple_without_values(&at).await.unwrap().is_none());
    }
}

/// The mode gate applies as to `get_tuple`: a full-mode store refuses a delta checkpoint
/// with the same error; a delta-mode store reads it.
pub async fn antler_get_tuple_without_values_is_mode_gated(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    mark_delta(saver, "t").await;
    for at in [&cs[1], &cfg("t", "", None)] {
        if saver.store_config().mode == crate::mode::ChannelMode::Full {
            let full = saver.get_tuple(at).await.unwrap_err();
            let bare = saver.get_tuple_without_values(at).await.unwrap_err();
            assert_eq!(bare.kind(), ErrorKind::ModeMismatch, "{bare}");
            assert_eq!(bare.to_string(), full.to_string());
        } else {
            assert_without_values_matches(saver, at).await;
        }
    }
}

/// No value blob and no message body of the checkpoint's channels is read: damaging them
/// fails `get_tuple` but not `get_tuple_without_values`, which returns what it returned before.
pub async fn antler_get_tuple_without_values_reads_no_value(saver: &dyn Saver) {
    for (t, damage) in [
        ("blobs", Tamper::Blobs(DAMAGE.to_vec())),
        ("bodies", Tamper::Messages(DAMAGE.to_vec())),
    ] {
        let head = cfg(t, "", None);
        let c = put_all(
            saver,
            head.clone(),
            checkpoint(&[("a", 1, json!(1))]),
            CheckpointMetadata::default(),
        )
        .await;
        let mut cp = checkpoint(&[("a", 2, json!(2))]);
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(2));
        cp.channel_values.insert(
            "messages".into(),
            Blob::messages(MessagesKind::Snapshot, &[json!("m1"), json!("m2")]).unwrap(),
        );
        let c = put_all(saver, c, cp, CheckpointMetadata::default()).await;
        // JSON writes only, so that no write shares a message body with the snapshot.
        write(saver, &c, "task", "~0", &[("a", json!(3))]).await;
        let before = saver
            .get_tuple_without_values(&head)
            .await
            .unwrap()
            .unwrap();
        tamper(saver, t, damage).await;
        let err = saver.get_tuple(&head).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{t}: {err}");
        let after = saver
            .get_tuple_without_values(&head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after, before, "{t}");
        assert_eq!(after.pending_writes.len(), 1);
    }
}

/// Pending writes are read and checked as by `get_tuple`: a damaged write fails both reads.
pub async fn antler_get_tuple_without_values_reads_every_write(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t-writes").await;
    tamper(saver, "t-writes", Tamper::Writes(DAMAGE.to_vec())).await;
    for at in [&cs[0], &cfg("t-writes", "", None)] {
        let full = saver.get_tuple(at).await.unwrap_err();
        let bare = saver.get_tuple_without_values(at).await.unwrap_err();
        assert_eq!(bare.kind(), ErrorKind::Corrupt, "{bare}");
        assert_eq!(full.kind(), ErrorKind::Corrupt, "{full}");
        assert!(bare.to_string().contains("t-writes"), "{bare}");
    }
}

// ---- list paging and list_without_values ---------------------------------------------------

/// Two threads with the same checkpoint ids (one a copy of the other), two namespaces, a
/// third thread, writes on some checkpoints; returns the queries the list cases run.
async fn list_fixture(saver: &dyn Saver) -> Vec<ListQuery> {
    let root = chain(saver, "a", "", 6, Some("r1")).await;
    chain(saver, "a", "sub", 3, Some("r1")).await;
    write(saver, &root[2], "t1", "~1", &[("a", json!("w"))]).await;
    write(saver, &root[5], "t2", "~2", &[("a", json!("x"))]).await;
    saver.copy_thread(&thread("a"), &thread("b")).await.unwrap();
    chain(saver, "c", "", 4, Some("r2")).await;
    let loops: serde_json::Map<String, Value> =
        [("source".to_owned(), json!("loop"))].into_iter().collect();
    vec![
        ListQuery::default(),
        ListQuery::thread("a"),
        ListQuery {
            checkpoint_ns: Some(CheckpointNs::root()),
            ..ListQuery::thread("a")
        },
        ListQuery {
            checkpoint_ns: Some(CheckpointNs::new("sub")),
            ..ListQuery::default()
        },
        ListQuery {
            filter: loops.clone(),
            ..ListQuery::default()
        },
        ListQuery {
            filter: loops.clone(),
            checkpoint_ns: Some(CheckpointNs::root()),
            ..ListQuery::thread("a")
        },
        ListQuery {
            filter: loops,
            before: root[4].checkpoint_id,
            ..ListQuery::thread("b")
        },
        ListQuery {
            before: root[3].checkpoint_id,
            ..ListQuery::default()
        },
    ]
}

/// Where a listed tuple lives: thread, namespace, id.
fn keys(tuples: &[crate::model::CheckpointTuple]) -> Vec<(String, String, CheckpointId)> {
    tuples
        .iter()
        .map(|t| {
            (
                t.config.thread_id.to_string(),
                t.config.checkpoint_ns.to_string(),
                t.checkpoint.id,
            )
        })
        .collect()
}

/// `list_without_values` lists the same checkpoints as `list`, in the same order, with the
/// same records, metadata and parents, but without channel values or pending writes (through
/// the saver's own implementation and the trait's default).
pub async fn antler_list_without_values_is_list_minus_values_and_writes(saver: &dyn Saver) {
    for q in list_fixture(saver).await {
        let mut expected = saver.list(&q).await.unwrap();
        assert!(!expected.is_empty(), "{q:?}");
        for t in &mut expected {
            t.checkpoint.channel_values.clear();
            t.pending_writes.clear();
        }
        for s in [saver, &Defaults(saver)] {
            assert_eq!(s.list_without_values(&q).await.unwrap(), expected, "{q:?}");
        }
    }
}

/// Every limit gives a prefix of the unlimited list, whatever the filter, `before`, thread
/// and namespace (the savers read limited lists in pages); checkpoints with the same id in
/// two threads (a copy) list in descending thread order.
pub async fn antler_list_pages_agree_with_the_whole_list(saver: &dyn Saver) {
    for q in list_fixture(saver).await {
        let whole = keys(&saver.list(&q).await.unwrap());
        for limit in 1..=whole.len() + 1 {
            let page = ListQuery {
                limit: Some(limit),
                ..q.clone()
            };
            let got = keys(&saver.list(&page).await.unwrap());
            assert_eq!(got, whole[..limit.min(whole.len())], "{page:?}");
        }
    }
    let all = keys(&saver.list(&ListQuery::default()).await.unwrap());
    assert_eq!(all.len(), 6 + 3 + 6 + 3 + 4);
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.2 > b.2
                || (a.2 == b.2 && (a.0.as_str(), a.1.as_str()) > (b.0.as_str(), b.1.as_str())),
            "list order: {a:?} before {b:?}"
        );
    }
    assert!(
        all.windows(2)
            .any(|p| p[0].2 == p[1].2 && p[0].0 == "b" && p[1].0 == "a"),
        "the copy's checkpoints list next to their originals"
    );
}

/// `delete_for_runs` finds a run's checkpoints however many other checkpoints the store
/// holds (every saver looks the run up in its index): the run's thread is the oldest and
/// sorts last, so it is on the second page in list order and in key order.
pub async fn antler_delete_for_runs_pages_through_a_large_store(saver: &dyn Saver) {
    let doomed = chain(saver, "zz", "", 2, Some("doomed")).await;
    chain(saver, "zz", "sub", 3, Some("other")).await;
    for name in ["a0", "a1"] {
        chain(saver, name, "", 520, Some("other")).await;
    }
    saver
        .delete_for_runs(&[RunId::new("doomed")])
        .await
        .unwrap();
    for c in &doomed {
        assert!(saver.get_tuple(c).await.unwrap().is_none());
    }
    assert_eq!(count(saver, ListQuery::thread("zz")).await, 3);
    assert_eq!(count(saver, ListQuery::default()).await, 1043);
}

/// `delete_for_runs` reads only the threads its runs put checkpoints on, and the copies
/// `copy_thread` made of them: damaged records in another thread do not fail it, and stay.
pub async fn antler_delete_for_runs_reads_only_the_runs_threads(saver: &dyn Saver) {
    let doomed = chain(saver, "runs-a", "", 2, Some("r1")).await;
    chain(saver, "runs-b", "", 2, Some("other")).await;
    saver
        .copy_thread(&thread("runs-a"), &thread("runs-c"))
        .await
        .unwrap();
    // The metadata tag with a wrong checksum: any read of runs-b's records fails.
    tamper(
        saver,
        "runs-b",
        Tamper::MetadataBytes(vec![0x21, 0, 0, 0, 0, b'x']),
    )
    .await;
    saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
    for c in &doomed {
        assert!(saver.get_tuple(c).await.unwrap().is_none());
    }
    for t in ["runs-a", "runs-c"] {
        assert_eq!(count(saver, ListQuery::thread(t)).await, 0, "{t}");
    }
    let err = saver.get_tuple(&cfg("runs-b", "", None)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
}

/// JSON nested deeper than a store reads back (a metadata entry, a channel value, a write, a
/// message) is refused by the write that brings it, with a typed error and nothing stored:
/// stored, it would fail every later read of its checkpoint. A value at the limit is stored
/// and reads back.
pub async fn antler_json_deeper_than_a_store_reads_back_is_refused(saver: &dyn Saver) {
    let nested = |levels: usize| {
        let mut v = json!(0);
        for _ in 0..levels {
            v = json!([v]);
        }
        v
    };
    let refused = |e: crate::Error| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("levels deep"), "{e}");
    };
    let at = cfg("t-deep", "", None);
    let mut meta = metadata(CheckpointSource::Input, -1, None);
    meta.extra.insert("deep".into(), nested(150));
    let cp = checkpoint(&[("a", 1, json!(1))]);
    let versions = cp.channel_versions.clone();
    refused(saver.put(&at, cp, meta, &versions).await.unwrap_err());
    let cp = checkpoint(&[("a", 1, nested(150))]);
    let versions = cp.channel_versions.clone();
    let meta = metadata(CheckpointSource::Input, -1, None);
    refused(saver.put(&at, cp, meta, &versions).await.unwrap_err());
    assert!(
        saver.get_tuple(&at).await.unwrap().is_none(),
        "nothing stored"
    );
    // At the limit: stored, and read back.
    let head = put_all(
        saver,
        at.clone(),
        checkpoint(&[("a", 1, nested(120))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    let read = saver.get_tuple(&head).await.unwrap().unwrap();
    let value: Value = read.checkpoint.channel_values[&ChannelName::new("a")]
        .decode_json()
        .unwrap();
    assert_eq!(value, nested(120));
    for blob in [
        Blob::json(&nested(150)).unwrap(),
        Blob::messages(MessagesKind::Write, &[nested(150)]).unwrap(),
    ] {
        refused(
            saver
                .put_writes(
                    &head,
                    vec![(ChannelName::new("a"), blob)],
                    &TaskId::new("task"),
                    &TaskPath::default(),
                )
                .await
                .unwrap_err(),
        );
    }
    let read = saver.get_tuple(&head).await.unwrap().unwrap();
    assert!(read.pending_writes.is_empty(), "no write stored");
}

// ---- get_ancestors_without_values ----------------------------------------------------------

/// A saver that forwards every required method to the wrapped one and keeps the trait's
/// defaults (`get_tuple_without_values`, `get_ancestors_without_values`), so that the cases
/// hold the default implementations to the same expectations as the saver's own.
struct Defaults<'a>(&'a dyn Saver);

#[async_trait::async_trait]
impl Saver for Defaults<'_> {
    async fn get_tuple(
        &self,
        config: &CheckpointConfig,
    ) -> crate::Result<Option<crate::model::CheckpointTuple>> {
        self.0.get_tuple(config).await
    }
    async fn list(&self, query: &ListQuery) -> crate::Result<Vec<crate::model::CheckpointTuple>> {
        self.0.list(query).await
    }
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: &ChannelVersions,
    ) -> crate::Result<CheckpointConfig> {
        self.0.put(config, checkpoint, metadata, new_versions).await
    }
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(ChannelName, Blob)>,
        task_id: &TaskId,
        task_path: &TaskPath,
    ) -> crate::Result<()> {
        self.0.put_writes(config, writes, task_id, task_path).await
    }
    async fn delete_thread(&self, thread_id: &ThreadId) -> crate::Result<()> {
        self.0.delete_thread(thread_id).await
    }
    async fn delete_for_runs(&self, run_ids: &[RunId]) -> crate::Result<()> {
        self.0.delete_for_runs(run_ids).await
    }
    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> crate::Result<()> {
        self.0.copy_thread(source, target).await
    }
    async fn prune(&self, thread_ids: &[ThreadId], strategy: PruneStrategy) -> crate::Result<()> {
        self.0.prune(thread_ids, strategy).await
    }
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[ChannelName],
    ) -> crate::Result<BTreeMap<ChannelName, crate::model::DeltaChannelHistory>> {
        self.0.delta_channel_history(config, channels).await
    }
    fn store_config(&self) -> crate::mode::StoreConfig {
        self.0.store_config()
    }
    async fn tamper_for_conformance(
        &self,
        thread_id: &ThreadId,
        tamper: Tamper,
    ) -> crate::Result<bool> {
        self.0.tamper_for_conformance(thread_id, tamper).await
    }
}

/// The ids of the chain from `at`, through `saver`'s own implementation and through the
/// default one; both must succeed and agree.
async fn chain_ids(saver: &dyn Saver, at: &CheckpointConfig, limit: usize) -> Vec<CheckpointId> {
    let own = saver.get_ancestors_without_values(at, limit).await.unwrap();
    let default = Defaults(saver)
        .get_ancestors_without_values(at, limit)
        .await
        .unwrap();
    assert_eq!(own, default, "the default implementation agrees");
    ids(&own)
}

/// What each tuple of a chain must be: the value-less read of its checkpoint, without writes.
async fn bare_tuple(saver: &dyn Saver, at: &CheckpointConfig) -> crate::model::CheckpointTuple {
    let mut t = saver
        .get_tuple_without_values(at)
        .await
        .unwrap()
        .expect("checkpoint exists");
    t.pending_writes.clear();
    t
}

/// The checkpoint first, then its parent, and so on to the root; each tuple is the
/// checkpoint's value-less read without its pending writes (record, metadata, config and
/// parent intact), by id, latest, and in a child namespace.
pub async fn antler_ancestors_nearest_first_without_values_or_writes(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    let expected = vec![
        bare_tuple(saver, &cs[1]).await,
        bare_tuple(saver, &cs[0]).await,
    ];
    assert!(
        expected
            .iter()
            .all(|t| t.checkpoint.channel_values.is_empty())
    );
    assert!(!get(saver, &cs[1]).await.pending_writes.is_empty());
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[1], &cfg("t", "", None)] {
            let got = s.get_ancestors_without_values(at, 10).await.unwrap();
            assert_eq!(got, expected);
            assert!(got.iter().all(|t| t.pending_writes.is_empty()));
        }
        assert_eq!(
            s.get_ancestors_without_values(&cs[0], 10).await.unwrap(),
            expected[1..]
        );
    }
    let sub = chain(saver, "t", "sub:x", 4, None).await;
    let mut want: Vec<CheckpointId> = sub.iter().filter_map(|c| c.checkpoint_id).collect();
    want.reverse();
    assert_eq!(chain_ids(saver, &sub[3], 10).await, want);
    assert_eq!(chain_ids(saver, &cfg("t", "sub:x", None), 10).await, want);
    let got = saver
        .get_ancestors_without_values(&sub[3], 10)
        .await
        .unwrap();
    assert!(
        got.iter()
            .all(|t| t.config.checkpoint_ns.as_str() == "sub:x")
    );
    assert_eq!(got[0].parent_config, Some(sub[2].clone()));
    assert_eq!(got[3].parent_config, None);
}

/// At most `limit` tuples (none for 0); a chain shorter than the limit ends at the root.
pub async fn antler_ancestors_respect_the_limit_and_stop_at_the_root(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 5, None).await;
    let mut all: Vec<CheckpointId> = cs.iter().filter_map(|c| c.checkpoint_id).collect();
    all.reverse();
    for limit in 0..=7 {
        let n = limit.min(all.len());
        assert_eq!(chain_ids(saver, &cs[4], limit).await, all[..n], "{limit}");
        assert_eq!(
            chain_ids(saver, &cfg("t", "", None), limit).await,
            all[..n],
            "latest, {limit}"
        );
    }
    assert_eq!(chain_ids(saver, &cs[2], 100).await, all[2..]);
    assert_eq!(chain_ids(saver, &cs[2], usize::MAX).await, all[2..]);
    assert_eq!(chain_ids(saver, &cs[0], 100).await, all[4..]);
}

/// A parent that does not exist ends the chain before it, without an error: the caller sees
/// the last tuple naming a parent that is not in the list.
pub async fn antler_ancestors_stop_before_a_missing_parent(saver: &dyn Saver) {
    // A root whose parent was never stored.
    let ghost = CheckpointId::generate();
    let mut parent = cfg("t", "", Some(ghost));
    let mut stored = Vec::new();
    for i in 0..3u64 {
        parent = put_all(
            saver,
            parent,
            checkpoint(&[("a", i + 1, json!(i))]),
            CheckpointMetadata::default(),
        )
        .await;
        stored.push(parent.checkpoint_id.unwrap());
    }
    stored.reverse();
    assert_eq!(chain_ids(saver, &parent, 10).await, stored);
    let got = saver
        .get_ancestors_without_values(&parent, 10)
        .await
        .unwrap();
    assert_eq!(
        got[2].parent_config.as_ref().and_then(|p| p.checkpoint_id),
        Some(ghost)
    );
    // A checkpoint deleted in the middle of a chain.
    let mut at = cfg("u", "", None);
    let mut ids_u = Vec::new();
    for (i, run) in ["keep", "gone", "keep"].into_iter().enumerate() {
        at = put_all(
            saver,
            at,
            checkpoint(&[("a", i as u64 + 1, json!(i))]),
            metadata(CheckpointSource::Loop, i as i64, Some(run)),
        )
        .await;
        ids_u.push(at.checkpoint_id.unwrap());
    }
    saver.delete_for_runs(&[RunId::new("gone")]).await.unwrap();
    assert_eq!(chain_ids(saver, &at, 10).await, [ids_u[2]]);
    assert_eq!(
        chain_ids(saver, &cfg("u", "", Some(ids_u[0])), 10).await,
        [ids_u[0]]
    );
}

/// An unknown checkpoint, thread or namespace gives an empty chain, as `get_tuple` gives `None`.
pub async fn antler_ancestors_of_an_unknown_checkpoint_are_empty(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 2, None).await;
    for at in [
        cfg("t", "", Some(CheckpointId::generate())),
        cfg("nope", "", None),
        cfg("nope", "", cs[1].checkpoint_id),
        cfg("t", "sub:x", None),
        cfg("t", "sub:x", cs[1].checkpoint_id),
    ] {
        assert!(saver.get_tuple(&at).await.unwrap().is_none());
        assert!(chain_ids(saver, &at, 10).await.is_empty(), "{at:?}");
    }
}

/// Parent pointers that cycle are an error naming thread and checkpoint once the chain
/// would repeat a checkpoint; a limit that stops before the repeat returns the chain.
pub async fn antler_ancestors_parent_cycle_is_error(saver: &dyn Saver) {
    let (a, b) = put_parent_cycle(saver, None).await;
    assert_eq!(chain_ids(saver, &cfg("t", "", Some(a)), 2).await, [a, b]);
    for s in [saver, &Defaults(saver)] {
        for limit in [3, 10, usize::MAX] {
            let err = s
                .get_ancestors_without_values(&cfg("t", "", Some(a)), limit)
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            let text = err.to_string();
            assert!(
                text.contains("thread t") && text.contains(&a.to_string()),
                "{text}"
            );
        }
    }
}

/// Every record and metadata of the chain is decoded and checked: damaged metadata is a
/// typed error naming thread and checkpoint, as with `get_tuple_without_values`, never a
/// shorter chain.
pub async fn antler_ancestors_damaged_metadata_is_error(saver: &dyn Saver) {
    let cs = chain(saver, "t-meta", "", 3, None).await;
    // The metadata tag with a wrong checksum.
    tamper(
        saver,
        "t-meta",
        Tamper::MetadataBytes(vec![0x21, 0, 0, 0, 0, b'x']),
    )
    .await;
    let single = saver.get_tuple_without_values(&cs[2]).await.unwrap_err();
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[2], &cs[0], &cfg("t-meta", "", None)] {
            let err = s.get_ancestors_without_values(at, 10).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            let text = err.to_string();
            assert!(
                text.contains("t-meta") && text.contains("metadata"),
                "{text}"
            );
        }
        let err = s.get_ancestors_without_values(&cs[2], 3).await.unwrap_err();
        assert_eq!(err.to_string(), single.to_string());
    }
}

/// The mode gate applies to every checkpoint of the chain: a full-mode store refuses delta
/// checkpoints with the error `get_tuple_without_values` gives; a delta-mode store reads them.
pub async fn antler_ancestors_are_mode_gated(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    mark_delta(saver, "t").await;
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[1], &cfg("t", "", None)] {
            if saver.store_config().mode == crate::mode::ChannelMode::Full {
                let single = saver.get_tuple_without_values(at).await.unwrap_err();
                let err = s.get_ancestors_without_values(at, 10).await.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
                assert_eq!(err.to_string(), single.to_string());
            } else {
                let got = s.get_ancestors_without_values(at, 10).await.unwrap();
                assert_eq!(
                    got,
                    vec![
                        bare_tuple(saver, &cs[1]).await,
                        bare_tuple(saver, &cs[0]).await
                    ]
                );
            }
        }
    }
}

/// The delta history walk is a read like any other (kernel-spec R34–R35): a full-mode store
/// refuses to walk from a delta checkpoint with the error `get_tuple` gives, rather than hand
/// its caller a seed and writes to build state from; a delta-mode store walks it.
pub async fn antler_delta_history_is_mode_gated(saver: &dyn Saver) {
    let cs = valued_thread(saver, "t").await;
    let channels = [ChannelName::new("messages")];
    let before = if saver.store_config().mode == crate::mode::ChannelMode::Full {
        Vec::new()
    } else {
        let mut h = Vec::new();
        for at in [&cs[1], &cfg("t", "", None)] {
            h.push(saver.delta_channel_history(at, &channels).await.unwrap());
        }
        h
    };
    mark_delta(saver, "t").await;
    for (i, at) in [&cs[1], &cfg("t", "", None)].into_iter().enumerate() {
        if saver.store_config().mode == crate::mode::ChannelMode::Full {
            let single = saver.get_tuple(at).await.unwrap_err();
            let err = saver
                .delta_channel_history(at, &channels)
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
            assert_eq!(err.to_string(), single.to_string());
        } else {
            // Delta mode never gates: the same history as before the marker.
            let after = saver.delta_channel_history(at, &channels).await.unwrap();
            assert_eq!(after, before[i]);
        }
    }
}

/// The trait's default implementation (one `get_tuple_without_values` per checkpoint) and
/// the saver's own return the same chains from every checkpoint of a forked thread, with
/// every limit.
pub async fn antler_ancestors_default_implementation_agrees(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 4, None).await;
    // A fork from the second checkpoint, with writes that the chain must not carry.
    let mut at = cs[1].clone();
    for i in 0..3u64 {
        at = put_all(
            saver,
            at,
            checkpoint(&[("a", 10 + i, json!(format!("fork {i}")))]),
            metadata(CheckpointSource::Fork, i as i64, Some("fork")),
        )
        .await;
        write(saver, &at, "task", "~0", &[("a", json!(i))]).await;
    }
    let all = saver
        .list(&ListQuery {
            thread_id: Some(thread("t")),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 7);
    let mut configs: Vec<CheckpointConfig> = all.into_iter().map(|t| t.config).collect();
    configs.push(cfg("t", "", None));
    for c in &configs {
        for limit in [0, 1, 2, 3, 4, 8] {
            let ids = chain_ids(saver, c, limit).await;
            assert!(ids.len() <= limit);
            // Without an id the chain starts at the latest checkpoint: the fork's head.
            let first = c.checkpoint_id.or(at.checkpoint_id);
            assert_eq!(ids.first().copied(), first.filter(|_| limit > 0));
        }
    }
    // The fork's head walks through the fork into the main line.
    let fork: Vec<CheckpointId> = chain_ids(saver, &at, 10).await;
    assert_eq!(fork.len(), 5);
    assert_eq!(
        fork[3..],
        [cs[1].checkpoint_id.unwrap(), cs[0].checkpoint_id.unwrap()]
    );
}

// ---- get_channel_values ----------------------------------------------------------------------

/// Three checkpoints on thread `t`, each storing only the channels its step changed: the first
/// `a`@1 and a message list `m`@1, the second `b`@2, the third `a`@3. Every record lists all
/// three channels (the latest versions). Returns the configs, oldest first.
async fn spread_thread(saver: &dyn Saver, t: &str) -> Vec<CheckpointConfig> {
    let items = vec![
        json!({"type": "human", "content": "q", "id": "h"}),
        json!({"type": "ai", "content": "a", "id": "a"}),
    ];
    let list = Blob::messages(MessagesKind::Snapshot, &items).unwrap();
    // Per step: the record's channels, and those whose version the step moved.
    type Step<'a> = (&'a [(&'a str, u64, Value)], &'a [&'a str]);
    let steps: [Step<'_>; 3] = [
        (&[("a", 1, json!(1)), ("b", 0, json!(null))], &["a", "m"]),
        (&[("a", 1, json!(1)), ("b", 2, json!("b2"))], &["b"]),
        (&[("a", 3, json!(3)), ("b", 2, json!("b2"))], &["a"]),
    ];
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for (i, (channels, changed)) in steps.into_iter().enumerate() {
        let mut cp = checkpoint(channels);
        cp.channel_versions
            .insert("m".into(), ChannelVersion::new(1));
        cp.channel_values.insert("m".into(), list.clone());
        let new_versions: ChannelVersions = cp
            .channel_versions
            .iter()
            .filter(|(c, _)| changed.contains(&c.as_str()))
            .map(|(c, v)| (c.clone(), *v))
            .collect();
        let parent = out.last().cloned().unwrap_or_else(|| cfg(t, "", None));
        let c = saver
            .put(
                &parent,
                cp,
                metadata(CheckpointSource::Loop, i as i64, None),
                &new_versions,
            )
            .await
            .unwrap();
        out.push(c);
    }
    out
}

fn key(c: &str, v: u64) -> (ChannelName, ChannelVersion) {
    (ChannelName::new(c), ChannelVersion::new(v))
}

/// The values stored for channel versions, whichever ancestor stored them, equal the values
/// `get_tuple` returns for a checkpoint holding those versions; a key nothing stored (an
/// unknown channel, a version never reached) is left out; another thread or namespace sees
/// none of them, and a checkpoint that does not exist gives `None`. The saver's own
/// implementation and the trait's default agree.
pub async fn antler_channel_values_are_read_by_key_wherever_stored(saver: &dyn Saver) {
    let cs = spread_thread(saver, "t").await;
    let first = get(saver, &cs[0]).await.checkpoint.channel_values;
    let second = get(saver, &cs[1]).await.checkpoint.channel_values;
    let third = get(saver, &cs[2]).await.checkpoint.channel_values;
    let expected: BTreeMap<(ChannelName, ChannelVersion), Blob> = [
        (key("a", 1), first["a"].clone()),
        (key("a", 3), third["a"].clone()),
        (key("b", 2), second["b"].clone()),
        (key("m", 1), first["m"].clone()),
    ]
    .into_iter()
    .collect();
    assert!(matches!(&expected[&key("m", 1)], Blob::Messages(l) if l.items.len() == 2));
    let keys = [
        key("a", 1),
        key("a", 3),
        key("b", 2),
        key("m", 1),
        key("b", 5),
        key("zz", 9),
        key("a", 3),
    ];
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[2], &cfg("t", "", None)] {
            assert_eq!(
                s.get_channel_values(at, &keys).await.unwrap(),
                Some(expected.clone())
            );
            assert_eq!(
                s.get_channel_values(at, &[]).await.unwrap(),
                Some(BTreeMap::new())
            );
        }
        // From the second checkpoint: what its versions name.
        let got = s
            .get_channel_values(&cs[1], &[key("a", 1), key("b", 2), key("m", 1)])
            .await
            .unwrap();
        let want: BTreeMap<_, _> = expected
            .iter()
            .filter(|(k, _)| *k != &key("a", 3))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, Some(want));
        for absent in [
            cfg("u", "", None),
            cfg("t", "sub:x", None),
            cfg("t", "", Some(CheckpointId::generate())),
            cfg("t", "sub:x", cs[2].checkpoint_id),
        ] {
            assert_eq!(s.get_channel_values(&absent, &keys).await.unwrap(), None);
        }
    }
}

/// Records that list only the channels their step changed (as the graph runtime's relative
/// records do), on a chain longer than one ancestor page: a value stored by the root is found
/// from the head, as is every other key the head's versions name, and the search for a
/// version the channel never reached stops.
pub async fn antler_channel_values_reach_past_records_that_do_not_list_the_channel(
    saver: &dyn Saver,
) {
    // Record i changes channel `c{i % 3}` to version i + 1; `root` is stored by record 0 only.
    let mut at = cfg("t", "", None);
    let mut configs = Vec::new();
    for i in 0..20u64 {
        let mut cp = checkpoint(&[(["c0", "c1", "c2"][(i % 3) as usize], i + 1, json!(i))]);
        if i == 0 {
            cp.channel_versions
                .insert("root".into(), ChannelVersion::new(1));
            cp.channel_values
                .insert("root".into(), Blob::json(&json!("stored once")).unwrap());
        }
        at = put_all(
            saver,
            at,
            cp,
            metadata(CheckpointSource::Loop, i as i64, None),
        )
        .await;
        configs.push(at.clone());
    }
    let head = &configs[19];
    let keys = [
        key("root", 1),
        key("c0", 19),
        key("c1", 20),
        key("c2", 18),
        key("c2", 3),
        key("c1", 99),
    ];
    let own = saver
        .get_channel_values(head, &keys)
        .await
        .unwrap()
        .unwrap();
    let default = Defaults(saver)
        .get_channel_values(head, &keys)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(own, default);
    let json: BTreeMap<String, Value> = own
        .iter()
        .map(|((c, v), b)| (format!("{c}@{v}"), json_of(b)))
        .collect();
    assert_eq!(
        json,
        [
            ("c0@19".to_owned(), json!(18)),
            ("c1@20".to_owned(), json!(19)),
            ("c2@18".to_owned(), json!(17)),
            ("c2@3".to_owned(), json!(2)),
            ("root@1".to_owned(), json!("stored once")),
        ]
        .into_iter()
        .collect()
    );
}

/// The mode gate applies as to `get_tuple`: a full-mode store refuses to read values for a
/// delta checkpoint, with `get_tuple`'s error; a delta-mode store reads them.
pub async fn antler_channel_values_are_mode_gated(saver: &dyn Saver) {
    let cs = spread_thread(saver, "t").await;
    let want = [key("a", 1), key("b", 2)];
    let before = saver.get_channel_values(&cs[2], &want).await.unwrap();
    assert_eq!(before.as_ref().map(BTreeMap::len), Some(2));
    mark_delta(saver, "t").await;
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[2], &cfg("t", "", None)] {
            if saver.store_config().mode == crate::mode::ChannelMode::Full {
                let single = saver.get_tuple(at).await.unwrap_err();
                let err = s.get_channel_values(at, &want).await.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
                assert_eq!(err.to_string(), single.to_string());
            } else {
                assert_eq!(s.get_channel_values(at, &want).await.unwrap(), before);
            }
        }
    }
}

/// A damaged value blob or message body is a typed `Corrupt` error naming the thread, never
/// a missing value.
pub async fn antler_channel_values_damaged_value_is_error(saver: &dyn Saver) {
    for (t, damage, wanted) in [
        ("blobs", Tamper::Blobs(DAMAGE.to_vec()), key("b", 2)),
        ("bodies", Tamper::Messages(DAMAGE.to_vec()), key("m", 1)),
    ] {
        let cs = spread_thread(saver, t).await;
        tamper(saver, t, damage).await;
        for s in [saver, &Defaults(saver)] {
            let err = s
                .get_channel_values(&cs[2], std::slice::from_ref(&wanted))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{t}: {err}");
            assert!(err.to_string().contains(t), "{t}: {err}");
        }
    }
}

// ---- get_tuple_with_ancestry -------------------------------------------------------------------

/// Six checkpoints on thread `t`, oldest first, as the graph runtime stores them: full records
/// (`c0`, `c3`) listing every channel, and relative ones listing only what their step changed.
/// `e` is listed from the start but never holds a value (an emptied channel); `m` is a
/// message list.
///
/// | record | kind     | lists (value)                         |
/// |--------|----------|---------------------------------------|
/// | c0     | full     | a@1 (1), b@1 ("b1"), e@1, m@1 (2 msgs) |
/// | c1     | relative | b@2 ("b2")                            |
/// | c2     | relative | a@3 (3)                               |
/// | c3     | full     | a@3, b@2, e@1, m@4 (3 msgs)           |
/// | c4     | relative | b@5 ("b5")                            |
/// | c5     | relative | a@6 (6)                               |
async fn relative_records(saver: &dyn Saver, t: &str) -> Vec<CheckpointConfig> {
    let msg =
        |i: usize| json!({"type": "human", "content": format!("q{i}"), "id": format!("h{i}")});
    let list = |n: usize| {
        Blob::messages(MessagesKind::Snapshot, &(0..n).map(msg).collect::<Vec<_>>()).unwrap()
    };
    // Per record: full or not, its listing (channel, version, value), the channels it changed.
    type Entry<'a> = (&'a str, u64, Option<Blob>);
    let records: Vec<(bool, Vec<Entry<'_>>)> = vec![
        (
            true,
            vec![
                ("a", 1, Some(Blob::json(&1).unwrap())),
                ("b", 1, Some(Blob::json(&"b1").unwrap())),
                ("e", 1, None),
                ("m", 1, Some(list(2))),
            ],
        ),
        (false, vec![("b", 2, Some(Blob::json(&"b2").unwrap()))]),
        (false, vec![("a", 3, Some(Blob::json(&3).unwrap()))]),
        (
            true,
            vec![
                ("a", 3, None),
                ("b", 2, None),
                ("e", 1, None),
                ("m", 4, Some(list(3))),
            ],
        ),
        (false, vec![("b", 5, Some(Blob::json(&"b5").unwrap()))]),
        (false, vec![("a", 6, Some(Blob::json(&6).unwrap()))]),
    ];
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for (i, (full, entries)) in records.into_iter().enumerate() {
        let mut cp = Checkpoint::empty();
        if !full {
            cp.v = crate::model::RELATIVE_RECORD_V;
        }
        let mut new_versions = ChannelVersions::new();
        for (c, v, value) in entries {
            cp.channel_versions.insert(c.into(), ChannelVersion::new(v));
            if let Some(value) = value {
                cp.channel_values.insert(c.into(), value);
                new_versions.insert(c.into(), ChannelVersion::new(v));
            }
        }
        let parent = out.last().cloned().unwrap_or_else(|| cfg(t, "", None));
        let c = saver
            .put(
                &parent,
                cp,
                metadata(CheckpointSource::Loop, i as i64, None),
                &new_versions,
            )
            .await
            .unwrap();
        write(saver, &c, "task", "", &[("w", json!(i))]).await;
        out.push(c);
    }
    out
}

/// What `get_tuple_with_ancestry` must return for `at`, built from the other reads: the tuple
/// of `get_tuple`, the ancestors of `get_ancestors_without_values` cut after the first full
/// record (none for a full record), and the values `get_channel_values` finds for the keys
/// `inherited_keys` names.
async fn expected_ancestry(
    saver: &dyn Saver,
    at: &CheckpointConfig,
    limit: usize,
) -> crate::model::TupleWithAncestry {
    let tuple = get(saver, at).await;
    let relative = tuple.checkpoint.v == crate::model::RELATIVE_RECORD_V;
    let mut ancestors = match &tuple.parent_config {
        Some(p) if relative => saver.get_ancestors_without_values(p, limit).await.unwrap(),
        _ => Vec::new(),
    };
    if let Some(full) = ancestors
        .iter()
        .position(|a| a.checkpoint.v != crate::model::RELATIVE_RECORD_V)
    {
        ancestors.truncate(full + 1);
    }
    let keys =
        crate::model::inherited_keys(&tuple.checkpoint, ancestors.iter().map(|a| &a.checkpoint));
    let mut found = saver
        .get_channel_values(&tuple.config, &keys)
        .await
        .unwrap()
        .unwrap_or_default();
    let inherited = keys
        .into_iter()
        .map(|k| {
            let v = found.remove(&k);
            (k, v)
        })
        .collect();
    crate::model::TupleWithAncestry {
        tuple,
        ancestors,
        inherited,
    }
}

/// A relative record comes with the records it depends on (up to and including the first
/// full one) and the values stored under the versions they give it: with them, every
/// channel's version and value is known. A channel listed without a stored value maps to
/// `None`; a full record comes alone. By id and as the latest, the saver's own implementation
/// and the trait's default agree.
pub async fn antler_ancestry_completes_a_relative_record(saver: &dyn Saver) {
    let cs = relative_records(saver, "t").await;
    let id = |i: usize| cs[i].checkpoint_id.unwrap();
    for s in [saver, &Defaults(saver)] {
        for (i, at) in cs.iter().enumerate() {
            let got = s
                .get_tuple_with_ancestry(at, 8)
                .await
                .unwrap()
                .expect("exists");
            assert_eq!(got, expected_ancestry(saver, at, 8).await, "c{i}");
            assert!(
                got.ancestors
                    .iter()
                    .all(|a| a.checkpoint.channel_values.is_empty() && a.pending_writes.is_empty())
            );
        }
        let latest = s
            .get_tuple_with_ancestry(&cfg("t", "", None), 8)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(latest, expected_ancestry(saver, &cs[5], 8).await, "latest");
        // Spelled out for the latest (c5): c4 and the full c3; b from c4, e (no value) and m
        // from c3; a is its own.
        assert_eq!(ids(&latest.ancestors), [id(4), id(3)]);
        assert_eq!(
            json_of(&latest.tuple.checkpoint.channel_values["a"]),
            json!(6)
        );
        assert_eq!(latest.inherited.len(), 3);
        assert_eq!(
            json_of(latest.inherited[&key("b", 5)].as_ref().unwrap()),
            json!("b5")
        );
        assert_eq!(latest.inherited[&key("e", 1)], None);
        assert!(
            matches!(latest.inherited[&key("m", 4)], Some(Blob::Messages(ref l)) if l.items.len() == 3)
        );
        assert_eq!(
            write_values(&latest.tuple.pending_writes),
            [("task".to_owned(), "w".to_owned(), json!(5))]
        );
        // c2: c1 and the full c0 (b@2 from c1; e and m@1 from c0).
        let c2 = s
            .get_tuple_with_ancestry(&cs[2], 8)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(ids(&c2.ancestors), [id(1), id(0)]);
        assert_eq!(
            c2.inherited.keys().cloned().collect::<Vec<_>>(),
            [key("b", 2), key("e", 1), key("m", 1)]
        );
        // Full records: alone.
        for i in [0, 3] {
            let full = s
                .get_tuple_with_ancestry(&cs[i], 8)
                .await
                .unwrap()
                .expect("exists");
            assert!(
                full.ancestors.is_empty() && full.inherited.is_empty(),
                "c{i}"
            );
        }
    }
}

/// At most `limit` ancestors; what lies beyond is not inherited from (the caller reads on).
pub async fn antler_ancestry_respects_the_limit(saver: &dyn Saver) {
    let cs = relative_records(saver, "t").await;
    for s in [saver, &Defaults(saver)] {
        for limit in 0..=3 {
            let got = s
                .get_tuple_with_ancestry(&cs[5], limit)
                .await
                .unwrap()
                .expect("exists");
            assert_eq!(
                got,
                expected_ancestry(saver, &cs[5], limit).await,
                "{limit}"
            );
            assert_eq!(got.ancestors.len(), limit.min(2), "{limit}");
        }
        let one = s
            .get_tuple_with_ancestry(&cs[5], 1)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(
            one.inherited.keys().cloned().collect::<Vec<_>>(),
            [key("b", 5)]
        );
        let none = s
            .get_tuple_with_ancestry(&cs[5], 0)
            .await
            .unwrap()
            .expect("exists");
        assert!(none.ancestors.is_empty() && none.inherited.is_empty());
    }
}

/// An unknown thread, namespace or checkpoint is `None`.
pub async fn antler_ancestry_absent_is_none(saver: &dyn Saver) {
    let _ = relative_records(saver, "t").await;
    for s in [saver, &Defaults(saver)] {
        for at in [
            cfg("nobody", "", None),
            cfg("t", "sub:x", None),
            cfg("t", "", Some(CheckpointId::generate())),
        ] {
            assert_eq!(s.get_tuple_with_ancestry(&at, 8).await.unwrap(), None);
        }
    }
}

/// Puts two checkpoints of thread `t` whose parent pointers loop, with `meta`, and returns
/// the first. A put of a relative record needs its parent to exist, so the loop is closed by
/// putting `a` again, as a relative record below `b`.
async fn put_parent_loop(saver: &dyn Saver, t: &str, meta: &CheckpointMetadata) -> CheckpointId {
    let (a, b) = (CheckpointId::generate(), CheckpointId::generate());
    for (id, parent) in [(a, None), (b, Some(a)), (a, Some(b))] {
        let mut cp = Checkpoint::empty();
        cp.id = id;
        if parent.is_some() {
            cp.v = crate::model::RELATIVE_RECORD_V;
        }
        saver
            .put(
                &cfg(t, "", parent),
                cp,
                meta.clone(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
    }
    a
}

/// Relative records whose parent pointers loop are an error, not an endless walk.
pub async fn antler_ancestry_parent_cycle_is_error(saver: &dyn Saver) {
    let a = put_parent_loop(saver, "t", &CheckpointMetadata::default()).await;
    for s in [saver, &Defaults(saver)] {
        let err = s
            .get_tuple_with_ancestry(&cfg("t", "", Some(a)), 8)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("thread t"), "{err}");
    }
}

/// `prune` and `delete_for_runs` keep what their kept checkpoints need to stay readable, up
/// each relative record's parent chain: a chain that loops is an error naming the thread,
/// not an endless walk, and nothing is deleted.
pub async fn antler_prune_and_delete_for_runs_stop_at_a_parent_cycle(saver: &dyn Saver) {
    // Thread `t`: `a` and `b` loop, and the newest, `c`, belongs to run `r`, whose deletion
    // keeps the loop. Thread `u`: the loop is the latest checkpoint, which a prune keeps.
    let looping = metadata(CheckpointSource::Loop, 0, None);
    put_parent_loop(saver, "t", &looping).await;
    put_all(
        saver,
        cfg("t", "", None),
        Checkpoint::empty(),
        metadata(CheckpointSource::Loop, 0, Some("r")),
    )
    .await;
    put_parent_loop(saver, "u", &looping).await;
    assert_eq!(count(saver, ListQuery::thread("t")).await, 3);
    assert_eq!(count(saver, ListQuery::thread("u")).await, 2);
    let err = saver.delete_for_runs(&[RunId::new("r")]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("thread t"), "{err}");
    let err = match saver.prune(&[thread("u")], PruneStrategy::KeepLatest).await {
        Err(e) => e,
        Ok(()) => panic!("a prune that keeps a looping chain succeeded"),
    };
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("thread u"), "{err}");
    assert_eq!(count(saver, ListQuery::thread("t")).await, 3);
    assert_eq!(count(saver, ListQuery::thread("u")).await, 2);
}

/// The read is mode-gated as `get_tuple` is: a full-mode store refuses a delta checkpoint
/// with the same error; a delta-mode store reads it.
pub async fn antler_ancestry_is_mode_gated(saver: &dyn Saver) {
    let cs = relative_records(saver, "t").await;
    mark_delta(saver, "t").await;
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[5], &cfg("t", "", None)] {
            if saver.store_config().mode == crate::mode::ChannelMode::Full {
                let single = saver.get_tuple(at).await.unwrap_err();
                let err = s.get_tuple_with_ancestry(at, 8).await.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
                assert_eq!(err.to_string(), single.to_string());
            } else {
                let got = s
                    .get_tuple_with_ancestry(at, 8)
                    .await
                    .unwrap()
                    .expect("exists");
                assert_eq!(got, expected_ancestry(saver, &cs[5], 8).await);
            }
        }
    }
}

/// A damaged value, the record's own or an inherited one, is a typed error naming the thread,
/// never a value left out.
pub async fn antler_ancestry_damaged_value_is_error(saver: &dyn Saver) {
    let cs = relative_records(saver, "t").await;
    // The blob tag with a wrong checksum.
    tamper(saver, "t", Tamper::Blobs(vec![0x31, 0, 0, 0, 0, b'x'])).await;
    for s in [saver, &Defaults(saver)] {
        for at in [&cs[5], &cs[2], &cfg("t", "", None)] {
            let err = s.get_tuple_with_ancestry(at, 8).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            assert!(err.to_string().contains("thread t"), "{err}");
        }
    }
}

// ---- max_channel_version ---------------------------------------------------------------------

/// What the trait's default reports (every record read) and what the saver reports.
async fn max_versions(saver: &dyn Saver, t: &str, ns: &str) -> (u64, u64) {
    let (t, ns) = (thread(t), CheckpointNs::new(ns));
    (
        saver.max_channel_version(&t, &ns).await.unwrap(),
        Defaults(saver).max_channel_version(&t, &ns).await.unwrap(),
    )
}

/// The greatest channel version of a namespace covers every branch, not only the latest
/// checkpoint's: a fork from an old checkpoint that takes a higher version raises it, a later
/// checkpoint with lower versions does not lower it. Threads and namespaces are separate, an
/// unknown one is 0, and the saver agrees with the trait's default.
pub async fn antler_max_channel_version_covers_every_branch(saver: &dyn Saver) {
    assert_eq!(max_versions(saver, "t", "").await, (0, 0));
    let cs = spread_thread(saver, "t").await;
    assert_eq!(max_versions(saver, "t", "").await, (3, 3));
    // A fork of the first checkpoint that moves `b` to 9, then a sibling of it moving `b` to 4:
    // the sibling is the latest checkpoint, the fork holds the greatest version.
    for v in [9, 4] {
        let cp = checkpoint(&[("a", 1, json!(1)), ("b", v, json!(v))]);
        let nv: ChannelVersions = [(ChannelName::new("b"), ChannelVersion::new(v))]
            .into_iter()
            .collect();
        saver
            .put(&cs[0], cp, metadata(CheckpointSource::Update, 1, None), &nv)
            .await
            .unwrap();
    }
    assert_eq!(max_versions(saver, "t", "").await, (9, 9));
    put_all(
        saver,
        cfg("t", "sub:x", None),
        checkpoint(&[("a", 50, json!(50))]),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    assert_eq!(max_versions(saver, "t", "sub:x").await, (50, 50));
    assert_eq!(max_versions(saver, "t", "").await, (9, 9));
    assert_eq!(max_versions(saver, "u", "").await, (0, 0));
    // A checkpoint without channels is still a checkpoint of the namespace.
    put_all(
        saver,
        cfg("e", "", None),
        Checkpoint::empty(),
        metadata(CheckpointSource::Input, -1, None),
    )
    .await;
    assert_eq!(max_versions(saver, "e", "").await, (0, 0));
}

/// After prune, delete_for_runs and copy_thread the saver's figure is at least the greatest
/// version of the checkpoints left (the default's figure); delete_thread brings every
/// namespace of the thread back to 0, and copy_thread gives the target at least the source's.
pub async fn antler_max_channel_version_survives_deletes_and_copies(saver: &dyn Saver) {
    // Versions 1..=4 on the main chain (run r1); a fork of the first checkpoint at 9 (run r2);
    // then the chain continues at 5, so the latest checkpoint is not the greatest.
    let cs = chain(saver, "t", "", 4, Some("r1")).await;
    put_all(
        saver,
        cs[0].clone(),
        checkpoint(&[("a", 9, json!(9))]),
        metadata(CheckpointSource::Update, 1, Some("r2")),
    )
    .await;
    put_all(
        saver,
        cs[3].clone(),
        checkpoint(&[("a", 5, json!(5))]),
        metadata(CheckpointSource::Loop, 3, Some("r1")),
    )
    .await;
    put_all(
        saver,
        cfg("t", "sub:x", None),
        checkpoint(&[("a", 7, json!(7))]),
        metadata(CheckpointSource::Input, -1, Some("r1")),
    )
    .await;
    assert_eq!(max_versions(saver, "t", "").await, (9, 9));

    // copy_thread onto a thread with lower versions of its own.
    chain(saver, "c", "", 2, None).await;
    saver.copy_thread(&thread("t"), &thread("c")).await.unwrap();
    let (got, exact) = max_versions(saver, "c", "").await;
    assert!(got >= 9 && exact == 9, "copy: {got} / {exact}");
    let (got, exact) = max_versions(saver, "c", "sub:x").await;
    assert!(got >= 7 && exact == 7, "copy, namespace: {got} / {exact}");

    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    let (got, exact) = max_versions(saver, "t", "").await;
    assert!(
        got >= exact && exact == 5,
        "delete_for_runs: {got} / {exact}"
    );
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    let (got, exact) = max_versions(saver, "t", "").await;
    assert!(got >= exact && exact == 5, "prune: {got} / {exact}");

    saver.delete_thread(&thread("t")).await.unwrap();
    assert_eq!(max_versions(saver, "t", "").await, (0, 0));
    assert_eq!(max_versions(saver, "t", "sub:x").await, (0, 0));
    // Another thread's figures are untouched.
    assert!(max_versions(saver, "c", "").await.0 >= 9);
}

/// Not a conformance case (the trait's default scans, which is exact): the savers of this
/// crate answer from a high-water mark, which `prune` and `delete_for_runs` leave where it
/// was, so their figure stays above what the records left still list.
pub async fn antler_max_channel_version_is_a_high_water_mark(saver: &dyn Saver) {
    let cs = chain(saver, "t", "", 3, Some("r1")).await;
    put_all(
        saver,
        cs[0].clone(),
        checkpoint(&[("a", 9, json!(9))]),
        metadata(CheckpointSource::Update, 1, Some("r2")),
    )
    .await;
    put_all(
        saver,
        cs[2].clone(),
        checkpoint(&[("a", 4, json!(4))]),
        metadata(CheckpointSource::Loop, 2, Some("r1")),
    )
    .await;
    saver.delete_for_runs(&[RunId::new("r2")]).await.unwrap();
    assert_eq!(max_versions(saver, "t", "").await, (9, 4));
    saver
        .prune(&[thread("t")], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(max_versions(saver, "t", "").await, (9, 4));
}

/// Not a conformance case (it needs a hook into the store): a namespace whose mark row is gone
/// while its checkpoints stay (as after a put racing a delete) is not given the next put's
/// lower figure, and a copy of it does not leave the target's lower figure; both fall back to
/// the records. `lose(thread)` deletes the thread's marks behind the saver's back.
pub async fn antler_a_lost_mark_falls_back_to_the_records<F, Fut>(saver: &dyn Saver, lose: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = ()>,
{
    let put = |t: &'static str, v: u64| async move {
        let at = saver
            .get_tuple(&cfg(t, "", None))
            .await
            .unwrap()
            .map_or_else(|| cfg(t, "", None), |c| c.config);
        put_all(
            saver,
            at,
            checkpoint(&[("a", v, json!(v))]),
            metadata(CheckpointSource::Loop, 0, None),
        )
        .await;
    };
    put("t", 5).await;
    lose("t").await;
    put("t", 2).await;
    assert_eq!(max_versions(saver, "t", "").await, (5, 5));
    put("s", 7).await;
    lose("s").await;
    put("c", 1).await;
    assert_eq!(max_versions(saver, "c", "").await, (1, 1));
    saver.copy_thread(&thread("s"), &thread("c")).await.unwrap();
    assert_eq!(max_versions(saver, "c", "").await, (7, 7));
    // A target that lost its mark keeps it unknown through a copy onto it, so its own records
    // still count (before, it took the source's lower mark, and a fork reused its versions).
    put("u", 12).await;
    lose("u").await;
    put("w", 5).await;
    saver.copy_thread(&thread("w"), &thread("u")).await.unwrap();
    assert_eq!(max_versions(saver, "u", "").await, (12, 12));
}

#[cfg(test)]
mod suite_tests {
    /// The suite's list is kept by hand: every public case of this module is in it, except
    /// the ones that are not conformance cases (a helper, and two cases run by this crate's
    /// savers with arguments of their own), and [`super::CASE_COUNT`] is its length.
    #[test]
    fn every_case_is_in_the_suite_and_counted() {
        let whole = include_str!("testing.rs");
        // The cases, not this test (whose strings name what it looks for).
        let source = &whole[..whole.find("mod suite_tests").expect("this module")];
        let start = source
            .find("__conformance_cases!($factory;")
            .expect("the suite's list");
        let list = &source[start..];
        let list =
            &list[list.find(';').expect("list start") + 1..list.find(");").expect("list end")];
        let listed: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        assert_eq!(listed.len(), super::CASE_COUNT);
        let not_cases = [
            "delta_chain",
            "antler_max_channel_version_is_a_high_water_mark",
            "antler_a_lost_mark_falls_back_to_the_records",
        ];
        let mut public = 0;
        for part in source.split("pub async fn ").skip(1) {
            let name = part.split(['(', '<']).next().expect("a name");
            public += 1;
            assert!(
                listed.contains(&name) || not_cases.contains(&name),
                "the case {name} is not in the suite"
            );
        }
        assert_eq!(public, listed.len() + not_cases.len());
    }
}
