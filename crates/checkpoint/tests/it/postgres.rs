//! The conformance suite on the PostgreSQL saver, one fresh schema per test.
//!
//! Without `DATABASE_URL` every test skips visibly (a line on stderr); under `CI=true`
//! a missing `DATABASE_URL` fails instead, so CI always runs them against a real server.

use antler_checkpoint::{PostgresOptions, PostgresSaver, StoreConfig};

/// The server URL, or `None` (skip) outside CI; panics under CI (`CI` set, not `0` or `false`)
/// without one.
pub(crate) fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                // CI services set `CI` to `true` or `1`; only unset, empty, `0` or `false` is
                // a developer's machine, where the test may skip.
                !std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false")),
                "DATABASE_URL is unset under CI: the PostgreSQL tests must run, not skip"
            );
            eprintln!("SKIPPED: PostgreSQL test (DATABASE_URL is unset)");
            None
        }
    }
}

/// A saver on a fresh schema of its own.
pub(crate) async fn fresh(config: StoreConfig) -> Option<(PostgresSaver, PostgresOptions)> {
    fresh_with_pool(config, 2).await
}

/// [`fresh`] with a pool of `pool` connections.
async fn fresh_with_pool(
    config: StoreConfig,
    pool: usize,
) -> Option<(PostgresSaver, PostgresOptions)> {
    let url = database_url()?;
    let schema = format!("antler_test_{}", uuid::Uuid::new_v4().simple());
    let options = PostgresOptions::new(url)
        .with_schema(schema)
        .with_pool_size(pool);
    let saver = PostgresSaver::connect(options.clone(), config)
        .await
        .expect("connect to DATABASE_URL");
    Some((saver, options))
}

/// A second session on the test server, with the task that drives its connection.
async fn connect(url: &str) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to DATABASE_URL");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

/// Whether some session of the database comes to wait on a lock (polled up to 5,000 times,
/// yielding in between so the session under test can run).
async fn until_a_session_waits_on_a_lock(watch: &tokio_postgres::Client) -> bool {
    for _ in 0..5_000 {
        let waiting: i64 = watch
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
                &[],
            )
            .await
            .expect("read pg_stat_activity")
            .get(0);
        if waiting > 0 {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

mod suite {
    use antler_checkpoint::{Saver, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        super::fresh(StoreConfig::full())
            .await
            .map(|(s, _)| Box::new(s) as Box<dyn Saver>)
    });
}

/// The suite on a delta-mode store too: the mode-gated cases take their delta branch.
mod delta_suite {
    use antler_checkpoint::{Saver, SnapshotFrequency, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        super::fresh(StoreConfig::delta(SnapshotFrequency::DEFAULT))
            .await
            .map(|(s, _)| Box::new(s) as Box<dyn Saver>)
    });
}

/// A namespace whose mark row is gone while its checkpoints stay (as after a put racing a
/// delete) is not given the next put's lower figure, and a copy of it does not leave the
/// target's lower figure: both fall back to the records.
#[test]
fn a_namespace_that_lost_its_mark_falls_back_to_its_records() {
    use antler_checkpoint::StoreConfig;
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        let (client, task) = connect(&options.url).await;
        let delete = format!(
            "DELETE FROM \"{}\".version_marks WHERE thread_id = $1",
            options.schema
        );
        let lose = |t: &'static str| {
            let (client, delete) = (&client, &delete);
            async move {
                client.execute(delete, &[&t]).await.unwrap();
            }
        };
        antler_checkpoint::testing::antler_a_lost_mark_falls_back_to_the_records(&saver, lose)
            .await;
        drop(client);
        task.abort();
        saver.drop_schema().await.unwrap();
    });
}

/// The saver answers `max_channel_version` from a high-water mark.
#[test]
fn the_greatest_version_is_a_high_water_mark() {
    use antler_checkpoint::StoreConfig;
    antler_checkpoint::testing::block_on(async {
        let Some((saver, _)) = fresh(StoreConfig::full()).await else {
            return;
        };
        antler_checkpoint::testing::antler_max_channel_version_is_a_high_water_mark(&saver).await;
        saver.drop_schema().await.unwrap();
    });
}

