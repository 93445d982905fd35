//! criterion benchmarks of the hot saver paths — `put` (plain and with a delta snapshot),
//! `put_writes`, `get_tuple`, `get_tuple_without_values` and the delta materialisation — on a
//! delta thread of 100 and 2,000 turns, for the memory, SQLite (`:memory:`) and PostgreSQL
//! (a schema of its own, dropped afterwards) savers; and
//! the cold read of a 2,000-turn head (a freshly opened SQLite file or PostgreSQL saver),
//! split into the saver's part and the whole materialisation.
//! The thread's head stores a snapshot (the turns are a multiple of F); the `_replay` cases
//! read the last turn's input checkpoint instead, which replays F − 1 writes on its seed, the
//! most a checkpoint of the thread replays.
//! Run with `cargo bench -p antler-checkpoint --all-features --bench saver`; the PostgreSQL
//! cases need `DATABASE_URL` (they are skipped without it).
#![expect(clippy::unwrap_used, reason = "benchmark setup")]
#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
#![allow(
    clippy::print_stderr,
    reason = "says why the PostgreSQL cases are skipped"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use antler_checkpoint::delta::{DeltaMessages, DeltaWrite, MESSAGES, materialize};
use antler_checkpoint::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, MemorySaver, Saver,
    SnapshotFrequency, SqliteSaver, StoreConfig, TaskId, TaskPath,
};
use antler_state_reducers::Message;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const F: u32 = 10;

fn text(t: usize, role: &str) -> String {
    let mut s = format!("turn {t} {role}:");
    while s.len() < 400 {
        s.push_str(" lorem");
    }
    s.truncate(400);
    s
}

struct Thread {
    head: CheckpointConfig,
    input: CheckpointConfig,
    version: u64,
    /// The channel after the last turn: its snapshots reuse the serialised messages (`Arc`s).
    channel: DeltaMessages,
}

/// Builds a delta thread of `turns` turns (input + loop checkpoint per turn).
async fn build(saver: &dyn Saver, turns: usize) -> Thread {
    let mut ch = DeltaMessages::new(SnapshotFrequency::new(F).unwrap());
    let mut head = CheckpointConfig::latest("bench");
    let mut input = head.clone();
    let mut version = 0u64;
    for t in 0..turns {
        let mut cp = Checkpoint::empty();
        let mut nv = ChannelVersions::new();
        if ch.on_checkpoint(false).is_snapshot() {
            version += 1;
            nv.insert("messages".into(), version.into());
            cp.channel_values
                .insert("messages".into(), ch.snapshot_blob().unwrap());
        }
        cp.channel_versions
            .insert("messages".into(), version.into());
        input = saver
            .put(&head, cp, CheckpointMetadata::default(), &nv)
            .await
            .unwrap();
        let w = DeltaWrite::from(vec![
            Message::human(text(t, "human")).with_id(format!("m{t}h")),
            Message::ai(text(t, "ai")).with_id(format!("m{t}a")),
        ]);
        saver
            .put_writes(
                &input,
                vec![("messages".into(), w.to_blob().unwrap())],
                &TaskId::new(format!("task{t}")),
                &TaskPath::new("~turn"),
            )
            .await
            .unwrap();
        ch.update(vec![w]).unwrap();
        version += 1;
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), version.into());
        let mut nv: ChannelVersions = [("messages".into(), version.into())].into();
        if ch.on_checkpoint(true).is_snapshot() {
            cp.channel_values
                .insert("messages".into(), ch.snapshot_blob().unwrap());
        } else {
            nv.clear();
        }
        head = saver
            .put(&input, cp, CheckpointMetadata::default(), &nv)
            .await
            .unwrap();
    }
    Thread {
        head,
        input,
        version,
        channel: ch,
    }
}

/// The savers of the warm benchmarks, each empty; PostgreSQL only with `DATABASE_URL`, in a
/// schema of its own (`schema`, for [`drop_schema`] once its cases ran).
fn savers(
    rt: &tokio::runtime::Runtime,
    turns: usize,
) -> Vec<(&'static str, Box<dyn Saver>, Option<String>)> {
    let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
    #[allow(unused_mut, reason = "PostgreSQL joins with its feature only")]
    let mut out: Vec<(&'static str, Box<dyn Saver>, Option<String>)> = vec![
        (
            "memory",
            Box::new(MemorySaver::new(config)) as Box<dyn Saver>,
            None,
        ),
        (
            "sqlite",
            Box::new(rt.block_on(SqliteSaver::open_in_memory(config)).unwrap()),
            None,
        ),
    ];
    #[cfg(feature = "postgres")]
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let schema = format!("antler_bench_warm_{}_{turns}", std::process::id());
            let options = antler_checkpoint::PostgresOptions::new(url).with_schema(schema.clone());
            let saver = rt
                .block_on(antler_checkpoint::PostgresSaver::connect(options, config))
                .unwrap();
            out.push(("postgres", Box::new(saver), Some(schema)));
        }
        _ => eprintln!("SKIPPED: warm PostgreSQL benchmarks (DATABASE_URL is unset)"),
    }
    #[cfg(not(feature = "postgres"))]
    let _ = turns;
    out
}

