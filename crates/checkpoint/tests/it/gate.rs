//! The mode gate (kernel-spec R32–R35) and the store's open-time configuration check.

use antler_checkpoint::mode::{
    check_mode, inject_mode_marker, metadata_uses_delta, tuple_uses_delta,
};
use antler_checkpoint::{
    Blob, ChannelMode, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    DeltaCounters, ErrorKind, ListQuery, MemorySaver, Saver, SnapshotFrequency, SqliteSaver,
    StoreConfig, TaskId, TaskPath,
};
use serde_json::json;

fn delta_meta() -> CheckpointMetadata {
    CheckpointMetadata {
        channel_mode: Some(ChannelMode::Delta),
        ..CheckpointMetadata::default()
    }
}

fn f(n: u32) -> SnapshotFrequency {
    SnapshotFrequency::new(n).unwrap()
}

fn tmp(name: &str) -> std::path::PathBuf {
    crate::temp_db("gate", name)
}

#[test]
fn r33_delta_detection_on_metadata() {
    assert!(metadata_uses_delta(&delta_meta()));
    let mut counters = CheckpointMetadata::default();
    counters.counters_since_delta_snapshot.insert(
        "messages".into(),
        DeltaCounters {
            updates: 1,
            supersteps: 2,
        },
    );
    assert!(metadata_uses_delta(&counters));
    let mut other = CheckpointMetadata::default();
    other.counters_since_delta_snapshot.insert(
        "todos".into(),
        DeltaCounters {
            updates: 1,
            supersteps: 1,
        },
    );
    assert!(!metadata_uses_delta(&other));
    let mut extra = CheckpointMetadata::default();
    extra
        .extra
        .insert("deerflow_checkpoint_channel_mode".into(), json!("delta"));
    assert!(metadata_uses_delta(&extra));
    // The counters as a metadata dict copied key by key leaves them: in `extra`. Before
    // 2026-12-01 only the typed field counted, so a full-mode store took such a checkpoint.
    let mut copied = CheckpointMetadata::default();
    copied.extra.insert(
        "counters_since_delta_snapshot".into(),
        json!({"messages": [1, 2]}),
    );
    assert!(metadata_uses_delta(&copied));
    copied.extra.insert(
        "counters_since_delta_snapshot".into(),
        json!({"todos": [1, 2]}),
    );
    assert!(!metadata_uses_delta(&copied));
    assert!(!metadata_uses_delta(&CheckpointMetadata::default()));
    assert!(!tuple_uses_delta(None));
}

#[test]
fn r32_marker_injection() {
    let mut m = CheckpointMetadata::default();
    inject_mode_marker(&mut m, ChannelMode::Delta);
    assert_eq!(
        m.to_json()["deerflow_checkpoint_channel_mode"],
        json!("delta")
    );
    m.extra
        .insert("deerflow_checkpoint_channel_mode".into(), json!("delta"));
    inject_mode_marker(&mut m, ChannelMode::Full);
    assert!(!m.to_json().contains_key("deerflow_checkpoint_channel_mode"));
    assert!(!metadata_uses_delta(&m));
}

