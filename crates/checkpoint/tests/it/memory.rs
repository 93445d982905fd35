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