/// Drops a warm benchmark's PostgreSQL schema (the saver is gone by then).
#[cfg(feature = "postgres")]
fn drop_schema(rt: &tokio::runtime::Runtime, schema: &str) {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        return;
    };
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        drop(client);
        let _ = task.await;
    });
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("saver");
    group.sample_size(20);
    for turns in [100usize, 2000] {
        for (name, saver, schema) in savers(&rt, turns) {
            let thread = rt.block_on(build(&*saver, turns));
            let id = format!("{name}/{turns}");
            group.bench_with_input(BenchmarkId::new("put", &id), &thread, |b, th| {
                b.to_async(&rt).iter(|| async {
                    let mut cp = Checkpoint::empty();
                    cp.channel_versions
                        .insert("messages".into(), (th.version + 1).into());
                    black_box(
                        saver
                            .put(
                                &th.head,
                                cp,
                                CheckpointMetadata::default(),
                                &ChannelVersions::new(),
                            )
                            .await
                            .unwrap(),
                    )
                });
            });
            // A snapshot put as the runtime does it: the same `Arc`s as the previous snapshot
            // (the channel caches its serialised messages), under a new version each time.
            let snapshot = thread.channel.clone().snapshot_blob().unwrap();
            let mut v = thread.version + 1_000_000;
            group.bench_with_input(BenchmarkId::new("put_snapshot", &id), &thread, |b, th| {
                b.to_async(&rt).iter(|| {
                    v += 1;
                    let mut cp = Checkpoint::empty();
                    cp.channel_versions.insert("messages".into(), v.into());
                    cp.channel_values
                        .insert("messages".into(), snapshot.clone());
                    let nv = cp.channel_versions.clone();
                    let saver = &saver;
                    async move {
                        black_box(
                            saver
                                .put(&th.head, cp, CheckpointMetadata::default(), &nv)
                                .await
                                .unwrap(),
                        )
                    }
                });
            });
            // Before `put_writes` below adds writes to the input checkpoint read here.
            let replayed = rt.block_on(async {
                let tuple = saver.get_tuple(&thread.input).await.unwrap().unwrap();
                materialize(
                    &*saver,
                    &tuple,
                    MESSAGES,
                    SnapshotFrequency::new(F).unwrap(),
                )
                .await
                .unwrap()
                .replayed_writes
            });
            assert_eq!(
                replayed,
                F as usize - 1,
                "the input checkpoint replays F - 1 writes"
            );
            bench_materialize(
                &mut group,
                &rt,
                &*saver,
                "materialize_replay",
                &id,
                &thread.input,
            );
            let mut n = 0u64;
            group.bench_with_input(BenchmarkId::new("put_writes", &id), &thread, |b, th| {
                b.to_async(&rt).iter(|| {
                    n += 1;
                    let task = TaskId::new(format!("bench-task-{n}"));
                    let w = DeltaWrite::from(vec![
                        Message::human(text(n as usize, "human")).with_id(format!("b{n}")),
                    ]);
                    let saver = &saver;
                    async move {
                        saver
                            .put_writes(
                                &th.input,
                                vec![("messages".into(), w.to_blob().unwrap())],
                                &task,
                                &TaskPath::new("~turn"),
                            )
                            .await
                            .unwrap();
                    }
                });
            });
            group.bench_with_input(BenchmarkId::new("get_tuple", &id), &thread, |b, th| {
                b.to_async(&rt)
                    .iter(|| async { black_box(saver.get_tuple(&th.head).await.unwrap()) });
            });
            group.bench_with_input(
                BenchmarkId::new("get_tuple_without_values", &id),
                &thread,
                |b, th| {
                    b.to_async(&rt).iter(|| async {
                        black_box(saver.get_tuple_without_values(&th.head).await.unwrap())
                    });
                },
            );
            bench_materialize(
                &mut group,
                &rt,
                &*saver,
                "materialize_head",
                &id,
                &thread.head,
            );
            drop(saver);
            #[cfg(feature = "postgres")]
            if let Some(schema) = schema {
                drop_schema(&rt, &schema);
            }
            #[cfg(not(feature = "postgres"))]
            let _ = schema;
        }
    }
    group.finish();
}