async fn put_delta_thread(saver: &dyn Saver, thread: &str) -> CheckpointConfig {
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 1.into());
    saver
        .put(
            &CheckpointConfig::latest(thread),
            cp,
            delta_meta(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap()
}

#[test]
fn r34_full_mode_fails_closed_on_a_delta_checkpoint_and_delta_mode_never_gates() {
    antler_checkpoint::testing::block_on(async {
        let saver = MemorySaver::new(StoreConfig::delta(f(10)));
        let c = put_delta_thread(&saver, "t-gate").await;
        let tuple = saver.get_tuple(&c).await.unwrap().unwrap();
        let err = check_mode(ChannelMode::Full, &c.thread_id, Some(&tuple)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ModeMismatch);
        let text = err.to_string();
        assert!(
            text.contains("requires delta mode") && text.contains("t-gate"),
            "{text}"
        );
        check_mode(ChannelMode::Delta, &c.thread_id, Some(&tuple)).unwrap();
        check_mode(ChannelMode::Full, &c.thread_id, None).unwrap();
    });
}

#[test]
fn r34_delta_mode_reads_a_legacy_full_thread_with_the_plain_value_as_seed() {
    antler_checkpoint::testing::block_on(async {
        let saver = MemorySaver::new(StoreConfig::delta(f(10)));
        let legacy = vec![
            antler_state_reducers::Message::human("old").with_id("o1"),
            antler_state_reducers::Message::ai("older reply").with_id("o2"),
        ];
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 1.into());
        cp.channel_values
            .insert("messages".into(), Blob::json(&legacy).unwrap());
        let nv = cp.channel_versions.clone();
        let c0 = saver
            .put(
                &CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &nv,
            )
            .await
            .unwrap();
        // A delta run on top: the input checkpoint keeps the version, the step writes a delta.
        let mut cp1 = Checkpoint::empty();
        cp1.channel_versions.insert("messages".into(), 1.into());
        let c1 = saver
            .put(&c0, cp1, delta_meta(), &ChannelVersions::new())
            .await
            .unwrap();
        let new = antler_checkpoint::delta::DeltaWrite::from(vec![
            antler_state_reducers::Message::human("new").with_id("n1"),
        ]);
        saver
            .put_writes(
                &c1,
                vec![("messages".into(), new.to_blob().unwrap())],
                &TaskId::new("task"),
                &TaskPath::default(),
            )
            .await
            .unwrap();
        let mut cp2 = Checkpoint::empty();
        cp2.channel_versions.insert("messages".into(), 2.into());
        let c2 = saver
            .put(&c1, cp2, delta_meta(), &ChannelVersions::new())
            .await
            .unwrap();
        let tuple = saver.get_tuple(&c2).await.unwrap().unwrap();
        let m = antler_checkpoint::delta::materialize(&saver, &tuple, "messages", f(10))
            .await
            .unwrap();
        let ids: Vec<_> = m
            .channel
            .value()
            .iter()
            .map(|m| m.id.clone().unwrap())
            .collect();
        assert_eq!(ids, vec!["o1", "o2", "n1"]);
        assert_eq!(m.seed_checkpoint, c1.checkpoint_id);
        assert_eq!(m.replayed_writes, 1);
    });
}

