//! The conformance suite on the SQLite saver: `:memory:` in delta mode, and a file in full mode.

mod in_memory {
    use antler_checkpoint::{Saver, SnapshotFrequency, SqliteSaver, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        let saver = SqliteSaver::open_in_memory(StoreConfig::delta(SnapshotFrequency::DEFAULT))
            .await
            .expect("open :memory:");
        Some(Box::new(saver) as Box<dyn Saver>)
    });
}

mod file {
    use antler_checkpoint::{Saver, SqliteSaver, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        let saver = SqliteSaver::open(crate::temp_db("antler-ck", "store.db"), StoreConfig::full())
            .await
            .expect("open file");
        Some(Box::new(saver) as Box<dyn Saver>)
    });
}

/// A namespace whose mark row is gone while its checkpoints stay (as after a put racing a
/// delete) is not given the next put's lower figure, and a copy of it does not leave the
/// target's lower figure: both fall back to the records.
#[test]
fn a_namespace_that_lost_its_mark_falls_back_to_its_records() {
    use antler_checkpoint::{SqliteSaver, StoreConfig};
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("antler-lost-mark", "store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let lose = |t: &'static str| {
            let path = path.clone();
            async move {
                rusqlite::Connection::open(&path)
                    .unwrap()
                    .execute("DELETE FROM version_marks WHERE thread_id = ?1", [t])
                    .unwrap();
            }
        };
        antler_checkpoint::testing::antler_a_lost_mark_falls_back_to_the_records(&saver, lose)
            .await;
    });
}

/// The saver answers `max_channel_version` from a high-water mark.
#[test]
fn the_greatest_version_is_a_high_water_mark() {
    use antler_checkpoint::{SqliteSaver, StoreConfig};
    antler_checkpoint::testing::block_on(async {
        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        antler_checkpoint::testing::antler_max_channel_version_is_a_high_water_mark(&saver).await;
    });
}