/// Times reading `at` from the warm `saver` and materialising its message channel.
fn bench_materialize(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    saver: &dyn Saver,
    name: &str,
    id: &str,
    at: &CheckpointConfig,
) {
    group.bench_with_input(BenchmarkId::new(name, id), at, |b, at| {
        b.to_async(rt).iter(|| async {
            let tuple = saver.get_tuple(at).await.unwrap().unwrap();
            black_box(
                materialize(saver, &tuple, MESSAGES, SnapshotFrequency::new(F).unwrap())
                    .await
                    .unwrap(),
            )
        });
    });
}

/// The saver's part of a cold head read: the tuple and, when the head stores no value of the
/// channel, its delta history (no message is decoded).
async fn read_head(saver: &dyn Saver, head: &CheckpointConfig) {
    let tuple = saver.get_tuple(head).await.unwrap().unwrap();
    if !tuple.checkpoint.channel_values.contains_key(MESSAGES) {
        black_box(
            saver
                .delta_channel_history(head, &[MESSAGES.into()])
                .await
                .unwrap(),
        );
    }
    black_box(tuple);
}

/// The whole cold head read: the tuple, then the channel materialised into messages.
async fn materialize_head(saver: &dyn Saver, head: &CheckpointConfig) -> usize {
    let tuple = saver.get_tuple(head).await.unwrap().unwrap();
    materialize(saver, &tuple, MESSAGES, SnapshotFrequency::new(F).unwrap())
        .await
        .unwrap()
        .channel
        .value()
        .len()
}

/// Times the cold reads of `head` (holding `messages` messages) on a saver freshly opened by
/// `open` for every iteration (the open is not timed).
fn bench_cold<S, O, OF>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    head: &CheckpointConfig,
    messages: usize,
    open: O,
) where
    S: Saver + 'static,
    O: Fn() -> OF + Copy,
    OF: std::future::Future<Output = S>,
{
    group.bench_function(format!("read_head/{name}"), |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let saver = open().await;
                let start = Instant::now();
                read_head(&saver, head).await;
                total += start.elapsed();
            }
            total
        });
    });
    group.bench_function(format!("materialize_head/{name}"), |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let saver = open().await;
                let start = Instant::now();
                assert_eq!(black_box(materialize_head(&saver, head).await), messages);
                total += start.elapsed();
            }
            total
        });
    });
}

/// Cold reads of the head of a 2,000-turn thread (4,000 messages of about 530 bytes, F = 10).
fn cold(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = StoreConfig::delta(SnapshotFrequency::new(F).unwrap());
    let mut group = c.benchmark_group("cold");
    group.sample_size(20);

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-cold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let thread = rt.block_on(async {
        let saver = SqliteSaver::open(&path, config).await.unwrap();
        build(&saver, 2000).await
    });
    let p = &path;
    bench_cold(
        &mut group,
        &rt,
        "sqlite-file/2000",
        &thread.head,
        4000,
        || async move { SqliteSaver::open(p, config).await.unwrap() },
    );
    bench_cold(
        &mut group,
        &rt,
        "sqlite-file/2000_replay",
        &thread.input,
        3998,
        || async move { SqliteSaver::open(p, config).await.unwrap() },
    );
    let _ = std::fs::remove_dir_all(&dir);

    #[cfg(feature = "postgres")]
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let options = antler_checkpoint::PostgresOptions::new(url)
                .with_schema(format!("antler_bench_{}", std::process::id()));
            let (saver, thread) = rt.block_on(async {
                let saver = antler_checkpoint::PostgresSaver::connect(options.clone(), config)
                    .await
                    .unwrap();
                let thread = build(&saver, 2000).await;
                (saver, thread)
            });
            let o = &options;
            let open = || async move {
                antler_checkpoint::PostgresSaver::connect(o.clone(), config)
                    .await
                    .unwrap()
            };
            bench_cold(&mut group, &rt, "postgres/2000", &thread.head, 4000, open);
            bench_cold(
                &mut group,
                &rt,
                "postgres/2000_replay",
                &thread.input,
                3998,
                open,
            );
            rt.block_on(saver.drop_schema()).unwrap();
        }
        _ => eprintln!("SKIPPED: cold PostgreSQL benchmarks (DATABASE_URL is unset)"),
    }
    group.finish();
}

criterion_group!(benches, bench, cold);
criterion_main!(benches);
