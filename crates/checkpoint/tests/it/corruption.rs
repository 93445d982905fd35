//! Corrupt, truncated and unknown-version stored bytes, deleted parents and message bodies:
//! every read is a typed error naming thread and checkpoint — never an empty state.

use antler_checkpoint::delta::{DeltaMessages, DeltaWrite, materialize};
use antler_checkpoint::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, ErrorKind, PruneStrategy,
    Saver, SnapshotFrequency, SqliteSaver, StoreConfig, TaskId, TaskPath,
};
use antler_state_reducers::Message;
use rusqlite::params;

const F: u32 = 3;

/// Every payload column of the store, `(table, column)`: the self-checking ones.
const PAYLOAD_COLUMNS: [(&str, &str); 5] = [
    ("checkpoints", "record"),
    ("checkpoints", "metadata"),
    ("blobs", "data"),
    ("writes", "value"),
    ("messages", "body"),
];

/// A delta thread of `turns` turns (input + loop checkpoint each, writes on the input one).
async fn thread(
    saver: &dyn Saver,
    name: &str,
    turns: usize,
) -> (Vec<CheckpointConfig>, Vec<Message>) {
    let freq = SnapshotFrequency::new(F).unwrap();
    let mut channel = DeltaMessages::new(freq);
    let mut head = CheckpointConfig::latest(name);
    let mut all = Vec::new();
    let mut version = 0u64;
    for t in 0..turns {
        let mut cp = Checkpoint::empty();
        let mut nv = ChannelVersions::new();
        if channel.on_checkpoint(false).is_snapshot() {
            version += 1;
            cp.channel_values
                .insert("messages".into(), channel.snapshot_blob().unwrap());
            nv.insert("messages".into(), version.into());
        }
        if version > 0 {
            cp.channel_versions
                .insert("messages".into(), version.into());
        }
        let input = saver
            .put(&head, cp, CheckpointMetadata::default(), &nv)
            .await
            .unwrap();
        all.push(input.clone());
        let msgs = vec![
            Message::human(format!("q{t}")).with_id(format!("{t}h")),
            Message::ai(format!("a{t}")).with_id(format!("{t}a")),
        ];
        let w = DeltaWrite::from(msgs);
        saver
            .put_writes(
                &input,
                vec![("messages".into(), w.to_blob().unwrap())],
                &TaskId::new(format!("task{t}")),
                &TaskPath::default(),
            )
            .await
            .unwrap();
        channel.update(vec![w]).unwrap();
        version += 1;
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), version.into());
        let mut nv: ChannelVersions = [("messages".into(), version.into())].into();
        if channel.on_checkpoint(true).is_snapshot() {
            cp.channel_values
                .insert("messages".into(), channel.snapshot_blob().unwrap());
        } else {
            nv.clear();
        }
        head = saver
            .put(&input, cp, CheckpointMetadata::default(), &nv)
            .await
            .unwrap();
        all.push(head.clone());
    }
    (all, channel.into_value())
}

async fn read(saver: &dyn Saver, at: &CheckpointConfig) -> antler_checkpoint::Result<Vec<Message>> {
    let tuple = saver
        .get_tuple(at)
        .await?
        .ok_or_else(|| antler_checkpoint::Error::InvalidArgument("gone".into()))?;
    Ok(materialize(
        saver,
        &tuple,
        "messages",
        SnapshotFrequency::new(F).unwrap(),
    )
    .await?
    .channel
    .into_value())
}

struct Fixture {
    path: std::path::PathBuf,
    configs: Vec<CheckpointConfig>,
    /// What each checkpoint of `configs` reads as before any damage.
    values: Vec<Vec<Message>>,
}

/// What every checkpoint of `configs` reads as (before any damage).
async fn values_of(saver: &dyn Saver, configs: &[CheckpointConfig]) -> Vec<Vec<Message>> {
    let mut values = Vec::with_capacity(configs.len());
    for c in configs {
        values.push(read(saver, c).await.unwrap());
    }
    values
}

async fn fixture() -> (SqliteSaver, Fixture) {
    let path = crate::temp_db("corrupt", "store.db");
    let saver = SqliteSaver::open(
        &path,
        StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
    )
    .await
    .unwrap();
    let (configs, value) = thread(&saver, "t-corrupt", 4).await;
    let values = values_of(&saver, &configs).await;
    assert_eq!(values.last(), Some(&value));
    (
        saver,
        Fixture {
            path,
            configs,
            values,
        },
    )
}