/// Puts an empty checkpoint with default (full) metadata on `at`.
async fn put_plain(
    saver: &dyn Saver,
    at: &CheckpointConfig,
) -> antler_checkpoint::Result<CheckpointConfig> {
    saver
        .put(
            at,
            Checkpoint::empty(),
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
}

/// Rewrites the SQLite store's record to full mode (as a buggy tool might, or a store that
/// does not record its mode would let one open) and opens it in full mode.
async fn reopen_recorded_full(path: &std::path::Path) -> SqliteSaver {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute(
            "UPDATE antler_meta SET value = 'full' WHERE key = 'channel_mode'",
            [],
        )
        .unwrap();
    SqliteSaver::open(path, StoreConfig::full()).await.unwrap()
}

/// The checks of [`r35_reads_and_writes_are_gated_in_a_full_mode_store`] on a full-mode saver
/// `full` over a store whose thread `t` (head `c`) is delta and whose thread `u` (head
/// `full_cp`) is full.
/// (The memory saver runs the same engine but cannot be reopened under another mode, and a
/// full-mode one refuses to store a delta checkpoint, so it never holds such a thread.)
async fn assert_gated(full: &dyn Saver, c: &CheckpointConfig, full_cp: &CheckpointConfig) {
    // (a) reads: the returned snapshot is checked; each listed item is checked.
    let err = full.get_tuple(c).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
    assert!(err.to_string().contains("requires delta mode"));
    assert_eq!(
        full.list(&ListQuery::thread("t")).await.unwrap_err().kind(),
        ErrorKind::ModeMismatch
    );
    assert_eq!(full.list(&ListQuery::thread("u")).await.unwrap().len(), 1);
    // A filter that the delta checkpoint does not match still reads it: the list fails closed
    // (before 2026-12-02 the filter dropped it first and the list succeeded).
    let filtered = ListQuery {
        filter: [("no such key".to_owned(), serde_json::json!("x"))]
            .into_iter()
            .collect(),
        ..ListQuery::thread("t")
    };
    assert_eq!(
        full.list(&filtered).await.unwrap_err().kind(),
        ErrorKind::ModeMismatch
    );
    assert_eq!(
        full.list_without_values(&filtered)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::ModeMismatch
    );
    assert!(full.get_tuple(full_cp).await.unwrap().is_some());
    // (b) writes: checked before anything is written.
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 2.into());
    let err = full
        .put(
            c,
            cp,
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch);
    let err = full
        .put_writes(
            c,
            vec![("messages".into(), Blob::Null)],
            &TaskId::new("x"),
            &TaskPath::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch);
    // A root checkpoint (no checkpoint addressed) checks the thread's head: stored, it would
    // become the head and hide the delta history from full-mode reads (before 2026-12-02 it
    // was stored).
    let err = full
        .put(
            &CheckpointConfig::latest("t"),
            Checkpoint::empty(),
            CheckpointMetadata::default(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
    // A full-mode store refuses to create delta checkpoints at all.
    let err = full
        .put(
            full_cp,
            Checkpoint::empty(),
            delta_meta(),
            &ChannelVersions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch);
}

/// A store that records full mode but holds delta checkpoints (its record rewritten, say by a
/// buggy tool), opened in full mode: every read and write fails closed.
#[test]
fn r35_reads_and_writes_are_gated_in_a_full_mode_store() {
    antler_checkpoint::testing::block_on(async {
        let path = tmp("legacy.db");
        let (c, full_cp) = {
            let saver = SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                .await
                .unwrap();
            let c = put_delta_thread(&saver, "t").await;
            let mut cp = Checkpoint::empty();
            cp.channel_versions.insert("a".into(), 1.into());
            cp.channel_values
                .insert("a".into(), Blob::json(&1).unwrap());
            let nv = cp.channel_versions.clone();
            let full_cp = saver
                .put(
                    &CheckpointConfig::latest("u"),
                    cp,
                    CheckpointMetadata::default(),
                    &nv,
                )
                .await
                .unwrap();
            (c, full_cp)
        };
        let full = reopen_recorded_full(&path).await;
        assert_gated(&full, &c, &full_cp).await;
        let raw = rusqlite::Connection::open(&path).unwrap();
        let rows: i64 = raw
            .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
            .unwrap();
        let writes: i64 = raw
            .query_row("SELECT COUNT(*) FROM writes", [], |r| r.get(0))
            .unwrap();
        assert_eq!((rows, writes), (2, 0), "a refused write left no trace");
    });
}

/// R35 b for a put that addresses an older full checkpoint of a thread whose head is delta
/// (a full root, then a delta checkpoint on it, in a store later recorded as full): a fork
/// there, or a put again of the delta checkpoint's id under its full parent, would become
/// the head or replace the delta record, so both are refused and nothing is written; a put on
/// a thread whose head is full still lands. Before 2026-12-02 only the parent was checked.
#[test]
fn r35_a_full_mode_put_on_an_old_checkpoint_checks_the_delta_head() {
    antler_checkpoint::testing::block_on(async {
        let path = tmp("fork.db");
        let (root, head) = {
            let saver = SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                .await
                .unwrap();
            let root = put_plain(&saver, &CheckpointConfig::latest("v"))
                .await
                .unwrap();
            let mut cp = Checkpoint::empty();
            cp.channel_versions.insert("messages".into(), 1.into());
            let head = saver
                .put(&root, cp, delta_meta(), &ChannelVersions::new())
                .await
                .unwrap();
            (root, head)
        };
        let full = reopen_recorded_full(&path).await;
        let err = put_plain(&full, &root).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
        assert!(err.to_string().contains("requires delta mode"), "{err}");
        let mut again = Checkpoint::empty();
        again.id = head.checkpoint_id.unwrap();
        let err = full
            .put(
                &root,
                again,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
        let raw = rusqlite::Connection::open(&path).unwrap();
        let rows: i64 = raw
            .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2, "a refused put left no trace");
        // A full thread beside it is not affected.
        let w = put_plain(&full, &CheckpointConfig::latest("w"))
            .await
            .unwrap();
        put_plain(&full, &w).await.unwrap();
    });
}

/// [`r35_reads_and_writes_are_gated_in_a_full_mode_store`] on PostgreSQL: a schema that
/// records full mode, opened in full mode, with a delta thread in it.
#[test]
fn r35_reads_and_writes_are_gated_in_a_full_mode_store_on_postgres() {
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = crate::postgres::fresh(StoreConfig::delta(f(10))).await else {
            return;
        };
        let c = put_delta_thread(&saver, "t").await;
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("a".into(), 1.into());
        cp.channel_values
            .insert("a".into(), Blob::json(&1).unwrap());
        let nv = cp.channel_versions.clone();
        let full_cp = saver
            .put(
                &CheckpointConfig::latest("u"),
                cp,
                CheckpointMetadata::default(),
                &nv,
            )
            .await
            .unwrap();
        drop(saver);
        let (client, conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let s = format!("\"{}\"", options.schema);
        client
            .batch_execute(&format!(
                "UPDATE {s}.antler_meta SET value = 'full' WHERE key = 'channel_mode'"
            ))
            .await
            .unwrap();
        let full = antler_checkpoint::PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .unwrap();
        let count = |table: &'static str| {
            let client = &client;
            let s = s.clone();
            async move {
                client
                    .query_one(&format!("SELECT COUNT(*) FROM {s}.{table}"), &[])
                    .await
                    .unwrap()
                    .get::<_, i64>(0)
            }
        };
        let before = (count("checkpoints").await, count("writes").await);
        assert_gated(&full, &c, &full_cp).await;
        assert_eq!(
            (count("checkpoints").await, count("writes").await),
            before,
            "a refused write left no trace"
        );
        drop(client);
        let _ = task.await;
        full.drop_schema().await.unwrap();
    });
}