/// A store written by schema version 2 (no version marks) gets each namespace's mark from its
/// records when it is migrated; a namespace with a record that cannot be decoded gets an
/// unknown mark, and its figure is a typed error.
#[test]
fn a_version_2_store_gets_its_version_marks_from_its_records() {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{
        ChannelVersions, CheckpointConfig, CheckpointNs, CheckpointSource, ErrorKind, Saver,
        StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        for (t, ns, v, fork) in [
            ("t", "", 1, false),
            ("t", "", 2, false),
            ("t", "", 8, true),
            ("t", "sub:x", 6, false),
            ("bad", "", 4, false),
            ("neg", "", 5, false),
            // One damaged value beside an intact one.
            ("mixed", "", 5, false),
            ("mixed", "", 7, false),
        ] {
            let cp = checkpoint(&[("a", v, serde_json::json!(v))]);
            let nv: ChannelVersions = cp.channel_versions.clone();
            let mut at = CheckpointConfig::latest(t).with_ns(ns);
            if fork {
                // A fork of the thread's first checkpoint, so the latest is not the greatest.
                let all = saver
                    .list(&antler_checkpoint::ListQuery::thread(t))
                    .await
                    .unwrap();
                at.checkpoint_id = all.last().map(|c| c.checkpoint.id);
            } else {
                at.checkpoint_id = saver.get_tuple(&at).await.unwrap().map(|c| c.checkpoint.id);
            }
            saver
                .put(&at, cp, metadata(CheckpointSource::Loop, 0, None), &nv)
                .await
                .unwrap();
        }
        // The latest checkpoint of t at 3, below the fork's 8.
        let head = saver
            .get_tuple(&CheckpointConfig::latest("t"))
            .await
            .unwrap()
            .unwrap();
        let cp = checkpoint(&[("a", 3, serde_json::json!(3))]);
        let nv: ChannelVersions = cp.channel_versions.clone();
        saver
            .put(
                &CheckpointConfig::latest("t").with_checkpoint_id(head.checkpoint.id),
                cp,
                metadata(CheckpointSource::Loop, 1, None),
                &nv,
            )
            .await
            .unwrap();
        drop(saver);
        let url = database_url().unwrap();
        let (client, task) = connect(&url).await;
        let s = options.schema.clone();
        client
            .batch_execute(&format!(
                "DROP TABLE \"{s}\".version_marks; DROP TABLE \"{s}\".run_threads; DELETE FROM \"{s}\".antler_migrations WHERE v >= 3;
                 UPDATE \"{s}\".checkpoints SET record = '\\x00' WHERE thread_id = 'bad';
                 UPDATE \"{s}\".blobs SET version = -5 WHERE thread_id = 'neg';
                 UPDATE \"{s}\".blobs SET version = -5 WHERE thread_id = 'mixed' AND version = 5;"
            ))
            .await
            .unwrap();
        let saver = antler_checkpoint::PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .unwrap();
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
        saver.delete_thread(&"neg".into()).await.unwrap();
        // Not hidden by an intact greater version beside it (before 2026-12-02 the mark was
        // that greater version).
        let err = max("mixed", "").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        saver.delete_thread(&"mixed".into()).await.unwrap();
        // The unknown mark stays unknown after a put with lower versions, and a copy carries it.
        saver
            .put(
                &CheckpointConfig::latest("bad"),
                checkpoint(&[("b", 1, serde_json::json!(1))]),
                metadata(CheckpointSource::Loop, 1, None),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        assert_eq!(max("bad", "").await.unwrap_err().kind(), ErrorKind::Corrupt);
        saver
            .copy_thread(&"bad".into(), &"copy".into())
            .await
            .unwrap();
        assert_eq!(
            max("copy", "").await.unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        for t in ["bad", "copy"] {
            saver.delete_thread(&t.into()).await.unwrap();
        }
        let marks: Vec<(String, String, i64)> = client
            .query(
                &format!("SELECT thread_id, checkpoint_ns, version FROM \"{s}\".version_marks ORDER BY 1, 2"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(
            marks,
            vec![("t".into(), "".into(), 8), ("t".into(), "sub:x".into(), 6)]
        );
        drop(client);
        task.abort();
        saver.drop_schema().await.unwrap();
    });
}

/// Two puts of one channel version with different bytes, the second started while the first
/// has not committed: the second sees no stored value in its snapshot, waits on the key, and
/// must then fail with `Conflict` and write nothing, not keep a checkpoint that reads the
/// first one's value.
#[test]
fn a_put_racing_another_of_the_same_version_fails_instead_of_sharing_its_value() {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{
        ChannelVersions, CheckpointConfig, CheckpointSource, ErrorKind, Saver, StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        let saver = std::sync::Arc::new(saver);
        let root = saver
            .put(
                &CheckpointConfig::latest("t"),
                checkpoint(&[("a", 1, serde_json::json!(1))]),
                metadata(CheckpointSource::Input, -1, None),
                &[("a".into(), 1.into())].into_iter().collect(),
            )
            .await
            .unwrap();
        // Another writer's uncommitted value for `title` at version 2.
        let (mut other, task) = connect(&options.url).await;
        let s = options.schema.clone();
        let tx = other.transaction().await.unwrap();
        tx.execute(
            &format!(
                "INSERT INTO \"{s}\".blobs (thread_id, checkpoint_ns, channel, version, data)
                 VALUES ('t', '', 'title', 2, '\\x32000000007b7d')"
            ),
            &[],
        )
        .await
        .unwrap();
        let cp = checkpoint(&[
            ("a", 1, serde_json::json!(1)),
            ("title", 2, serde_json::json!("mine")),
        ]);
        let nv: ChannelVersions = [("title".into(), 2.into())].into_iter().collect();
        let racing = {
            let saver = saver.clone();
            let root = root.clone();
            tokio::spawn(async move {
                saver
                    .put(&root, cp, metadata(CheckpointSource::Loop, 0, None), &nv)
                    .await
            })
        };
        // Wait until the put is blocked on the other writer's key, then commit that writer.
        let (watch, watch_task) = connect(&options.url).await;
        let blocked = until_a_session_waits_on_a_lock(&watch).await;
        // Otherwise the put would meet the committed value in its snapshot check instead.
        assert!(blocked, "the put waits on the other writer's key");
        tx.commit().await.unwrap();
        let err = racing.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        let latest = saver
            .get_tuple(&CheckpointConfig::latest("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.config, root, "the refused put stored no checkpoint");
        drop((other, watch));
        task.abort();
        watch_task.abort();
        let saver = std::sync::Arc::try_unwrap(saver).expect("the racing put is done");
        saver.drop_schema().await.unwrap();
    });
}

/// A checkpoint deleted (with its values) by another process between the read of its row and
/// the read of its values is not returned without them: the addressed read finds it gone.
/// The other process holds a lock on `blobs` so the read stops between its two statements.
#[test]
fn a_checkpoint_deleted_while_it_is_read_is_not_returned_without_its_values() {
    use antler_checkpoint::testing::checkpoint;
    for read in [Read::Tuple, Read::Ancestry, Read::LatestAncestry] {
        antler_checkpoint::testing::block_on(read_stopped_at_a_lock_while_the_thread_goes(
            checkpoint(&[("title", 1, serde_json::json!("kept"))]),
            "blobs",
            read,
            Meanwhile::Deleted,
            2,
        ));
    }
}

/// A copy racing a put to the target that stores other bytes under a version the source uses:
/// the copy's collision check sees no such value in its snapshot, its insert waits on the key,
/// and must then fail with `Conflict` and copy nothing instead of overwriting the target's value.
#[test]
fn a_copy_racing_a_put_to_its_target_does_not_overwrite_the_target_value() {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{
        ChannelVersions, CheckpointConfig, CheckpointSource, ErrorKind, ListQuery, Saver,
        StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        let saver = std::sync::Arc::new(saver);
        let cp = checkpoint(&[("title", 1, serde_json::json!("theirs"))]);
        let nv: ChannelVersions = cp.channel_versions.clone();
        saver
            .put(
                &CheckpointConfig::latest("src"),
                cp,
                metadata(CheckpointSource::Input, -1, None),
                &nv,
            )
            .await
            .unwrap();
        let (mut other, task) = connect(&options.url).await;
        let s = options.schema.clone();
        let tx = other.transaction().await.unwrap();
        tx.execute(
            &format!(
                "INSERT INTO \"{s}\".blobs (thread_id, checkpoint_ns, channel, version, data)
                 VALUES ('dst', '', 'title', 1, '\\x32000000007b7d')"
            ),
            &[],
        )
        .await
        .unwrap();
        let copying = {
            let saver = saver.clone();
            tokio::spawn(async move { saver.copy_thread(&"src".into(), &"dst".into()).await })
        };
        let (watch, watch_task) = connect(&options.url).await;
        let blocked = until_a_session_waits_on_a_lock(&watch).await;
        assert!(blocked, "the copy waits on the target's key");
        tx.commit().await.unwrap();
        let err = copying.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert!(
            saver
                .list(&ListQuery::thread("dst"))
                .await
                .unwrap()
                .is_empty()
        );
        let kept: Vec<u8> = watch
            .query_one(
                &format!(
                    "SELECT data FROM \"{s}\".blobs WHERE thread_id = 'dst' AND channel = 'title'"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(kept, b"\x32\x00\x00\x00\x00{}".to_vec());
        drop((other, watch));
        task.abort();
        watch_task.abort();
        let saver = std::sync::Arc::try_unwrap(saver).expect("the copy is done");
        saver.drop_schema().await.unwrap();
    });
}

/// A checkpoint whose `messages` value is a snapshot of two messages.
fn two_message_checkpoint() -> antler_checkpoint::Checkpoint {
    use antler_checkpoint::{Blob, Checkpoint, MessagesKind};
    let list = [
        serde_json::json!({"type": "human", "content": "q", "id": "h"}),
        serde_json::json!({"type": "ai", "content": "a", "id": "a"}),
    ];
    let mut cp = Checkpoint::empty();
    cp.channel_versions.insert("messages".into(), 1.into());
    cp.channel_values.insert(
        "messages".into(),
        Blob::messages(MessagesKind::Snapshot, &list).unwrap(),
    );
    cp
}

/// A thread deleted between the read of a checkpoint's values and the read of their message
/// bodies (the third statement of a read) is read again and found gone, instead of failing
/// on bodies that were collected meanwhile. A lock on `messages` stops the read there.
#[test]
fn a_checkpoint_whose_bodies_go_while_it_is_read_is_read_again() {
    for read in Read::WITH_BODIES {
        antler_checkpoint::testing::block_on(read_stopped_at_a_lock_while_the_thread_goes(
            two_message_checkpoint(),
            "messages",
            read,
            Meanwhile::Deleted,
            2,
        ));
    }
}

/// Body numbers come back after a delete: when the thread is deleted while a checkpoint is
/// read and other messages are stored under its bodies' numbers before the read fetches them
/// (each with a valid checksum), the read must not return them as the checkpoint's messages.
/// The bodies come with the thread's epoch, bumped by the delete, and a read that sees it
/// moved finds the checkpoint gone. Before, every read here but `list` returned the
/// checkpoint with the other messages.
#[test]
fn bodies_stored_under_reused_numbers_are_not_read_as_a_deleted_checkpoint_s() {
    for read in Read::WITH_BODIES {
        antler_checkpoint::testing::block_on(read_stopped_at_a_lock_while_the_thread_goes(
            two_message_checkpoint(),
            "messages",
            read,
            Meanwhile::Renumbered,
            2,
        ));
    }
}

/// The same, on a pool of one connection: a read that finds the epoch moved checks on the
/// connection it holds whether its checkpoint still exists. Before, `get_tuple` asked the
/// pool for a second connection while it held the only one, and waited for ever.
#[test]
fn a_read_on_a_pool_of_one_that_sees_the_epoch_move_does_not_wait_for_itself() {
    for read in Read::WITH_BODIES {
        antler_checkpoint::testing::block_on(read_stopped_at_a_lock_while_the_thread_goes(
            two_message_checkpoint(),
            "messages",
            read,
            Meanwhile::Renumbered,
            1,
        ));
    }
}

/// What another session does to the thread while [`read_stopped_at_a_lock_while_the_thread_goes`]
/// holds the read.
#[derive(Clone, Copy, Debug)]
enum Meanwhile {
    /// Deletes its checkpoints, values and bodies.
    Deleted,
    /// Deletes them as `delete_thread` does (bumping the thread's epoch), then stores other
    /// valid bodies under the deleted bodies' numbers: each number gets the bytes of another.
    Renumbered,
}

/// Which read [`read_stopped_at_a_lock_while_the_thread_goes`] makes.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// `get_tuple` of the checkpoint: `None` once it is gone.
    Tuple,
    /// `list` of the thread with values: the checkpoint left out once it is gone (before,
    /// a missing body failed the list as corrupt, and a missing value read as none).
    List,
    /// `get_channel_values` of the checkpoint's keys: `None` once it is gone (before, a
    /// missing body was reported as corrupt).
    ChannelValues,
    /// `get_tuple_with_ancestry` of the checkpoint: `None` once it is gone.
    Ancestry,
    /// `get_tuple_with_ancestry` of the latest checkpoint: read again, and `None` once the
    /// thread has none.
    LatestAncestry,
    /// `delta_channel_history` of a child of the checkpoint (put for this read), which seeds
    /// from the checkpoint's value: an unknown-checkpoint error once the child is gone.
    DeltaHistory,
}

impl Read {
    /// Every read that fetches message bodies.
    const WITH_BODIES: [Self; 6] = [
        Self::Tuple,
        Self::List,
        Self::ChannelValues,
        Self::Ancestry,
        Self::LatestAncestry,
        Self::DeltaHistory,
    ];
}

/// Puts `cp` on thread `t`, starts a `read` of it, lets the read stop on a lock on `table`
/// held by another session, deletes the thread's checkpoints, values and bodies in that
/// session, and checks that the read then finds the checkpoint gone. The saver has a pool
/// of `pool` connections; the read must end within a minute.
async fn read_stopped_at_a_lock_while_the_thread_goes(
    cp: antler_checkpoint::Checkpoint,
    table: &str,
    read: Read,
    meanwhile: Meanwhile,
    pool: usize,
) {
    use antler_checkpoint::testing::metadata;
    use antler_checkpoint::{
        ChannelVersions, CheckpointConfig, CheckpointSource, Saver, StoreConfig,
    };
    let Some((saver, options)) = fresh_with_pool(StoreConfig::full(), pool).await else {
        return;
    };
    let saver = std::sync::Arc::new(saver);
    let nv: ChannelVersions = cp.channel_versions.clone();
    let keys: Vec<_> = nv.iter().map(|(c, v)| (c.clone(), *v)).collect();
    let mut child = cp.clone();
    child.channel_values.clear();
    let at = saver
        .put(
            &CheckpointConfig::latest("t"),
            cp,
            metadata(CheckpointSource::Input, -1, None),
            &nv,
        )
        .await
        .unwrap();
    // The delta walk starts below the checkpoint it is asked about.
    let walked = if matches!(read, Read::DeltaHistory) {
        child.id = antler_checkpoint::CheckpointId::generate();
        saver
            .put(
                &at,
                child,
                metadata(CheckpointSource::Loop, 0, None),
                &ChannelVersions::new(),
            )
            .await
            .unwrap()
    } else {
        at.clone()
    };
    // Whether the read found the checkpoint; an error for an error.
    let found = move |saver: std::sync::Arc<antler_checkpoint::PostgresSaver>,
                      at: CheckpointConfig| {
        let (keys, walked) = (keys.clone(), walked.clone());
        async move {
            Ok::<bool, antler_checkpoint::Error>(match read {
                Read::Tuple => saver.get_tuple(&at).await?.is_some(),
                Read::List => !saver
                    .list(&antler_checkpoint::ListQuery::thread("t"))
                    .await?
                    .is_empty(),
                Read::ChannelValues => saver.get_channel_values(&at, &keys).await?.is_some(),
                Read::Ancestry => saver.get_tuple_with_ancestry(&at, 8).await?.is_some(),
                Read::LatestAncestry => saver
                    .get_tuple_with_ancestry(&CheckpointConfig::latest("t"), 8)
                    .await?
                    .is_some(),
                Read::DeltaHistory => match saver
                    .delta_channel_history(&walked, &["messages".into()])
                    .await
                {
                    Ok(h) => h.get("messages").is_some_and(|h| h.seed.is_some()),
                    Err(antler_checkpoint::Error::UnknownCheckpoint { .. }) => false,
                    Err(e) => return Err(e),
                },
            })
        }
    };
    // Warm the pool's connections, so the read below prepares nothing (a prepare would wait
    // on the lock before the first statement).
    for _ in 0..4 {
        assert!(found(saver.clone(), at.clone()).await.unwrap());
    }
    let (mut other, task) = connect(&options.url).await;
    let s = options.schema.clone();
    let tx = other.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE \"{s}\".{table} IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    let reading = tokio::spawn(found(saver.clone(), at.clone()));
    let (watch, watch_task) = connect(&options.url).await;
    assert!(
        until_a_session_waits_on_a_lock(&watch).await,
        "the read waits on the lock"
    );
    let renumber = match meanwhile {
        Meanwhile::Deleted => String::new(),
        // Number n takes the bytes stored under the next number (the last the first's).
        Meanwhile::Renumbered => format!(
            "INSERT INTO \"{s}\".messages (thread_id, seq, body)
               SELECT 't', seq, COALESCE(lead(body) OVER w, first_value(body) OVER w)
                 FROM kept WINDOW w AS (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING);
             INSERT INTO \"{s}\".thread_epochs (thread_id, epoch) VALUES ('t', 1)
               ON CONFLICT (thread_id) DO UPDATE SET epoch = \"{s}\".thread_epochs.epoch + 1;"
        ),
    };
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE kept ON COMMIT DROP AS
           SELECT seq, body FROM \"{s}\".messages WHERE thread_id = 't';
         DELETE FROM \"{s}\".checkpoints WHERE thread_id = 't';
         DELETE FROM \"{s}\".blobs WHERE thread_id = 't';
         DELETE FROM \"{s}\".messages WHERE thread_id = 't';
         {renumber}"
    ))
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(60), reading)
        .await
        .unwrap_or_else(|_| panic!("{read:?} on a pool of {pool} did not end within a minute"))
        .unwrap();
    assert!(matches!(got, Ok(false)), "{read:?}: {got:?}");
    drop((other, watch));
    task.abort();
    watch_task.abort();
    let saver = std::sync::Arc::try_unwrap(saver).expect("the read is done");
    saver.drop_schema().await.unwrap();
}

/// A role that may use an existing store but create nothing (no CREATE on the database or
/// the schema, as PostgreSQL 15 gives a new role by default) opens it, reads and writes:
/// opening creates the schema and the version table only when they are missing (before,
/// every open ran `CREATE … IF NOT EXISTS`, which PostgreSQL refuses such a role).
#[test]
fn a_role_without_create_privileges_opens_an_existing_store() {
    antler_checkpoint::testing::block_on(async {
        let Some(limited) = LimitedRole::new("LOGIN").await else {
            return;
        };
        let (options, role) = (limited.options.clone(), limited.role.clone());
        let url = url_as(&options, &role);
        let opened = PostgresSaver::connect(
            PostgresOptions::new(url).with_schema(options.schema.clone()),
            StoreConfig::full(),
        )
        .await;
        // Used, then dropped (its connections closed) before the role goes.
        let used = match opened {
            Ok(limited) => Ok(put_then_read(&limited).await),
            Err(e) => Err(e),
        };
        limited.drop().await;
        let used = used.expect("the limited role opens the store");
        assert!(used.expect("the limited role reads and writes"));
    });
}

/// A role that may create in a schema made for it, but not in the database (PostgreSQL 15
/// gives a new role no CREATE on the database), makes a new store there: opening checks that
/// the schema exists before it would create it (before, it ran `CREATE SCHEMA IF NOT EXISTS`
/// whenever the store's tables were missing, which PostgreSQL refuses such a role even for a
/// schema that exists).
#[test]
fn a_role_with_create_on_its_schema_only_makes_a_new_store_there() {
    antler_checkpoint::testing::block_on(async {
        let Some(url) = database_url() else {
            return;
        };
        let (admin, task) = connect(&url).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (role, schema) = (format!("antler_user_{id}"), format!("antler_test_{id}"));
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN;
                 CREATE SCHEMA \"{schema}\";
                 GRANT USAGE, CREATE ON SCHEMA \"{schema}\" TO {role};"
            ))
            .await
            .unwrap();
        let options = PostgresOptions::new(url).with_schema(schema.clone());
        let opened = PostgresSaver::connect(
            PostgresOptions::new(url_as(&options, &role)).with_schema(schema.clone()),
            StoreConfig::full(),
        )
        .await;
        let used = match opened {
            Ok(saver) => Ok(put_then_read(&saver).await),
            Err(e) => Err(e),
        };
        admin
            .batch_execute(&format!(
                "DROP OWNED BY {role}; DROP ROLE {role}; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE;"
            ))
            .await
            .unwrap();
        drop(admin);
        let _ = task.await;
        let used = used.expect("the role makes the store in its schema");
        assert!(used.expect("and reads and writes it"));
    });
}

