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

/// The history walk reads ancestors a page at a time, past the seed: a record damaged beyond
/// the seed does not fail the walk, while damage on the walk's way still does (naming the
/// damaged checkpoint). Before, every row of the page was decoded first, so damage anywhere in
/// it failed the walk.
#[test]
fn damage_beyond_the_history_walk_s_seed_does_not_fail_it() {
    use antler_checkpoint::{ChannelName, ErrorKind, PendingWrite};
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("ancestry", "walk.sqlite");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        // c0 … c9, each with `m` at version i + 1 and a write to it; only c3 stores its value.
        let mut cs: Vec<CheckpointConfig> = Vec::new();
        for i in 0..10u64 {
            let mut cp = Checkpoint::empty();
            let v = ChannelVersion::new(i + 1);
            cp.channel_versions.insert("m".into(), v);
            let mut new_versions = ChannelVersions::new();
            if i == 3 {
                cp.channel_values
                    .insert("m".into(), Blob::json(&"seed").unwrap());
                new_versions.insert("m".into(), v);
            }
            let parent = cs
                .last()
                .cloned()
                .unwrap_or_else(|| CheckpointConfig::latest("t"));
            let at = saver
                .put(&parent, cp, CheckpointMetadata::default(), &new_versions)
                .await
                .unwrap();
            saver
                .put_writes(
                    &at,
                    vec![("m".into(), Blob::json(&i).unwrap())],
                    &"task".into(),
                    &"".into(),
                )
                .await
                .unwrap();
            cs.push(at);
        }
        let damage = |id: antler_checkpoint::CheckpointId| {
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute(
                    "UPDATE checkpoints SET metadata = x'2100000000' WHERE checkpoint_id = ?1",
                    rusqlite::params![id.to_bytes()],
                )
                .unwrap();
        };
        let m = [ChannelName::new("m")];
        let before = saver.delta_channel_history(&cs[9], &m).await.unwrap();
        damage(cs[1].checkpoint_id.unwrap());
        let after = saver.delta_channel_history(&cs[9], &m).await.unwrap();
        assert_eq!(after, before);
        let h = &after[&m[0]];
        assert_eq!(h.seed_checkpoint, cs[3].checkpoint_id);
        let replayed: Vec<i64> = h
            .writes
            .iter()
            .map(|w: &PendingWrite| w.value.decode_json().unwrap())
            .collect();
        assert_eq!(replayed, [3, 4, 5, 6, 7, 8]);
        // Damage the walk passes through fails it.
        damage(cs[5].checkpoint_id.unwrap());
        let err = saver.delta_channel_history(&cs[9], &m).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(
            err.to_string()
                .contains(&cs[5].checkpoint_id.unwrap().to_string()),
            "{err}"
        );
    });
}
