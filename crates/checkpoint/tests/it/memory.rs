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