/// Puts a checkpoint on thread `t` and reads it back: whether it was found.
async fn put_then_read(saver: &PostgresSaver) -> antler_checkpoint::Result<bool> {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{CheckpointConfig, CheckpointSource, Saver};
    let stored = saver
        .put(
            &CheckpointConfig::latest("t"),
            checkpoint(&[("a", 1, serde_json::json!(1))]),
            metadata(CheckpointSource::Loop, 0, None),
            &[("a".into(), 1.into())].into(),
        )
        .await?;
    Ok(saver.get_tuple(&stored).await?.is_some())
}

/// A fresh store and a new role with the given attributes that may read and write the
/// store's tables but create nothing (PostgreSQL 15 gives a new role no CREATE), with the
/// administrator's session that made them.
struct LimitedRole {
    options: PostgresOptions,
    role: String,
    admin: tokio_postgres::Client,
    task: tokio::task::JoinHandle<()>,
}

impl LimitedRole {
    /// `None`: skipped (see `database_url`).
    async fn new(attributes: &str) -> Option<Self> {
        let (saver, options) = fresh(StoreConfig::full()).await?;
        drop(saver);
        let (admin, task) = connect(&options.url).await;
        let role = format!("antler_user_{}", uuid::Uuid::new_v4().simple());
        let schema = format!("\"{}\"", options.schema);
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} {attributes};
                 GRANT USAGE ON SCHEMA {schema} TO {role};
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};"
            ))
            .await
            .unwrap();
        Some(Self {
            options,
            role,
            admin,
            task,
        })
    }

    /// Drops the role and the store (the role's connections must be closed).
    async fn drop(self) {
        let (role, schema) = (&self.role, format!("\"{}\"", self.options.schema));
        self.admin
            .batch_execute(&format!(
                "DROP OWNED BY {role}; DROP ROLE {role}; DROP SCHEMA {schema} CASCADE;"
            ))
            .await
            .unwrap();
        drop(self.admin);
        let _ = self.task.await;
    }
}

