//! The conformance suite on the in-memory saver.

use antler_checkpoint::{MemorySaver, Saver, StoreConfig};

antler_checkpoint::conformance_suite!(|| async {
    Some(Box::new(MemorySaver::new(StoreConfig::full())) as Box<dyn Saver>)
});