/// Applies `edit` to a fresh copy of the fixture, reopens the store cold and reads every
/// checkpoint: each read that succeeds returns what it did before the damage (never an empty
/// or shorter list), and each that fails names the thread and one of its checkpoints. Returns
/// the errors.
async fn damaged_reads(edit: impl Fn(&rusqlite::Connection)) -> Vec<antler_checkpoint::Error> {
    let (saver, fx) = fixture().await;
    drop(saver);
    edit(&rusqlite::Connection::open(&fx.path).unwrap());
    let saver = SqliteSaver::open(
        &fx.path,
        StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
    )
    .await
    .unwrap();
    let mut errors = Vec::new();
    for (c, undamaged) in fx.configs.iter().zip(&fx.values) {
        match read(&saver, c).await {
            Ok(v) => assert_eq!(&v, undamaged, "{c:?} read differently after the damage"),
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("t-corrupt"),
                    "error does not name the thread: {text}"
                );
                assert!(
                    fx.configs
                        .iter()
                        .filter_map(|c| c.checkpoint_id)
                        .any(|id| text.contains(&id.to_string())),
                    "error does not name a checkpoint of the thread: {text}"
                );
                errors.push(e);
            }
        }
    }
    errors
}

/// [`damaged_reads`], and at least one read fails, each with kind `Corrupt` or `NotFound`.
async fn assert_damage_detected(edit: impl Fn(&rusqlite::Connection)) {
    let errors = damaged_reads(edit).await;
    for e in &errors {
        assert!(
            matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::NotFound),
            "unexpected kind {:?}: {e}",
            e.kind()
        );
    }
    assert!(!errors.is_empty(), "the damage went unnoticed");
}

fn edit_blob_column(conn: &rusqlite::Connection, table: &str, col: &str, f: &dyn Fn(&mut Vec<u8>)) {
    let key_cols = "rowid";
    let _ = key_cols;
    let rows: Vec<Vec<u8>> = conn
        .prepare(&format!("SELECT {col} FROM {table}"))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for old in rows {
        let mut new = old.clone();
        f(&mut new);
        conn.execute(
            &format!("UPDATE {table} SET {col} = ?1 WHERE {col} = ?2"),
            params![new, old],
        )
        .unwrap();
    }
}

#[test]
fn flipped_bytes_in_every_table_are_detected() {
    antler_checkpoint::testing::block_on(async {
        for (table, col) in PAYLOAD_COLUMNS {
            for position in [0usize, 2, 5, 7, usize::MAX] {
                assert_damage_detected(|c| {
                    edit_blob_column(c, table, col, &|b: &mut Vec<u8>| {
                        let i = position.min(b.len() - 1);
                        b[i] ^= 0x20;
                    })
                })
                .await;
            }
        }
    });
}

#[test]
fn truncated_rows_are_detected() {
    antler_checkpoint::testing::block_on(async {
        for (table, col) in PAYLOAD_COLUMNS {
            for keep in [0usize, 3, 6] {
                assert_damage_detected(|c| {
                    edit_blob_column(c, table, col, &|b: &mut Vec<u8>| {
                        b.truncate(keep.min(b.len() - 1))
                    })
                })
                .await;
            }
        }
    });
}

#[test]
fn unknown_format_versions_are_typed() {
    antler_checkpoint::testing::block_on(async {
        let (saver, fx) = fixture().await;
        drop(saver);
        let conn = rusqlite::Connection::open(&fx.path).unwrap();
        edit_blob_column(&conn, "checkpoints", "record", &|b: &mut Vec<u8>| {
            b[0] = 0x7f
        });
        let saver = SqliteSaver::open(
            &fx.path,
            StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
        )
        .await
        .unwrap();
        let err = saver
            .get_tuple(fx.configs.last().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        let text = err.to_string();
        assert!(
            text.contains("unknown format version 127") && text.contains("t-corrupt"),
            "{text}"
        );
        assert!(
            text.contains(
                &fx.configs
                    .last()
                    .unwrap()
                    .checkpoint_id
                    .unwrap()
                    .to_string()
            ),
            "{text}"
        );
    });
}

/// A tag from a newer build in any payload column (checkpoint metadata, a channel value, a
/// pending write, a message body) is reported as such, not as damage of another kind nor as
/// an empty value: some read of the thread fails with `unknown format version`, every failing
/// read names the thread and a checkpoint, and every other read returns what it did before.
#[test]
fn unknown_format_versions_in_every_payload_column_are_typed() {
    antler_checkpoint::testing::block_on(async {
        for (table, col) in PAYLOAD_COLUMNS {
            let errors = damaged_reads(|c| {
                edit_blob_column(c, table, col, &|b: &mut Vec<u8>| b[0] = 0x7f);
            })
            .await;
            for e in &errors {
                assert_eq!(e.kind(), ErrorKind::Corrupt, "{table}.{col}: {e}");
            }
            assert!(
                errors
                    .iter()
                    .any(|e| e.to_string().contains("unknown format version 127")),
                "{table}.{col}: no read reported the unknown format version"
            );
        }
    });
}

#[test]
fn a_deleted_parent_is_a_missing_parent_error() {
    antler_checkpoint::testing::block_on(async {
        let (saver, fx) = fixture().await;
        let head = fx.configs.last().unwrap();
        let parent = fx.configs[fx.configs.len() - 2].checkpoint_id.unwrap();
        rusqlite::Connection::open(&fx.path)
            .unwrap()
            .execute(
                "DELETE FROM checkpoints WHERE checkpoint_id = ?1",
                params![parent.to_bytes()],
            )
            .unwrap();
        let err = read(&saver, head).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&parent.to_string())
                && text.contains(&head.checkpoint_id.unwrap().to_string()),
            "{text}"
        );
    });
}

