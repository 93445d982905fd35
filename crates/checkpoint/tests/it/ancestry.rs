//! `Saver::get_tuple_with_ancestry` over more ancestors than one page of the ancestor walk
//! (512 rows): the walk goes on page by page to the first full record, and stops there.

use antler_checkpoint::{
    Blob, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    MemorySaver, RELATIVE_RECORD_V, Saver, SqliteSaver, StoreConfig,
    get_tuple_with_ancestry_default,
};

/// 601 checkpoints on thread `t`: `r0` full with `a`@1 and `b`@1, then relative records each
/// listing only `a`@(i + 1), except `r50`, a full record listing `a`@51 and `b`@1. Returns
/// the configs, oldest first.
async fn long_thread(saver: &dyn Saver) -> Vec<CheckpointConfig> {
    let mut out: Vec<CheckpointConfig> = Vec::new();
    for i in 0..=600u64 {
        let mut cp = Checkpoint::empty();
        let mut new_versions = ChannelVersions::new();
        cp.channel_versions
            .insert("a".into(), ChannelVersion::new(i + 1));
        cp.channel_values
            .insert("a".into(), Blob::json(&i).unwrap());
        new_versions.insert("a".into(), ChannelVersion::new(i + 1));
        match i {
            0 => {
                cp.channel_versions
                    .insert("b".into(), ChannelVersion::new(1));
                cp.channel_values
                    .insert("b".into(), Blob::json(&"b1").unwrap());
                new_versions.insert("b".into(), ChannelVersion::new(1));
            }
            50 => {
                cp.channel_versions
                    .insert("b".into(), ChannelVersion::new(1));
            }
            _ => cp.v = RELATIVE_RECORD_V,
        }
        let parent = out
            .last()
            .cloned()
            .unwrap_or_else(|| CheckpointConfig::latest("t"));
        let at = saver
            .put(&parent, cp, CheckpointMetadata::default(), &new_versions)
            .await
            .unwrap();
        out.push(at);
    }
    out
}

async fn check(saver: &dyn Saver) {
    let cs = long_thread(saver).await;
    let head = &cs[600];
    let parent = &cs[599];
    for limit in [1000, 600, 551, 550, 512, 513] {
        let own = saver
            .get_tuple_with_ancestry(head, limit)
            .await
            .unwrap()
            .unwrap();
        let default = get_tuple_with_ancestry_default(saver, head, limit)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(own, default, "limit {limit}");
        let mut walk = saver
            .get_ancestors_without_values(parent, limit)
            .await
            .unwrap();
        // r599 … r50: 550 records, r50 the first full one.
        walk.truncate(550);
        assert_eq!(own.ancestors, walk, "limit {limit}");
        assert_eq!(own.ancestors.len(), limit.min(550), "limit {limit}");
        let b = (
            antler_checkpoint::ChannelName::new("b"),
            ChannelVersion::new(1),
        );
        if limit >= 550 {
            assert_eq!(
                own.ancestors.last().unwrap().checkpoint.v,
                4,
                "limit {limit}"
            );
            let value = own.inherited[&b].as_ref().unwrap();
            assert_eq!(value.decode_json::<String>().unwrap(), "b1");
            assert_eq!(own.inherited.len(), 1);
        } else {
            // The full record that lists `b` lies beyond the limit.
            assert!(own.inherited.is_empty(), "limit {limit}");
        }
    }
}

#[test]
fn an_ancestry_longer_than_a_page_is_followed_to_its_first_full_record() {
    antler_checkpoint::testing::block_on(async {
        check(&MemorySaver::new(StoreConfig::full())).await;
        let path = crate::temp_db("ancestry", "long.sqlite");
        check(&SqliteSaver::open(&path, StoreConfig::full()).await.unwrap()).await;
        // PostgreSQL reads the first page with the row (one statement), then pages on.
        if let Some((saver, _)) = crate::postgres::fresh(StoreConfig::full()).await {
            check(&saver).await;
            saver.drop_schema().await.unwrap();
        }
    });
}

/// The savers read ancestors only up to the first full record: a record damaged beyond it
/// (here `r10`, behind the full `r50`) does not fail the read, while the plain ancestor walk,
/// which goes on to the limit, reports it.
#[test]
fn damage_beyond_the_first_full_record_does_not_fail_the_read() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("ancestry", "damaged.sqlite");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let cs = long_thread(&saver).await;
        let damaged = cs[10].checkpoint_id.unwrap();
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE checkpoints SET metadata = x'2100000000' WHERE checkpoint_id = ?1",
                rusqlite::params![damaged.to_bytes()],
            )
            .unwrap();
        let read = saver
            .get_tuple_with_ancestry(&cs[600], 1000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.ancestors.len(), 550);
        let err = saver
            .get_ancestors_without_values(&cs[599], 1000)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), antler_checkpoint::ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains(&damaged.to_string()), "{err}");
    });
}