/// A store written by schema version 2 (no version marks) gets each namespace's mark from its
/// records when it is migrated, so `max_channel_version` is right without reading them again;
/// a namespace with a record that cannot be decoded gets an unknown mark and its figure is a
/// typed error.
#[test]
fn a_version_2_store_gets_its_version_marks_from_its_records() {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{
        ChannelVersions, CheckpointConfig, CheckpointNs, CheckpointSource, ErrorKind, Saver,
        SqliteSaver, StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("antler-marks", "store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        async fn put(
            saver: &SqliteSaver,
            t: &str,
            ns: &str,
            v: u64,
            parent: Option<CheckpointConfig>,
        ) -> CheckpointConfig {
            let cp = checkpoint(&[("a", v, serde_json::json!(v))]);
            let nv: ChannelVersions = cp.channel_versions.clone();
            let at = parent.unwrap_or_else(|| CheckpointConfig::latest(t).with_ns(ns));
            saver
                .put(&at, cp, metadata(CheckpointSource::Loop, 0, None), &nv)
                .await
                .unwrap()
        }
        // Thread t: 1, 2, then a fork of the first at 8 and a sibling at 3 (the latest).
        let first = put(&saver, "t", "", 1, None).await;
        put(&saver, "t", "", 2, Some(first.clone())).await;
        put(&saver, "t", "", 8, Some(first.clone())).await;
        put(&saver, "t", "", 3, Some(first)).await;
        put(&saver, "t", "sub:x", 6, None).await;
        put(&saver, "bad", "", 4, None).await;
        put(&saver, "neg", "", 5, None).await;
        // One damaged value beside an intact one, and a value under a version that is no number.
        let five = put(&saver, "mixed", "", 5, None).await;
        put(&saver, "mixed", "", 7, Some(five)).await;
        put(&saver, "text", "", 5, None).await;
        drop(saver);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE version_marks; DROP TABLE run_threads; PRAGMA user_version = 2;
             UPDATE checkpoints SET record = X'00' WHERE thread_id = 'bad';
             UPDATE blobs SET version = -5 WHERE thread_id = 'neg';
             UPDATE blobs SET version = -5 WHERE thread_id = 'mixed' AND version = 5;
             UPDATE blobs SET version = 'five' WHERE thread_id = 'text';",
        )
        .unwrap();
        drop(conn);
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let max = |t: &'static str, ns: &'static str| {
            let saver = &saver;
            async move {
                saver
                    .max_channel_version(&t.into(), &CheckpointNs::new(ns))
                    .await
            }
        };
        assert_eq!(max("t", "").await.unwrap(), 8);
        assert_eq!(max("t", "sub:x").await.unwrap(), 6);
        assert_eq!(max("nobody", "").await.unwrap(), 0);
        let err = max("bad", "").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        // A damaged (negative) stored version neither stops the migration nor counts as a
        // mark: the namespace falls back to its rows, which report the damage.
        let err = max("neg", "").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("thread neg"), "{err}");
        saver.delete_thread(&"neg".into()).await.unwrap();
        // Not hidden by an intact greater version beside it (before 2026-12-02 the mark was
        // that greater version), and a version that is no number does not stop the migration
        // (before, every open failed).
        for t in ["mixed", "text"] {
            let err = max(t, "").await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{t}: {err}");
            assert!(err.to_string().contains(&format!("thread {t}")), "{err}");
            saver.delete_thread(&t.into()).await.unwrap();
        }
        // The unknown mark stays unknown: a put with lower versions does not make it known (it
        // would be below the damaged record's), and a copy carries it.
        let stored = saver
            .put(
                &CheckpointConfig::latest("bad"),
                checkpoint(&[("b", 1, serde_json::json!(1))]),
                metadata(CheckpointSource::Loop, 1, None),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        assert!(stored.checkpoint_id.is_some());
        assert_eq!(max("bad", "").await.unwrap_err().kind(), ErrorKind::Corrupt);
        put(&saver, "copy", "", 2, None).await;
        saver
            .copy_thread(&"bad".into(), &"copy".into())
            .await
            .unwrap();
        assert_eq!(
            max("copy", "").await.unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        saver.delete_thread(&"bad".into()).await.unwrap();
        saver.delete_thread(&"copy".into()).await.unwrap();
        drop(saver);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let marks: Vec<(String, String, i64)> = conn
            .prepare("SELECT thread_id, checkpoint_ns, version FROM version_marks ORDER BY 1, 2")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            marks,
            vec![("t".into(), "".into(), 8), ("t".into(), "sub:x".into(), 6)]
        );
    });
}

/// A store written by schema version 1 (no `thread_epochs`) is migrated on open, keeps its
/// data, and a store from a newer build is refused.
#[test]
fn a_version_1_store_is_migrated_and_a_newer_one_refused() {
    use antler_checkpoint::{
        CheckpointConfig, ErrorKind, SQLITE_SCHEMA_VERSION, Saver, SqliteSaver, StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("antler-migrate", "store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let stored = saver
            .put(
                &CheckpointConfig::latest("t-migrate"),
                antler_checkpoint::Checkpoint::empty(),
                antler_checkpoint::CheckpointMetadata::default(),
                &antler_checkpoint::ChannelVersions::new(),
            )
            .await
            .unwrap();
        saver.delete_thread(&"t-gone".into()).await.unwrap();
        drop(saver);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE thread_epochs; DROP TABLE version_marks; DROP TABLE run_threads; PRAGMA user_version = 1;",
        )
        .unwrap();
        drop(conn);
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        assert!(saver.get_tuple(&stored).await.unwrap().is_some());
        // The new table works: deleting a thread bumps its epoch.
        saver.delete_thread(&"t-migrate".into()).await.unwrap();
        assert!(
            saver
                .get_tuple(&CheckpointConfig::latest("t-migrate"))
                .await
                .unwrap()
                .is_none()
        );
        drop(saver);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SQLITE_SCHEMA_VERSION);
        let epoch: i64 = conn
            .query_row(
                "SELECT epoch FROM thread_epochs WHERE thread_id = 't-migrate'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(epoch, 1);
        conn.pragma_update(None, "user_version", SQLITE_SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let err = SqliteSaver::open(&path, StoreConfig::full())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        // The newer schema is refused before the write lock is asked for: another process
        // holding it does not turn the refusal into a busy error.
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = SqliteSaver::open(&path, StoreConfig::full())
            .await
            .unwrap_err();
        assert!(
            matches!(err, antler_checkpoint::Error::SchemaTooNew { .. }),
            "{err}"
        );
        holder.execute_batch("ROLLBACK").unwrap();
    });
}