#[test]
fn open_time_check_rejects_another_mode_or_frequency() {
    antler_checkpoint::testing::block_on(async {
        let path = tmp("store.db");
        drop(
            SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                .await
                .unwrap(),
        );
        drop(
            SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                .await
                .unwrap(),
        );
        // The delta→full direction is R34's mode mismatch (it names what the store
        // requires); another frequency is a configuration error.
        for (wrong, kind) in [
            (StoreConfig::full(), ErrorKind::ModeMismatch),
            (StoreConfig::delta(f(50)), ErrorKind::Config),
            (
                StoreConfig::full().allow_full_to_delta_migration(),
                ErrorKind::ModeMismatch,
            ),
        ] {
            let err = SqliteSaver::open(&path, wrong).await.unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(
                err.to_string().contains("delta") && err.to_string().contains("10"),
                "{err}"
            );
            assert_eq!(
                err.to_string().contains("requires delta mode"),
                kind == ErrorKind::ModeMismatch,
                "{err}"
            );
        }
    });
}

#[test]
fn open_time_full_to_delta_migration_must_be_asked_for_and_is_one_way() {
    antler_checkpoint::testing::block_on(async {
        let path = tmp("store.db");
        drop(SqliteSaver::open(&path, StoreConfig::full()).await.unwrap());
        let err = SqliteSaver::open(&path, StoreConfig::delta(f(10)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        let migrated = SqliteSaver::open(
            &path,
            StoreConfig::delta(f(20)).allow_full_to_delta_migration(),
        )
        .await
        .unwrap();
        assert_eq!(migrated.store_config().mode, ChannelMode::Delta);
        drop(migrated);
        let err = SqliteSaver::open(&path, StoreConfig::full())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
        assert!(err.to_string().contains("requires delta mode"), "{err}");
        drop(
            SqliteSaver::open(&path, StoreConfig::delta(f(20)))
                .await
                .unwrap(),
        );
    });
}

#[test]
fn open_time_check_on_postgres() {
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = crate::postgres::fresh(StoreConfig::delta(f(10))).await else {
            return;
        };
        drop(saver);
        use antler_checkpoint::PostgresSaver;
        let err = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ModeMismatch, "{err}");
        assert!(err.to_string().contains("requires delta mode"), "{err}");
        let err = PostgresSaver::connect(options.clone(), StoreConfig::delta(f(11)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        PostgresSaver::connect(options, StoreConfig::delta(f(10)))
            .await
            .unwrap()
            .drop_schema()
            .await
            .unwrap();
    });
}

#[test]
fn snapshot_frequency_must_be_positive() {
    let err = SnapshotFrequency::new(0).unwrap_err();
    assert_eq!(err.to_string(), "snapshot frequency must be positive");
    assert_eq!(SnapshotFrequency::default().get(), 10);
}

/// A store that holds checkpoints but records no configuration, or half of one (its record
/// removed or damaged), does not open: recording the caller's configuration over data written
/// under an unknown one would defeat the open-time check. An empty store with half a record
/// opens and records its configuration. Before, every such store opened and took the
/// caller's configuration.
#[test]
fn a_store_with_data_and_no_whole_configuration_does_not_open() {
    antler_checkpoint::testing::block_on(async {
        for (i, remove) in [
            "DELETE FROM antler_meta",
            "DELETE FROM antler_meta WHERE key = 'snapshot_frequency'",
            "DELETE FROM antler_meta WHERE key = 'channel_mode'",
        ]
        .iter()
        .enumerate()
        {
            let path = tmp(&format!("unrecorded-{i}.db"));
            {
                let saver = SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                    .await
                    .unwrap();
                put_delta_thread(&saver, "t").await;
            }
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute(remove, [])
                .unwrap();
            for config in [StoreConfig::full(), StoreConfig::delta(f(50))] {
                let Err(err) = SqliteSaver::open(&path, config).await else {
                    panic!("{remove}: opened");
                };
                assert_eq!(err.kind(), ErrorKind::Config, "{remove}: {err}");
                assert!(err.to_string().contains("holds checkpoints"), "{err}");
            }
            let left: i64 = rusqlite::Connection::open(&path)
                .unwrap()
                .query_row("SELECT COUNT(*) FROM antler_meta WHERE key IN ('channel_mode', 'snapshot_frequency')", [], |r| r.get(0))
                .unwrap();
            assert!(left < 2, "{remove}: nothing recorded");
        }
        // No data: a half record is rewritten.
        let path = tmp("unrecorded-empty.db");
        drop(
            SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                .await
                .unwrap(),
        );
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "DELETE FROM antler_meta WHERE key = 'snapshot_frequency'",
                [],
            )
            .unwrap();
        SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        // The same on PostgreSQL.
        let Some((saver, options)) = crate::postgres::fresh(StoreConfig::delta(f(10))).await else {
            return;
        };
        put_delta_thread(&saver, "t").await;
        drop(saver);
        let err = pg_open_after(
            &options,
            "DELETE FROM {s}.antler_meta WHERE key = 'snapshot_frequency'",
            StoreConfig::full(),
        )
        .await;
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    });
}