/// The test server's address with `role` as the user (no password: the test server trusts
/// loopback connections, as `.ci/run` sets it up).
fn url_as(options: &PostgresOptions, role: &str) -> String {
    let cfg: tokio_postgres::Config = options.url.parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    format!(
        "host={host} port={} dbname={} user={role}",
        cfg.get_ports().first().copied().unwrap_or(5432),
        cfg.get_dbname().unwrap_or("postgres"),
    )
}

/// A role the server gives one connection opens a store with a larger pool: the second
/// connection `connect` opens (which only speeds up long reads) fails, `connect` does not,
/// and a read of more bodies than a read splits takes them all on the one connection.
#[test]
fn a_role_limited_to_one_connection_opens_the_store_and_reads_long_threads() {
    use antler_checkpoint::{
        Blob, Checkpoint, CheckpointConfig, CheckpointSource, MessagesKind, Saver,
    };
    antler_checkpoint::testing::block_on(async {
        let Some(limited) = LimitedRole::new("LOGIN CONNECTION LIMIT 1").await else {
            return;
        };
        let (options, role) = (limited.options.clone(), limited.role.clone());
        let list: Vec<serde_json::Value> = (0..1500)
            .map(|i| serde_json::json!({"type": "human", "content": format!("m {i}"), "id": format!("m{i}")}))
            .collect();
        let opened = PostgresSaver::connect(
            PostgresOptions::new(url_as(&options, &role))
                .with_schema(options.schema.clone())
                .with_pool_size(4),
            StoreConfig::full(),
        )
        .await;
        // Used, then dropped (its connection closed) before the role goes.
        let read = match opened {
            Ok(limited) => {
                let mut cp = Checkpoint::empty();
                cp.channel_versions.insert("messages".into(), 1.into());
                cp.channel_values.insert(
                    "messages".into(),
                    Blob::messages(MessagesKind::Snapshot, &list).unwrap(),
                );
                let nv = cp.channel_versions.clone();
                let stored = limited
                    .put(
                        &CheckpointConfig::latest("t"),
                        cp,
                        antler_checkpoint::testing::metadata(CheckpointSource::Loop, 0, None),
                        &nv,
                    )
                    .await;
                Ok(match stored {
                    Ok(c) => limited.get_tuple(&c).await,
                    Err(e) => Err(e),
                })
            }
            Err(e) => Err(e),
        };
        limited.drop().await;
        let read = read
            .expect("a role with one connection opens the store")
            .expect("and reads")
            .expect("the checkpoint");
        match &read.checkpoint.channel_values["messages"] {
            Blob::Messages(m) => {
                let got: Vec<serde_json::Value> = m
                    .items
                    .iter()
                    .map(|b| serde_json::from_slice(b).unwrap())
                    .collect();
                assert_eq!(got, list);
            }
            other => panic!("not a message list: {other:?}"),
        }
    });
}

