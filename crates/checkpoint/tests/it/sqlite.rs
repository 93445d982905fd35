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
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("antler-ck-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let saver = SqliteSaver::open(dir.join("store.db"), StoreConfig::full())
            .await
            .expect("open file");
        Some(Box::new(saver) as Box<dyn Saver>)
    });
}