/// The ancestor chain decodes every record it returns: one damaged ancestor fails the call
/// with an error naming it, instead of a chain cut short before it.
#[test]
fn a_damaged_ancestor_fails_the_chain_naming_it() {
    antler_checkpoint::testing::block_on(async {
        let (saver, fx) = fixture().await;
        drop(saver);
        let head = fx.configs.last().unwrap();
        let damaged = fx.configs[fx.configs.len() - 3].checkpoint_id.unwrap();
        let conn = rusqlite::Connection::open(&fx.path).unwrap();
        let record: Vec<u8> = conn
            .query_row(
                "SELECT record FROM checkpoints WHERE checkpoint_id = ?1",
                params![damaged.to_bytes()],
                |r| r.get(0),
            )
            .unwrap();
        let mut flipped = record.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x20;
        conn.execute(
            "UPDATE checkpoints SET record = ?1 WHERE checkpoint_id = ?2",
            params![flipped, damaged.to_bytes()],
        )
        .unwrap();
        let saver = SqliteSaver::open(
            &fx.path,
            StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
        )
        .await
        .unwrap();
        // The two nearer checkpoints read fine; the chain through the damaged one does not.
        let near = saver.get_ancestors_without_values(head, 2).await.unwrap();
        assert_eq!(near.len(), 2);
        let err = saver
            .get_ancestors_without_values(head, 10)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("t-corrupt")
                && text.contains(&damaged.to_string())
                && text.contains("checkpoint record"),
            "{text}"
        );
    });
}

#[test]
fn a_deleted_message_body_is_an_error_not_a_shorter_list() {
    antler_checkpoint::testing::block_on(async {
        assert_damage_detected(|c| {
            c.execute("DELETE FROM messages WHERE seq = 1", []).unwrap();
        })
        .await;
    });
}