/// A store written by schema version 3 (no run index) gets its index from the records'
/// metadata when it is migrated: `delete_for_runs` finds every thread of a run written before
/// the migration, and a later put and `copy_thread` keep the index up to date.
#[test]
fn a_version_3_store_gets_its_run_index_from_its_records() {
    use antler_checkpoint::{RunId, Saver};
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        crate::put_for_run(&saver, "t1", "r1", 1).await;
        crate::put_for_run(&saver, "t1", "r2", 2).await;
        crate::put_for_run(&saver, "t2", "r1", 1).await;
        drop(saver);
        let url = database_url().unwrap();
        let (client, task) = connect(&url).await;
        let s = options.schema.clone();
        client
            .batch_execute(&format!(
                "DROP TABLE \"{s}\".run_threads; DELETE FROM \"{s}\".antler_migrations WHERE v >= 4;"
            ))
            .await
            .unwrap();
        drop(client);
        let _ = task.await;
        let saver = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .unwrap();
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
        saver.drop_schema().await.unwrap();
    });
}

/// A schema that already holds a `checkpoints` table antler did not create (another system's,
/// in a shared schema) is not adopted: opening fails at the migration, naming the schema and
/// telling to give antler one of its own, and the foreign table is left as it was. Before,
/// `CREATE TABLE IF NOT EXISTS` adopted it and a later migration failed on a missing column,
/// after locking the table against its own writers.
#[test]
fn a_foreign_checkpoints_table_is_not_adopted() {
    use antler_checkpoint::{ErrorKind, PostgresOptions, PostgresSaver, StoreConfig};
    antler_checkpoint::testing::block_on(async {
        let Some(url) = database_url() else {
            return;
        };
        let schema = format!("antler_test_{}", uuid::Uuid::new_v4().simple());
        let (client, task) = connect(&url).await;
        client
            .batch_execute(&format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.checkpoints (thread_id TEXT, checkpoint JSONB);
                 INSERT INTO {schema}.checkpoints VALUES ('theirs', '{{}}');"
            ))
            .await
            .unwrap();
        let options = PostgresOptions::new(url).with_schema(schema.clone());
        let Err(err) = PostgresSaver::connect(options, StoreConfig::full()).await else {
            panic!("opened over a foreign table");
        };
        assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
        assert!(err.to_string().contains("schema of its own"), "{err}");
        let theirs: i64 = client
            .query_one(&format!("SELECT COUNT(*) FROM {schema}.checkpoints"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(theirs, 1);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
        drop(client);
        task.abort();
    });
}

/// A column whose type is not the one the schema gives it (a table altered by hand) is a typed
/// `DamagedColumn` error naming the column, where reading it used to panic.
#[test]
fn a_column_of_another_type_is_a_typed_error_not_a_panic() {
    use antler_checkpoint::{
        Blob, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, ErrorKind, Saver,
        StoreConfig, TaskId, TaskPath,
    };
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh(StoreConfig::full()).await else {
            return;
        };
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("a".into(), 1.into());
        cp.channel_values
            .insert("a".into(), Blob::json(&serde_json::json!(1)).unwrap());
        let versions: ChannelVersions = cp.channel_versions.clone();
        let at = saver
            .put(
                &CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .unwrap();
        saver
            .put_writes(
                &at,
                vec![("a".into(), Blob::json(&serde_json::json!(2)).unwrap())],
                &TaskId::new("task"),
                &TaskPath::new("~0"),
            )
            .await
            .unwrap();
        let (client, task) = connect(&options.url).await;
        client
            .batch_execute(&format!(
                "ALTER TABLE \"{}\".writes ALTER COLUMN task_path TYPE bytea USING convert_to(task_path, 'UTF8')",
                options.schema
            ))
            .await
            .unwrap();
        let reopened = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .unwrap();
        // `list` reads writes with a plain statement (`get_tuple`'s union of checkpoint and
        // write rows fails in the server on the mixed types, a `Backend` error).
        let err = reopened
            .list(&antler_checkpoint::ListQuery::thread("t"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("task_path"), "{err}");
        drop(client);
        task.abort();
        saver.drop_schema().await.unwrap();
    });
}

/// `get_channel_values` of the latest checkpoint, which another process deletes between the
/// lookup of its id and the read of its values, reads the new latest checkpoint, as `get_tuple`
/// does; before 2026-12-02 it answered `None`, which says the namespace has no checkpoint.
#[test]
fn the_latest_channel_values_deleted_while_read_are_read_again() {
    use antler_checkpoint::testing::{checkpoint, metadata};
    use antler_checkpoint::{
        Blob, ChannelVersions, CheckpointConfig, CheckpointSource, Saver, StoreConfig,
    };
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) = fresh_with_pool(StoreConfig::full(), 2).await else {
            return;
        };
        let saver = std::sync::Arc::new(saver);
        let mut parent = CheckpointConfig::latest("t");
        for (v, title) in [(1, "older"), (2, "newer")] {
            let cp = checkpoint(&[("title", v, serde_json::json!(title))]);
            let nv: ChannelVersions = cp.channel_versions.clone();
            parent = saver
                .put(
                    &parent,
                    cp,
                    metadata(CheckpointSource::Loop, v as i64, None),
                    &nv,
                )
                .await
                .unwrap();
        }
        let keys = vec![("title".into(), 1.into()), ("title".into(), 2.into())];
        let read = {
            let (saver, keys) = (saver.clone(), keys.clone());
            move || {
                let (saver, keys) = (saver.clone(), keys.clone());
                async move {
                    saver
                        .get_channel_values(&CheckpointConfig::latest("t"), &keys)
                        .await
                }
            }
        };
        // Warm the pool's connections, so the read below prepares nothing.
        for _ in 0..4 {
            assert_eq!(read().await.unwrap().map(|v| v.len()), Some(2));
        }
        let (mut other, task) = connect(&options.url).await;
        let s = options.schema.clone();
        let tx = other.transaction().await.unwrap();
        tx.batch_execute(&format!(
            "LOCK TABLE \"{s}\".blobs IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
        let reading = tokio::spawn(read());
        let (watch, watch_task) = connect(&options.url).await;
        assert!(
            until_a_session_waits_on_a_lock(&watch).await,
            "the read waits on the lock"
        );
        // The newest checkpoint goes; its value stays (no collection), as after a prune.
        tx.batch_execute(&format!(
            "DELETE FROM \"{s}\".checkpoints WHERE thread_id = 't' AND checkpoint_id =
               (SELECT checkpoint_id FROM \"{s}\".checkpoints WHERE thread_id = 't'
                 ORDER BY checkpoint_id DESC LIMIT 1)"
        ))
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(60), reading)
            .await
            .expect("the read ends")
            .unwrap()
            .unwrap()
            .expect("the older checkpoint is the latest now");
        assert_eq!(
            got.get(&("title".into(), 1.into())),
            Some(&Blob::json(&serde_json::json!("older")).unwrap())
        );
        drop((other, watch, read));
        task.abort();
        watch_task.abort();
        let saver = std::sync::Arc::try_unwrap(saver).expect("the read is done");
        saver.drop_schema().await.unwrap();
    });
}