/// An empty path is refused: SQLite would open a private temporary database that is deleted
/// when the saver closes, losing everything without an error.
#[test]
fn an_empty_path_is_refused() {
    use antler_checkpoint::{ErrorKind, SqliteSaver, StoreConfig};
    antler_checkpoint::testing::block_on(async {
        let err = SqliteSaver::open("", StoreConfig::full())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("open_in_memory"), "{err}");
    });
}

/// `open(":memory:")` opens a private in-memory store, as `open_in_memory` does (before, it
/// failed: an in-memory database has no WAL journal). Two such stores share nothing.
#[test]
fn opening_memory_by_name_gives_a_private_in_memory_store() {
    use antler_checkpoint::{
        ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, Saver, SqliteSaver,
        StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let a = SqliteSaver::open(":memory:", StoreConfig::full())
            .await
            .unwrap();
        let b = SqliteSaver::open(":memory:", StoreConfig::full())
            .await
            .unwrap();
        let put = a
            .put(
                &CheckpointConfig::latest("t"),
                Checkpoint::empty(),
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        assert!(a.get_tuple(&put).await.unwrap().is_some());
        assert!(
            b.get_tuple(&CheckpointConfig::latest("t"))
                .await
                .unwrap()
                .is_none()
        );
    });
}

/// A store written by schema version 3 (no run index) gets its index from the records'
/// metadata when it is migrated: `delete_for_runs`, which looks runs up there, finds every
/// thread of a run written before the migration, and a later put and `copy_thread` keep the
/// index up to date.
#[test]
fn a_version_3_store_gets_its_run_index_from_its_records() {
    use antler_checkpoint::{CheckpointConfig, RunId, Saver, SqliteSaver, StoreConfig};
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("antler-runs", "store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        crate::put_for_run(&saver, "t1", "r1", 1).await;
        crate::put_for_run(&saver, "t1", "r2", 2).await;
        crate::put_for_run(&saver, "t2", "r1", 1).await;
        crate::put_for_run(&saver, "t5", "r1", 1).await;
        drop(saver);
        let conn = rusqlite::Connection::open(&path).unwrap();
        // t5's metadata is damaged: the migration gives it no pair (and still opens).
        conn.execute_batch(
            "DROP TABLE run_threads; PRAGMA user_version = 3;
             UPDATE checkpoints SET metadata = X'00' WHERE thread_id = 't5';",
        )
        .unwrap();
        drop(conn);
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        crate::put_for_run(&saver, "t3", "r1", 1).await;
        saver.copy_thread(&"t2".into(), &"t4".into()).await.unwrap();
        saver.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
        assert_eq!(
            crate::checkpoint_count(&saver, "t1").await,
            1,
            "r2's checkpoint stays"
        );
        for t in ["t2", "t3", "t4"] {
            assert_eq!(
                crate::checkpoint_count(&saver, t).await,
                0,
                "{t} held only r1"
            );
        }
        let damaged = saver
            .get_tuple(&CheckpointConfig::latest("t5"))
            .await
            .unwrap_err();
        assert_eq!(
            damaged.kind(),
            antler_checkpoint::ErrorKind::Corrupt,
            "{damaged}"
        );
    });
}