#[test]
fn corruption_on_postgres_is_typed_too() {
    antler_checkpoint::testing::block_on(async {
        let Some((saver, options)) =
            crate::postgres::fresh(StoreConfig::delta(SnapshotFrequency::new(F).unwrap())).await
        else {
            return;
        };
        let (configs, _) = thread(&saver, "t-corrupt", 4).await;
        let (client, conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let s = &options.schema;
        client.execute(&format!("UPDATE {s}.checkpoints SET record = set_byte(record, 6, get_byte(record, 6) # 1)"), &[]).await.unwrap();
        let err = read(&saver, configs.last().unwrap()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("t-corrupt"));
        // The one-query ancestor chain checks every record too.
        let err = saver
            .get_ancestors_without_values(configs.last().unwrap(), 10)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("t-corrupt"), "{err}");
        client.execute(&format!("UPDATE {s}.checkpoints SET record = set_byte(record, 6, get_byte(record, 6) # 1)"), &[]).await.unwrap();
        client
            .execute(
                &format!("DELETE FROM {s}.checkpoints WHERE checkpoint_id = $1"),
                &[&configs[configs.len() - 2]
                    .checkpoint_id
                    .unwrap()
                    .to_bytes()
                    .as_slice()],
            )
            .await
            .unwrap();
        let err = read(&saver, configs.last().unwrap()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        drop(client);
        let _ = task.await;
        saver.drop_schema().await.unwrap();
    });
}

/// [`assert_damage_detected`] on PostgreSQL: writes the fixture thread into a fresh schema,
/// runs `edit` there (`{s}` stands for the schema), and reads every checkpoint through a
/// freshly connected saver, with `get_tuple` and the delta walk and with
/// `get_tuple_with_ancestry`. A read that succeeds returns the right head; one that fails is
/// a typed error naming the thread and one of its checkpoints; at least one fails.
async fn assert_damage_detected_on_postgres(edit: &str) {
    let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
    let Some((saver, options)) = crate::postgres::fresh(config).await else {
        return;
    };
    let (configs, value) = thread(&saver, "t-corrupt", 4).await;
    let values = values_of(&saver, &configs).await;
    assert_eq!(values.last(), Some(&value));
    let (client, conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    client
        .batch_execute(&edit.replace("{s}", &format!("\"{}\"", options.schema)))
        .await
        .unwrap();
    drop(saver);
    let saver = antler_checkpoint::PostgresSaver::connect(options.clone(), config)
        .await
        .unwrap();
    let ids: Vec<String> = configs
        .iter()
        .filter_map(|c| c.checkpoint_id.map(|id| id.to_string()))
        .collect();
    let mut errors = 0;
    for (c, undamaged) in configs.iter().zip(&values) {
        if matches!(saver.get_tuple_without_values(c).await, Ok(None)) {
            // The edit deleted this checkpoint itself.
            continue;
        }
        // The ancestry read returns no materialised list, only success or an error.
        let ancestry = saver.get_tuple_with_ancestry(c, 8).await.map(|_| None);
        for result in [read(&saver, c).await.map(Some), ancestry] {
            match result {
                Ok(v) => {
                    // A checkpoint the damage does not touch reads as before.
                    if let Some(v) = v {
                        assert_eq!(&v, undamaged, "{c:?} read differently after the damage");
                    }
                }
                Err(e) => {
                    errors += 1;
                    let text = e.to_string();
                    assert!(
                        matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::NotFound),
                        "unexpected kind {:?}: {text}",
                        e.kind()
                    );
                    assert!(text.contains("t-corrupt"), "no thread: {text}");
                    assert!(
                        ids.iter().any(|id| text.contains(id.as_str())),
                        "no checkpoint of the thread: {text}"
                    );
                }
            }
        }
    }
    assert!(errors > 0, "the damage went unnoticed: {edit}");
    drop(client);
    let _ = task.await;
    saver.drop_schema().await.unwrap();
}

/// The payload columns of every table, flipped at several places, on PostgreSQL.
#[test]
fn flipped_bytes_in_every_table_are_detected_on_postgres() {
    antler_checkpoint::testing::block_on(async {
        for (table, col) in PAYLOAD_COLUMNS {
            for position in ["0", "5", "length({col}) - 1"] {
                let at = format!(
                    "LEAST({}, length({col}) - 1)",
                    position.replace("{col}", col)
                );
                assert_damage_detected_on_postgres(&format!(
                    "UPDATE {{s}}.{table} SET {col} = set_byte({col}, {at}, get_byte({col}, {at}) # 32)"
                ))
                .await;
            }
        }
    });
}

/// The payload columns of every table, truncated, on PostgreSQL; and a record of an unknown
/// format version, a deleted parent, a deleted message body and damaged parent ids.
#[test]
fn truncated_rows_unknown_versions_and_deleted_rows_are_detected_on_postgres() {
    antler_checkpoint::testing::block_on(async {
        for (table, col) in PAYLOAD_COLUMNS {
            for keep in [0, 6] {
                assert_damage_detected_on_postgres(&format!(
                    "UPDATE {{s}}.{table} SET {col} = substring({col} from 1 for LEAST({keep}, length({col}) - 1))"
                ))
                .await;
            }
        }
        assert_damage_detected_on_postgres(
            "UPDATE {s}.checkpoints SET record = set_byte(record, 0, 127)",
        )
        .await;
        // The parent of the newest checkpoint, and the first message body.
        assert_damage_detected_on_postgres(
            "DELETE FROM {s}.checkpoints WHERE checkpoint_id = (
                SELECT parent_id FROM {s}.checkpoints ORDER BY checkpoint_id DESC LIMIT 1)",
        )
        .await;
        assert_damage_detected_on_postgres("DELETE FROM {s}.messages WHERE seq = 1").await;
        // A parent id of the wrong length: a damaged column naming the row's checkpoint.
        assert_damage_detected_on_postgres(
            "UPDATE {s}.checkpoints SET parent_id = '\\x00'::bytea WHERE parent_id IS NOT NULL",
        )
        .await;
    });
}

/// Another process (here: a second saver on the same file) deletes the thread while this
/// saver's message index still knows its bodies: the next snapshot must re-store the bodies
/// (after a conflict and a reload), never reference bodies that are gone.
#[test]
fn a_stale_message_index_never_leaves_dangling_references() {
    antler_checkpoint::testing::block_on(async {
        let (a, fx) = fixture().await;
        let value = fx.values.last().unwrap().clone();
        let b = SqliteSaver::open(
            &fx.path,
            StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
        )
        .await
        .unwrap();
        b.delete_thread(&"t-corrupt".into()).await.unwrap();
        // Saver `a` writes a snapshot of the same messages on a fresh chain.
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 1.into());
        cp.channel_values.insert(
            "messages".into(),
            antler_checkpoint::Blob::messages(antler_checkpoint::MessagesKind::Snapshot, &value)
                .unwrap(),
        );
        let nv = cp.channel_versions.clone();
        let c = a
            .put(
                &CheckpointConfig::latest("t-corrupt"),
                cp,
                CheckpointMetadata::default(),
                &nv,
            )
            .await
            .unwrap();
        assert_eq!(read(&b, &c).await.unwrap(), value);
        assert_eq!(read(&a, &c).await.unwrap(), value);
    });
}

/// Stores a root checkpoint of `thread` whose `messages` value at `version` is `blob`.
async fn put_snapshot(
    saver: &dyn Saver,
    thread: &str,
    version: u64,
    blob: antler_checkpoint::Blob,
) -> CheckpointConfig {
    let mut cp = Checkpoint::empty();
    cp.channel_versions
        .insert("messages".into(), version.into());
    cp.channel_values.insert("messages".into(), blob);
    let nv = cp.channel_versions.clone();
    saver
        .put(
            &CheckpointConfig::latest(thread),
            cp,
            CheckpointMetadata::default(),
            &nv,
        )
        .await
        .unwrap()
}

