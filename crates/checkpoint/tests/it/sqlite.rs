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
        conn.execute_batch("DROP TABLE thread_epochs; PRAGMA user_version = 1;")
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
    });
}