/// Runs `edit` (`{s}`: the schema) on the PostgreSQL store `options` names, then opens it with
/// `config`, which must fail: the error. The schema is dropped afterwards.
async fn pg_open_after(
    options: &antler_checkpoint::PostgresOptions,
    edit: &str,
    config: StoreConfig,
) -> antler_checkpoint::Error {
    let (client, conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let s = format!("\"{}\"", options.schema);
    client
        .batch_execute(&edit.replace("{s}", &s))
        .await
        .unwrap();
    let opened = antler_checkpoint::PostgresSaver::connect(options.clone(), config).await;
    client
        .batch_execute(&format!("DROP SCHEMA {s} CASCADE"))
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    match opened {
        Ok(_) => panic!("{edit}: opened"),
        Err(e) => e,
    }
}

/// A recorded configuration that does not parse (a mode or frequency no build writes) is a
/// damaged record, kind `Config`, whether or not the store holds checkpoints; before, it was
/// `InvalidInput`, and a frequency of 0 read as the caller's own bad argument.
#[test]
fn an_unreadable_recorded_configuration_is_a_damaged_store() {
    antler_checkpoint::testing::block_on(async {
        let edits = [
            "UPDATE antler_meta SET value = '0' WHERE key = 'snapshot_frequency'",
            "UPDATE antler_meta SET value = 'ten' WHERE key = 'snapshot_frequency'",
            "UPDATE antler_meta SET value = 'sideways' WHERE key = 'channel_mode'",
            // A value of another type than text, which SQLite's columns take.
            "UPDATE antler_meta SET value = x'3130' WHERE key = 'snapshot_frequency'",
        ];
        for (i, edit) in edits.iter().enumerate() {
            for data in [false, true] {
                let path = tmp(&format!("unreadable-{i}-{data}.db"));
                {
                    let saver = SqliteSaver::open(&path, StoreConfig::delta(f(10)))
                        .await
                        .unwrap();
                    if data {
                        put_delta_thread(&saver, "t").await;
                    }
                }
                rusqlite::Connection::open(&path)
                    .unwrap()
                    .execute(edit, [])
                    .unwrap();
                let Err(err) = SqliteSaver::open(&path, StoreConfig::delta(f(10))).await else {
                    panic!("{edit}: opened");
                };
                assert_eq!(err.kind(), ErrorKind::Config, "{edit}: {err}");
                assert!(err.to_string().contains("unreadable"), "{err}");
            }
        }
        // The same on PostgreSQL.
        let Some((saver, options)) = crate::postgres::fresh(StoreConfig::delta(f(10))).await else {
            return;
        };
        drop(saver);
        let err = pg_open_after(
            &options,
            "UPDATE {s}.antler_meta SET value = '0' WHERE key = 'snapshot_frequency'",
            StoreConfig::delta(f(10)),
        )
        .await;
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.to_string().contains("unreadable"), "{err}");
    });
}