/// Stores a root checkpoint of `thread` whose `messages` value at `version` is the snapshot `list`.
async fn put_list(
    saver: &dyn Saver,
    thread: &str,
    version: u64,
    list: &[Message],
) -> CheckpointConfig {
    let blob =
        antler_checkpoint::Blob::messages(antler_checkpoint::MessagesKind::Snapshot, list).unwrap();
    put_snapshot(saver, thread, version, blob).await
}

/// A collected body's number is never trusted again: another process (a second saver on the
/// same file) prunes the thread, a third numbers new bodies from what is stored (reusing the
/// collected numbers), and this saver, whose index still maps a collected body to its old
/// number, must not end up pointing at the third saver's body (the prune bumped the thread's
/// epoch, so this saver's write fails its check and reloads).
#[test]
fn collected_body_numbers_are_never_reused() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("reuse", "store.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let m = |id: &str| Message::human(format!("text of {id}")).with_id(id);
        let a = SqliteSaver::open(&path, config).await.unwrap();
        put_list(&a, "t-reuse", 1, &[m("1"), m("2"), m("3")]).await;
        // The newest root references only "1": pruning leaves "2" and "3" unreferenced.
        put_list(&a, "t-reuse", 2, &[m("1")]).await;
        let b = SqliteSaver::open(&path, config).await.unwrap();
        b.prune(&["t-reuse".into()], PruneStrategy::KeepLatest)
            .await
            .unwrap();
        let c = SqliteSaver::open(&path, config).await.unwrap();
        put_list(&c, "t-reuse", 3, &[m("1"), m("x")]).await;
        let last = put_list(&a, "t-reuse", 4, &[m("1"), m("2")]).await;
        assert_eq!(read(&c, &last).await.unwrap(), vec![m("1"), m("2")]);
    });
}

/// A thread deleted and written again by another process numbers its new bodies from the
/// start; a saver that still holds its index of the deleted thread must not reuse those
/// numbers for its own messages (every number it names exists again, so without the epoch
/// check the list would silently name the other process's bytes). `open` opens another saver ("process") on
/// the same store.
async fn deleted_thread_numbers<S, O, OF>(open: O)
where
    S: Saver,
    O: Fn() -> OF,
    OF: std::future::Future<Output = S>,
{
    let m = |id: &str| Message::human(format!("text of {id}")).with_id(id);
    let x = |id: &str| Message::ai(format!("another process wrote {id}")).with_id(id);
    let a = open().await;
    put_list(&a, "t-renumber", 1, &[m("1"), m("2"), m("3")]).await;
    let b = open().await;
    b.delete_thread(&"t-renumber".into()).await.unwrap();
    put_list(&b, "t-renumber", 1, &[x("1"), x("2"), x("3")]).await;
    let last = put_list(&a, "t-renumber", 2, &[m("1"), m("2")]).await;
    let c = open().await;
    assert_eq!(read(&c, &last).await.unwrap(), vec![m("1"), m("2")]);
    let first = CheckpointConfig::latest("t-renumber").with_checkpoint_id(
        c.list(&antler_checkpoint::ListQuery::thread("t-renumber"))
            .await
            .unwrap()
            .last()
            .unwrap()
            .checkpoint
            .id,
    );
    assert_eq!(
        read(&c, &first).await.unwrap(),
        vec![x("1"), x("2"), x("3")]
    );
    // A copy onto a thread renumbers it the same way: the copy brings the source's numbers.
    // Here the target was pruned, not deleted: its bodies 1 and 2 were collected (3, the
    // highest, is kept), so the source's 1 and 2 land without colliding.
    put_list(&a, "t-dst", 1, &[m("1"), m("2"), m("3")]).await;
    put_list(&a, "t-dst", 2, &[m("3")]).await;
    b.prune(&["t-dst".into()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    put_list(&b, "t-src", 1, &[x("1"), x("2")]).await;
    b.copy_thread(&"t-src".into(), &"t-dst".into())
        .await
        .unwrap();
    let last = put_list(&a, "t-dst", 3, &[m("1"), m("2")]).await;
    assert_eq!(read(&c, &last).await.unwrap(), vec![m("1"), m("2")]);
    // A copy onto a thread that stores other bytes under the source's numbers would change what
    // the target's lists say: refused, and the target is untouched.
    let own = put_list(&c, "t-other", 1, &[x("own")]).await;
    let err = c
        .copy_thread(&"t-src".into(), &"t-other".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("t-other"), "{err}");
    assert_eq!(read(&c, &own).await.unwrap(), vec![x("own")]);
    assert_eq!(
        c.list(&antler_checkpoint::ListQuery::thread("t-other"))
            .await
            .unwrap()
            .len(),
        1
    );
    // A process whose index comes from a read (it never wrote the thread) holds the epoch of
    // that read: a delete and rewrite elsewhere after it makes its first write reload.
    let head = put_list(&c, "t-seeded", 1, &[m("1"), m("2"), m("3")]).await;
    let d = open().await;
    assert_eq!(read(&d, &head).await.unwrap(), vec![m("1"), m("2"), m("3")]);
    b.delete_thread(&"t-seeded".into()).await.unwrap();
    put_list(&b, "t-seeded", 1, &[x("1"), x("2"), x("3")]).await;
    let last = put_list(&d, "t-seeded", 2, &[m("1"), m("2")]).await;
    assert_eq!(read(&c, &last).await.unwrap(), vec![m("1"), m("2")]);
}

#[test]
fn a_deleted_thread_rewritten_elsewhere_never_lends_its_numbers() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("renumber", "store.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let p = &path;
        deleted_thread_numbers(|| async move { SqliteSaver::open(p, config).await.unwrap() }).await;
    });
}

