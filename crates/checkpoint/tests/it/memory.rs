//! The conformance suite on the in-memory saver, in both store modes.

mod full {
    use antler_checkpoint::{MemorySaver, Saver, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        Some(Box::new(MemorySaver::new(StoreConfig::full())) as Box<dyn Saver>)
    });
}

mod delta {
    use antler_checkpoint::{MemorySaver, Saver, SnapshotFrequency, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        Some(Box::new(MemorySaver::new(StoreConfig::delta(
            SnapshotFrequency::DEFAULT,
        ))) as Box<dyn Saver>)
    });
}

/// The saver answers `max_channel_version` from a high-water mark.
#[test]
fn the_greatest_version_is_a_high_water_mark() {
    use antler_checkpoint::{MemorySaver, StoreConfig};
    antler_checkpoint::testing::block_on(
        antler_checkpoint::testing::antler_max_channel_version_is_a_high_water_mark(
            &MemorySaver::new(StoreConfig::full()),
        ),
    );
}

/// A read racing a prune on another worker thread returns the checkpoint whole (its values
/// and writes) or not at all: the saver reads a tuple's rows under one lock.
#[test]
fn a_read_racing_a_prune_returns_the_checkpoint_whole_or_not_at_all() {
    use std::sync::Arc;

    use antler_checkpoint::{
        Blob, ChannelName, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig,
        CheckpointMetadata, MemorySaver, PruneStrategy, Saver, StoreConfig, TaskId, TaskPath,
        ThreadId,
    };
    // Two OS threads, each with its own runtime, so the read and the prune really overlap.
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    };
    let rt = runtime();
    rt.block_on(async {
        let saver = Arc::new(MemorySaver::new(StoreConfig::full()));
        let a = ChannelName::new("a");
        let mut overlapped = 0;
        for round in 0..300 {
            let thread = ThreadId::new(format!("t{round}"));
            let mut configs: Vec<CheckpointConfig> = Vec::new();
            for i in 0..3u64 {
                let mut cp = Checkpoint::empty();
                cp.channel_versions
                    .insert(a.clone(), ChannelVersion::new(i + 1));
                cp.channel_values
                    .insert(a.clone(), Blob::json(&serde_json::json!(i)).unwrap());
                let versions: ChannelVersions = cp.channel_versions.clone();
                let at = CheckpointConfig {
                    thread_id: thread.clone(),
                    checkpoint_ns: Default::default(),
                    checkpoint_id: configs.last().and_then(|c| c.checkpoint_id),
                };
                let stored = saver
                    .put(&at, cp, CheckpointMetadata::default(), &versions)
                    .await
                    .unwrap();
                saver
                    .put_writes(
                        &stored,
                        vec![(a.clone(), Blob::json(&serde_json::json!("w")).unwrap())],
                        &TaskId::new("task"),
                        &TaskPath::new("0"),
                    )
                    .await
                    .unwrap();
                configs.push(stored);
            }
            let reader = {
                let saver = saver.clone();
                let at = configs[0].clone();
                let rt = runtime();
                std::thread::spawn(move || {
                    rt.block_on(async {
                        let mut whole = 0;
                        while let Some(t) = saver.get_tuple(&at).await.unwrap() {
                            assert_eq!(t.checkpoint.channel_values.len(), 1, "values of {t:?}");
                            assert_eq!(t.pending_writes.len(), 1, "writes of {t:?}");
                            whole += 1;
                        }
                        whole
                    })
                })
            };
            saver
                .prune(std::slice::from_ref(&thread), PruneStrategy::KeepLatest)
                .await
                .unwrap();
            // Reads that found the checkpoint whole: the reader ran while it still existed.
            if reader.join().unwrap() > 0 {
                overlapped += 1;
            }
        }
        // Without a round in which the reader ran before the prune removed the checkpoint, the
        // test would have checked nothing.
        assert!(overlapped > 0, "no read overlapped a prune in 300 rounds");
    });
}
