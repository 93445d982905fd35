//! Public futures are `Send` and savers are shareable across tasks (house style: async).

use antler_checkpoint::{
    CheckpointConfig, ListQuery, MemorySaver, Saver, SnapshotFrequency, SqliteSaver, StoreConfig,
};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync<T: Send + Sync + ?Sized>() {}

#[test]
fn saver_futures_are_send() {
    assert_send_sync::<dyn Saver>();
    assert_send_sync::<MemorySaver>();
    assert_send_sync::<SqliteSaver>();
    assert_send_sync::<antler_checkpoint::PostgresSaver>();
    let saver = MemorySaver::new(StoreConfig::full());
    let config = CheckpointConfig::latest("t");
    assert_send(&saver.get_tuple(&config));
    assert_send(&saver.list(&ListQuery::default()));
    assert_send(&SqliteSaver::open_in_memory(StoreConfig::full()));
    let tuple_future = async {
        let t = saver.get_tuple(&config).await.unwrap().unwrap();
        antler_checkpoint::delta::materialize(&saver, &t, "messages", SnapshotFrequency::DEFAULT)
            .await
    };
    assert_send(&tuple_future);
}