#[test]
fn a_deleted_thread_rewritten_elsewhere_never_lends_its_numbers_on_postgres() {
    antler_checkpoint::testing::block_on(async {
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let Some((saver, options)) = crate::postgres::fresh(config).await else {
            return;
        };
        let o = &options;
        deleted_thread_numbers(|| async move {
            antler_checkpoint::PostgresSaver::connect(o.clone(), config)
                .await
                .unwrap()
        })
        .await;
        saver.drop_schema().await.unwrap();
    });
}

/// The same, when the new snapshot is made of the very `Arc`s this saver stored before (the
/// delta channel's cached messages, which the saver takes by pointer without hashing): a write
/// of numbers taken by pointer carries the epoch too, so the bodies are re-stored, never left
/// dangling.
#[test]
fn a_remembered_snapshot_never_leaves_dangling_references() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("remembered", "store.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let a = SqliteSaver::open(&path, config).await.unwrap();
        let b = SqliteSaver::open(&path, config).await.unwrap();
        let mut channel = DeltaMessages::new(SnapshotFrequency::new(F).unwrap());
        channel
            .update(vec![DeltaWrite::from(vec![
                Message::human("q").with_id("1"),
                Message::ai("a").with_id("2"),
            ])])
            .unwrap();
        let snapshot = channel.snapshot_blob().unwrap();
        async fn put(saver: &SqliteSaver, snapshot: &antler_checkpoint::Blob) -> CheckpointConfig {
            put_snapshot(saver, "t-remembered", 1, snapshot.clone()).await
        }
        put(&a, &snapshot).await;
        b.delete_thread(&"t-remembered".into()).await.unwrap();
        let c = put(&a, &snapshot).await;
        assert_eq!(read(&b, &c).await.unwrap(), channel.value());
    });
}