/// SQLite reads the recorded configuration in one snapshot: while another process rewrites
/// the record between (full, 10) and (delta, 20), every open with (full, 20) fails naming one
/// of the two, never a mix of them. Before, the two keys were read by two statements, each in
/// its own snapshot: an open could read (full, 20), open a delta store in full mode, or name
/// a configuration that never existed.
#[test]
fn the_sqlite_configuration_is_read_in_one_snapshot() {
    antler_checkpoint::testing::block_on(async {
        let path = tmp("torn-config.db");
        drop(SqliteSaver::open(&path, StoreConfig::full()).await.unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let c = rusqlite::Connection::open(&path).unwrap();
                c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                let mut rewrites = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (mode, frequency) = if rewrites.is_multiple_of(2) {
                        ("delta", "20")
                    } else {
                        ("full", "10")
                    };
                    c.execute_batch(&format!(
                        "BEGIN IMMEDIATE;
                         UPDATE antler_meta SET value = '{mode}' WHERE key = 'channel_mode';
                         UPDATE antler_meta SET value = '{frequency}' WHERE key = 'snapshot_frequency';
                         COMMIT;"
                    ))
                    .unwrap();
                    rewrites += 1;
                }
                rewrites
            })
        };
        let requested = StoreConfig {
            mode: ChannelMode::Full,
            snapshot_frequency: f(20),
            ..StoreConfig::full()
        };
        for _ in 0..400 {
            match SqliteSaver::open(&path, requested).await {
                Ok(_) => panic!("opened with (full, 20), which the store never recorded"),
                Err(antler_checkpoint::Error::StoreConfigMismatch {
                    stored_mode,
                    stored_frequency,
                    ..
                }) => assert!(
                    matches!(
                        (stored_mode, stored_frequency.get()),
                        (ChannelMode::Full, 10) | (ChannelMode::Delta, 20)
                    ),
                    "read a configuration never recorded: ({stored_mode}, {stored_frequency})"
                ),
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(writer.join().unwrap() > 0, "the record was rewritten");
    });
}

/// A delta-marked checkpoint whose counters sit in `extra` (a metadata dict copied key by key)
/// needs its channel's history as much as one with typed counters: `prune` keeps the ancestors
/// the walk replays from, which the mode gate's reading of the same metadata implies. Before,
/// prune read only the typed counters and deleted the snapshot the head replays from.
#[test]
fn prune_keeps_the_history_of_counters_carried_in_extra() {
    antler_checkpoint::testing::block_on(async {
        let saver = MemorySaver::new(StoreConfig::delta(f(10)));
        let ch = antler_checkpoint::ChannelName::new("m");
        let mut seed = Checkpoint::empty();
        seed.channel_versions.insert(ch.clone(), 1.into());
        seed.channel_values
            .insert(ch.clone(), Blob::json(&json!(["s0"])).unwrap());
        let c0 = saver
            .put(
                &CheckpointConfig::latest("t"),
                seed,
                delta_meta(),
                &[(ch.clone(), 1.into())].into(),
            )
            .await
            .unwrap();
        saver
            .put_writes(
                &c0,
                vec![(ch.clone(), Blob::json(&json!(["a"])).unwrap())],
                &TaskId::new("task"),
                &TaskPath::new("~0"),
            )
            .await
            .unwrap();
        let mut head = Checkpoint::empty();
        head.channel_versions.insert(ch.clone(), 2.into());
        let mut meta = delta_meta();
        meta.extra
            .insert("counters_since_delta_snapshot".into(), json!({"m": [1, 1]}));
        let c1 = saver
            .put(&c0, head, meta, &[(ch.clone(), 2.into())].into())
            .await
            .unwrap();
        let before = saver
            .delta_channel_history(&c1, std::slice::from_ref(&ch))
            .await
            .unwrap();
        assert!(
            before.get("m").is_some_and(|h| h.seed.is_some()),
            "{before:?}"
        );
        saver
            .prune(&["t".into()], antler_checkpoint::PruneStrategy::KeepLatest)
            .await
            .unwrap();
        let list = saver.list(&ListQuery::thread("t")).await.unwrap();
        assert_eq!(list.len(), 2);
        let after = saver
            .delta_channel_history(&c1, std::slice::from_ref(&ch))
            .await
            .unwrap();
        assert_eq!(after, before);
    });
}