/// On PostgreSQL a write of a message list waits for a delete of its thread that is in
/// progress in another process, then sees the delete's epoch, reloads and stores its bodies
/// again; before, the write checked the epoch in its statement's snapshot, committed while the
/// delete ran, and kept a checkpoint naming the bodies the delete removed (read: `Corrupt`).
#[test]
fn a_write_racing_a_delete_on_postgres_waits_and_renumbers() {
    antler_checkpoint::testing::block_on(async {
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let Some((saver, options)) = crate::postgres::fresh(config).await else {
            return;
        };
        let m = |id: &str| Message::human(format!("text of {id}")).with_id(id);
        put_list(&saver, "t-race", 1, &[m("1"), m("2"), m("3")]).await;

        // Another process deletes the thread as `delete_thread` does, and holds the
        // transaction open.
        let (mut other, conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let tx = other.transaction().await.unwrap();
        let deleter: i32 = tx
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let s = format!("\"{}\"", options.schema);
        tx.execute(
            &format!("UPDATE {s}.thread_epochs SET epoch = epoch + 1 WHERE thread_id = $1"),
            &[&"t-race"],
        )
        .await
        .unwrap();
        for table in ["checkpoints", "blobs", "writes", "messages"] {
            tx.execute(
                &format!("DELETE FROM {s}.{table} WHERE thread_id = $1"),
                &[&"t-race"],
            )
            .await
            .unwrap();
        }
        let saver = std::sync::Arc::new(saver);
        let writer = {
            let saver = saver.clone();
            tokio::spawn(async move { put_list(&*saver, "t-race", 2, &[m("1"), m("2")]).await })
        };
        // The write's statement waits for the delete's row lock (the server says the delete
        // blocks it), and is still waiting a moment later.
        let (watcher, watcher_conn) = tokio_postgres::connect(&options.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let watcher_conn = tokio::spawn(watcher_conn);
        let mut waited = false;
        for _ in 0..100 {
            let n: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%epoch_lock%'",
                    &[&deleter],
                )
                .await
                .unwrap()
                .get(0);
            if n > 0 {
                waited = true;
                break;
            }
            if writer.is_finished() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(waited, "the write waits for the delete's lock");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!writer.is_finished(), "the write waits for the delete");
        tx.commit().await.unwrap();
        let last = writer.await.unwrap();
        assert_eq!(read(&*saver, &last).await.unwrap(), vec![m("1"), m("2")]);
        drop((other, watcher));
        let _ = conn.await;
        let _ = watcher_conn.await;
        let Ok(saver) = std::sync::Arc::try_unwrap(saver) else {
            panic!("the writer task has finished")
        };
        saver.drop_schema().await.unwrap();
    });
}

/// Two savers on one SQLite file (two processes) writing message lists of their own threads at
/// the same time: every write succeeds. A write transaction that read first (the epoch check)
/// and then wrote could not upgrade its lock once the other saver had committed in between
/// (`SQLITE_BUSY`, which waiting does not resolve), so writes failed at random.
#[test]
fn two_savers_on_one_sqlite_file_write_concurrently() {
    let path = crate::temp_db("concurrent", "store.db");
    let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
    // The savers' statements run on tokio's blocking pool, so the two tasks write in parallel.
    antler_checkpoint::testing::block_on(async {
        let mut tasks = Vec::new();
        for who in ["a", "b"] {
            let saver = SqliteSaver::open(&path, config).await.unwrap();
            tasks.push(tokio::spawn(async move {
                let thread = format!("t-{who}");
                let mut list = Vec::new();
                for i in 0..150_u64 {
                    list.push(Message::human(format!("{who} {i}")).with_id(format!("{who}{i}")));
                    let blob = antler_checkpoint::Blob::messages(
                        antler_checkpoint::MessagesKind::Snapshot,
                        &list,
                    )
                    .unwrap();
                    let mut cp = Checkpoint::empty();
                    cp.channel_versions
                        .insert("messages".into(), (i + 1).into());
                    cp.channel_values.insert("messages".into(), blob);
                    let nv = cp.channel_versions.clone();
                    saver
                        .put(
                            &CheckpointConfig::latest(thread.as_str()),
                            cp,
                            CheckpointMetadata::default(),
                            &nv,
                        )
                        .await
                        .unwrap_or_else(|e| panic!("{who}: write {i}: {e}"));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

/// A number or key column no build writes (a negative epoch or message number, an id of the
/// wrong length) is a corrupt store, named by thread, not a caller's invalid argument or a
/// backend failure to retry. So is, on SQLite, whose columns take a value of any type whatever
/// the schema says, a value of another type than the column's (a TEXT record, a REAL sequence
/// number, a TEXT write index): before 2026-12-01 that surfaced as a backend error.
#[test]
fn damaged_number_and_key_columns_are_corrupt_errors_naming_the_thread() {
    antler_checkpoint::testing::block_on(async {
        for edit in [
            "INSERT OR REPLACE INTO thread_epochs (thread_id, epoch) VALUES ('t-corrupt', -1)",
            "UPDATE checkpoints SET parent_id = X'00' WHERE thread_id = 't-corrupt'",
            "UPDATE checkpoints SET record = CAST(record AS TEXT)",
            "UPDATE messages SET seq = seq + 0.5",
            "UPDATE writes SET idx = 'first'",
        ] {
            let (saver, fx) = fixture().await;
            drop(saver);
            rusqlite::Connection::open(&fx.path)
                .unwrap()
                .execute_batch(edit)
                .unwrap();
            let saver = SqliteSaver::open(
                &fx.path,
                StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
            )
            .await
            .unwrap();
            let head = fx.configs.last().unwrap();
            let err = read(&saver, head).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{edit}: {err}");
            assert!(err.to_string().contains("t-corrupt"), "{edit}: {err}");
            if edit.contains("parent_id") {
                // The row holding the damaged parent is known: it is named.
                let head_id = head.checkpoint_id.unwrap().to_string();
                assert!(err.to_string().contains(&head_id), "{edit}: {err}");
            }
        }
    });
}

/// A negative message number is met where every body of the thread is read: the message index
/// a first write loads. It is a damaged column, named by thread, not a caller's invalid
/// argument (before) or a missing body.
#[test]
fn a_negative_message_number_is_a_damaged_column() {
    antler_checkpoint::testing::block_on(async {
        let (saver, fx) = fixture().await;
        drop(saver);
        rusqlite::Connection::open(&fx.path)
            .unwrap()
            .execute_batch("UPDATE messages SET seq = -seq WHERE thread_id = 't-corrupt'")
            .unwrap();
        let saver = SqliteSaver::open(
            &fx.path,
            StoreConfig::delta(SnapshotFrequency::new(F).unwrap()),
        )
        .await
        .unwrap();
        let head = fx.configs.last().unwrap();
        let write = antler_checkpoint::Blob::messages(
            antler_checkpoint::MessagesKind::Write,
            &[serde_json::json!({"type": "human", "content": "more", "id": "more"})],
        )
        .unwrap();
        let err = saver
            .put_writes(
                head,
                vec![("messages".into(), write)],
                &antler_checkpoint::TaskId::new("task"),
                &antler_checkpoint::TaskPath::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, antler_checkpoint::Error::DamagedColumn { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("t-corrupt"), "{err}");
    });
}

/// A damaged body that only old checkpoints reference does not stop new writes to the thread
/// (a fresh process loads the thread's message index from every stored body): the write
/// stores fresh copies of what it cannot match, the new checkpoint reads back whole, and the
/// old checkpoint still fails its read. Before, every message write failed on the load,
/// naming the new checkpoint.
#[test]
fn a_damaged_old_body_does_not_block_new_writes() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("corrupt", "old-body.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let old = {
            let saver = SqliteSaver::open(&path, config).await.unwrap();
            put_list(&saver, "t", 1, &[msg("1"), msg("2")]).await
        };
        edit_blob_column(
            &rusqlite::Connection::open(&path).unwrap(),
            "messages",
            "body",
            &|b| {
                let last = b.len() - 1;
                b[last] ^= 0x01;
            },
        );
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        // A new root checkpoint of the same thread with the same messages and one more.
        let list = [msg("1"), msg("2"), msg("3")];
        let new = put_list(&saver, "t", 2, &list).await;
        assert_eq!(read(&saver, &new).await.unwrap(), list);
        let err = read(&saver, &old).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    });
}

/// The same for a body stored as another type than a blob (text here): the index load takes
/// its number and does not offer it for reuse. Before, the load failed with `DamagedColumn`,
/// and with it every later message write to the thread.
#[test]
fn a_body_of_another_type_does_not_block_new_writes() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("corrupt", "text-body.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let old = {
            let saver = SqliteSaver::open(&path, config).await.unwrap();
            put_list(&saver, "t", 1, &[msg("1"), msg("2")]).await
        };
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute("UPDATE messages SET body = 'x' WHERE seq = 1", [])
            .unwrap();
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        let list = [msg("1"), msg("2"), msg("3")];
        let new = put_list(&saver, "t", 2, &list).await;
        assert_eq!(read(&saver, &new).await.unwrap(), list);
        let err = read(&saver, &old).await.unwrap_err();
        assert!(err.kind() == ErrorKind::Corrupt, "{err}");
    });
}

fn msg(id: &str) -> Message {
    Message::human(format!("text of {id}")).with_id(id)
}

/// Flips the last byte of the body numbered `seq` of thread `t`.
fn damage_body(path: &std::path::Path, seq: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut body: Vec<u8> = conn
        .query_row(
            "SELECT body FROM messages WHERE thread_id = 't' AND seq = ?1",
            [seq],
            |r| r.get(0),
        )
        .unwrap();
    let last = body.len() - 1;
    body[last] ^= 0x01;
    conn.execute(
        "UPDATE messages SET body = ?1 WHERE thread_id = 't' AND seq = ?2",
        params![body, seq],
    )
    .unwrap();
}

/// A damaged body read together with other checkpoints' bodies (a page of a list, a history
/// walk) is reported under the checkpoint whose value or write references it, not under the
/// first checkpoint of the page or the walk's target (before, `list` named the newest
/// checkpoint of the page, which reads fine on its own, and the walk named its target).
#[test]
fn a_damaged_body_is_reported_under_the_checkpoint_that_references_it() {
    antler_checkpoint::testing::block_on(async {
        let path = crate::temp_db("corrupt", "owner.db");
        let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        // c1 stores [a] (body 1); c2 moves the channel without a value and holds a write of
        // [b] (body 2); c3 moves it again. The walk from c3 replays c2's write on c1's seed.
        let c1 = put_list(&saver, "t", 1, &[msg("a")]).await;
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 2.into());
        let c2 = saver
            .put(
                &c1,
                cp,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        let w = antler_checkpoint::delta::DeltaWrite::from(vec![msg("b")]);
        saver
            .put_writes(
                &c2,
                vec![("messages".into(), w.to_blob().unwrap())],
                &TaskId::new("task"),
                &TaskPath::default(),
            )
            .await
            .unwrap();
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 3.into());
        let c3 = saver
            .put(
                &c2,
                cp,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        assert_eq!(read(&saver, &c3).await.unwrap(), vec![msg("a"), msg("b")]);
        drop(saver);
        let id = |c: &CheckpointConfig| c.checkpoint_id.unwrap().to_string();

        // The write's body: the walk from c3 fails naming c2.
        damage_body(&path, 2);
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        let err = read(&saver, &c3).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains(&id(&c2)), "{err}");
        drop(saver);
        damage_body(&path, 2);

        // The snapshot's body: a list of the thread fails naming c1, whose value references
        // it, although c3 and c2 come first.
        damage_body(&path, 1);
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        let err = saver
            .list(&antler_checkpoint::ListQuery::thread("t"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains(&id(&c1)), "{err}");
    });
}
