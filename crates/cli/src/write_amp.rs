//! `antler bench write-amp`: the write-amplification workload of `shared/bench/write-amp.md`.
//!
//! Two drivers run the same workload:
//! - `graph` (the default): the workload's graph (START → `turn` → END) compiled by
//!   `antler::graph` and run against the saver through `SaverCheckpointer`, one invoke per turn
//!   with an input that updates no field. These are the figures the targets apply to.
//! - `saver`: drives the saver directly with the sequence of checkpoints and writes the
//!   workload implies (an `input` checkpoint, the `turn` task's `put_writes`, a `loop`
//!   checkpoint per invoke), with `antler::checkpoint::delta::DeltaMessages` for counters,
//!   snapshot decisions and replay. It isolates the saver from the runtime: the runtime stores
//!   one checkpoint more per invoke (`__start__`'s step) and its own record layout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use std::sync::Arc;

use antler::checkpoint::delta::{self, DeltaMessages, DeltaWrite};
use antler::checkpoint::{
    Blob, ChannelMode, ChannelName, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig,
    CheckpointMetadata, CheckpointSource, ListQuery, MemorySaver, NodeName, PostgresOptions,
    PostgresSaver, RunId, Saver, SnapshotFrequency, SqliteSaver, StorageStats, StoreConfig, TaskId,
    TaskPath, ThreadId,
};
use antler::graph::{ChannelSpec, Key, RunConfig, SaverCheckpointer, State, StateGraph, Update};
use antler::state_reducers::{Message, MessageWrite, merge_message_writes_owned};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) const USAGE: &str =
    "usage: antler bench write-amp [--saver memory|sqlite|postgres] [--mode full|delta] \
[--snapshot-frequency F] [--turns T] [--db PATH_OR_URL] [--driver graph|saver] [--json]

Runs the write-amplification workload (shared/bench/write-amp.md) against one saver.
Defaults: --saver memory, --mode delta, --snapshot-frequency 10, --turns 100.
--driver graph (default) runs the workload's graph through the runtime; --driver saver drives
the saver directly with the workload's checkpoint/write sequence (no runtime).
--db: SQLite file (default: a temporary file, deleted afterwards) or PostgreSQL URL
(default: $DATABASE_URL; a temporary schema is created and dropped).
With --json the last stdout line is one JSON object with the metrics.
The process keeps freed memory for reuse (glibc: larger malloc trim and mmap thresholds);
ANTLER_MALLOC_DEFAULTS=1 keeps the allocator's defaults. JSON key `allocator` says which.";

const WORDS: [&str; 26] = [
    "alfa", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
];

/// The workload's message text: exactly 400 ASCII characters.
pub(crate) fn text(t: usize, role: &str) -> String {
    let mut s = format!("turn {t} {role}:");
    let off = if role == "human" { 7 * t } else { 7 * t + 13 };
    let mut k = 0;
    while s.len() < 400 {
        s.push(' ');
        s.push_str(WORDS[(off + k) % 26]);
        k += 1;
    }
    s.truncate(400);
    s
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SaverKind {
    Memory,
    Sqlite,
    Postgres,
}

impl SaverKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// What runs the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    /// The graph runtime over the saver.
    Graph,
    /// The saver alone, fed the workload's checkpoint/write sequence.
    Saver,
}

impl Driver {
    fn as_str(self) -> &'static str {
        match self {
            Self::Graph => "graph",
            Self::Saver => "saver",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Options {
    driver: Driver,
    saver: SaverKind,
    mode: ChannelMode,
    frequency: SnapshotFrequency,
    turns: usize,
    db: Option<String>,
    json: bool,
}

impl Options {
    /// Parses the arguments after `bench write-amp`; `Ok(None)` for `--help`.
    pub(crate) fn parse(args: &[&str]) -> Result<Option<Self>, String> {
        let mut o = Options {
            driver: Driver::Graph,
            saver: SaverKind::Memory,
            mode: ChannelMode::Delta,
            frequency: SnapshotFrequency::DEFAULT,
            turns: 100,
            db: None,
            json: false,
        };
        let mut it = args.iter();
        while let Some(&arg) = it.next() {
            let mut value = || {
                it.next()
                    .copied()
                    .ok_or_else(|| format!("{arg} needs a value"))
            };
            match arg {
                "--help" | "-h" => return Ok(None),
                "--json" => o.json = true,
                "--saver" => {
                    o.saver = match value()? {
                        "memory" => SaverKind::Memory,
                        "sqlite" => SaverKind::Sqlite,
                        "postgres" => SaverKind::Postgres,
                        other => return Err(format!("unknown saver {other:?}")),
                    }
                }
                "--mode" => {
                    o.mode = ChannelMode::parse(value()?).ok_or("mode must be full or delta")?
                }
                "--snapshot-frequency" => {
                    let n: u32 = value()?
                        .parse()
                        .map_err(|_| "snapshot frequency must be a positive integer")?;
                    o.frequency = SnapshotFrequency::new(n).map_err(|e| e.to_string())?;
                }
                "--turns" => {
                    o.turns = value()?
                        .parse()
                        .map_err(|_| "turns must be a positive integer")?
                }
                "--db" => o.db = Some(value()?.to_owned()),
                "--driver" => {
                    o.driver = match value()? {
                        "graph" => Driver::Graph,
                        "saver" => Driver::Saver,
                        other => return Err(format!("unknown driver {other:?}")),
                    }
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if o.turns == 0 {
            return Err("turns must be positive".into());
        }
        Ok(Some(o))
    }

    fn store_config(&self) -> StoreConfig {
        match self.mode {
            ChannelMode::Full => StoreConfig {
                snapshot_frequency: self.frequency,
                ..StoreConfig::full()
            },
            ChannelMode::Delta => StoreConfig::delta(self.frequency),
        }
    }
}

/// Where the store lives, so that a second ("cold") saver can open it again.
enum Store {
    Memory(Arc<MemorySaver>),
    Sqlite(Arc<SqliteSaver>, PathBuf, bool),
    Postgres(Arc<PostgresSaver>, PostgresOptions),
}

impl Store {
    async fn open(o: &Options) -> Result<Self, BoxError> {
        Ok(match o.saver {
            SaverKind::Memory => Store::Memory(Arc::new(MemorySaver::new(o.store_config()))),
            SaverKind::Sqlite => {
                let (path, temporary) = match &o.db {
                    Some(p) => (PathBuf::from(p), false),
                    None => (
                        std::env::temp_dir().join(format!(
                            "antler-write-amp-{}.db",
                            uuid::Uuid::new_v4().simple()
                        )),
                        true,
                    ),
                };
                Store::Sqlite(
                    Arc::new(SqliteSaver::open(&path, o.store_config()).await?),
                    path,
                    temporary,
                )
            }
            SaverKind::Postgres => {
                let url = match &o.db {
                    Some(u) => u.clone(),
                    None => std::env::var("DATABASE_URL")
                        .map_err(|_| "postgres needs --db URL or DATABASE_URL")?,
                };
                let options = PostgresOptions::new(url)
                    .with_schema(format!("antler_bench_{}", uuid::Uuid::new_v4().simple()));
                Store::Postgres(
                    Arc::new(PostgresSaver::connect(options.clone(), o.store_config()).await?),
                    options,
                )
            }
        })
    }

    fn saver(&self) -> Arc<dyn Saver> {
        match self {
            Store::Memory(s) => s.clone(),
            Store::Sqlite(s, ..) => s.clone(),
            Store::Postgres(s, _) => s.clone(),
        }
    }

    async fn stats(&self, thread: &ThreadId) -> Result<StorageStats, BoxError> {
        Ok(match self {
            Store::Memory(s) => s.storage_stats(thread).await?,
            Store::Sqlite(s, ..) => s.storage_stats(thread).await?,
            Store::Postgres(s, _) => s.storage_stats(thread).await?,
        })
    }

    /// A second saver on the same store, opened from scratch (memory: the same saver, since
    /// its data lives only in it).
    async fn reopen(&self, config: StoreConfig) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(match self {
            Store::Memory(s) => s.clone(),
            Store::Sqlite(_, path, _) => Arc::new(SqliteSaver::open(path, config).await?),
            Store::Postgres(_, options) => {
                Arc::new(PostgresSaver::connect(options.clone(), config).await?)
            }
        })
    }

    /// Peak memory of one cold `get_state` (graph driver), measured in a fresh process of this
    /// binary (`antler bench cold-peak`): there, nothing the workload or the earlier reads
    /// allocated and freed is reused, so the resident set's rise during the read is what the
    /// read needed. `None` for the memory saver, whose data lives only in this process;
    /// `Some(None)` where the child could not measure it (see [`PeakRss`]).
    fn peak_in_fresh_process(
        &self,
        o: &Options,
        thread: &ThreadId,
    ) -> Result<Option<Option<u64>>, BoxError> {
        let (saver, db, schema) = match self {
            Store::Memory(_) => return Ok(None),
            Store::Sqlite(_, path, _) => ("sqlite", path.display().to_string(), None),
            Store::Postgres(_, options) => (
                "postgres",
                options.url.clone(),
                Some(options.schema.clone()),
            ),
        };
        // Only the `antler` binary has the `cold-peak` subcommand (a unit-test binary of this
        // crate has not: there the in-process figure stands).
        let exe = std::env::current_exe()?;
        if exe.file_stem().and_then(|n| n.to_str()) != Some("antler") {
            return Ok(None);
        }
        let mut cmd = std::process::Command::new(exe);
        // The store's location by environment: a PostgreSQL URL may carry a password, which
        // the process list would show.
        cmd.env(COLD_PEAK_DB_ENV, &db);
        cmd.args(["bench", "cold-peak", "--saver", saver, "--mode"])
            .arg(o.mode.as_str())
            .args(["--snapshot-frequency", &o.frequency.get().to_string()])
            .args(["--thread", thread.as_str()]);
        if let Some(schema) = schema {
            cmd.args(["--schema", &schema]);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(format!(
                "cold-peak child failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(line.trim())?;
        let bytes = match v.get("peak_bytes") {
            Some(serde_json::Value::Null) => None,
            Some(b) => Some(b.as_u64().ok_or("cold-peak child printed no peak_bytes")?),
            None => return Err("cold-peak child printed no peak_bytes".into()),
        };
        let messages = v.get("messages").and_then(serde_json::Value::as_u64);
        if messages != Some(2 * o.turns as u64) {
            return Err(format!("cold-peak child read {messages:?} messages").into());
        }
        Ok(Some(bytes))
    }

    /// Median of 20 raw scans of the thread's message bodies, each through a freshly opened
    /// saver (`body_scan`), and what the last one read; `None` for the memory saver.
    async fn body_scan_cold(
        &self,
        config: StoreConfig,
        thread: &ThreadId,
    ) -> Result<Option<(f64, antler::checkpoint::BodyScan)>, BoxError> {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..20 {
            let (began, scan) = match self {
                Store::Memory(_) => return Ok(None),
                Store::Sqlite(_, path, _) => {
                    let fresh = SqliteSaver::open(path, config).await?;
                    let began = Instant::now();
                    (began, fresh.body_scan(thread).await?)
                }
                Store::Postgres(_, options) => {
                    let fresh = PostgresSaver::connect(options.clone(), config).await?;
                    let began = Instant::now();
                    (began, fresh.body_scan(thread).await?)
                }
            };
            times.push(began.elapsed().as_secs_f64() * 1e3);
            last = Some(scan);
        }
        Ok(last.map(|scan| (median(&times), scan)))
    }

    /// The store's own size figures for the thread (SQLite's file after `VACUUM`, PostgreSQL's
    /// `pg_column_size`), taken before anything but the workload has written.
    async fn sizes(
        &self,
        extra: &mut serde_json::Map<String, serde_json::Value>,
        thread: &ThreadId,
    ) -> Result<(), BoxError> {
        match self {
            Store::Memory(_) => {}
            Store::Sqlite(s, ..) => {
                extra.insert(
                    "sqlite_file_bytes_after_vacuum".into(),
                    json!(s.vacuum().await?),
                );
            }
            Store::Postgres(s, _) => {
                extra.insert(
                    "pg_column_size_bytes".into(),
                    json!(s.pg_column_bytes(thread).await?),
                );
            }
        }
        Ok(())
    }

    async fn close(self) -> Result<(), BoxError> {
        match self {
            Store::Memory(_) => {}
            Store::Sqlite(s, path, temporary) => {
                // Every other holder (the graph's checkpointer) is gone by now; close the file.
                drop(s);
                if temporary {
                    for suffix in ["", "-wal", "-shm"] {
                        let mut p = path.clone().into_os_string();
                        p.push(suffix);
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            Store::Postgres(s, _) => {
                Arc::try_unwrap(s)
                    .map_err(|_| "the PostgreSQL saver is still in use")?
                    .drop_schema()
                    .await?;
            }
        }
        Ok(())
    }
}

/// The live `messages` channel of the run, in either mode.
enum Live {
    Full(Vec<Message>),
    Delta(DeltaMessages),
}

impl Live {
    fn value(&self) -> &[Message] {
        match self {
            Live::Full(v) => v,
            Live::Delta(d) => d.value(),
        }
    }
}

const MESSAGES: &str = "messages";
const START: &str = "__start__";

/// One materialisation of the head: the value and how many writes were replayed.
/// One read of the head state: the value, the writes replayed, and the milliseconds spent
/// in the saver (fetching rows and walking history) before decoding and replay.
struct StateRead {
    value: Vec<Message>,
    replayed: usize,
    storage_ms: f64,
}

async fn get_state(
    saver: &dyn Saver,
    thread: &ThreadId,
    o: &Options,
) -> Result<StateRead, BoxError> {
    let began = Instant::now();
    let tuple = saver
        .get_tuple(&CheckpointConfig::latest(thread.clone()))
        .await?
        .ok_or("no head checkpoint")?;
    materialize_timed(saver, &tuple, o, began).await
}

async fn materialize(
    saver: &dyn Saver,
    tuple: &antler::checkpoint::CheckpointTuple,
    o: &Options,
) -> Result<StateRead, BoxError> {
    materialize_timed(saver, tuple, o, Instant::now()).await
}

async fn materialize_timed(
    saver: &dyn Saver,
    tuple: &antler::checkpoint::CheckpointTuple,
    o: &Options,
    began: Instant,
) -> Result<StateRead, BoxError> {
    let (thread, cp) = (&tuple.config.thread_id, tuple.checkpoint.id);
    let stored = tuple.checkpoint.channel_values.get(MESSAGES);
    if o.mode == ChannelMode::Full || stored.is_some() {
        let storage_ms = began.elapsed().as_secs_f64() * 1e3;
        let value = match stored {
            Some(blob) => delta::decode_messages_value(blob, thread, cp)?,
            // A checkpoint before the first write of `messages` (the first turn's input
            // checkpoint, which the replay-depth sample reads on short runs) has no value.
            None if !tuple.checkpoint.channel_versions.contains_key(MESSAGES) => Vec::new(),
            None => return Err(format!("checkpoint {cp} lists messages but has no value").into()),
        };
        return Ok(StateRead {
            value,
            replayed: 0,
            storage_ms,
        });
    }
    let mut histories = saver
        .delta_channel_history(&tuple.config, &[ChannelName::new(MESSAGES)])
        .await?;
    let storage_ms = began.elapsed().as_secs_f64() * 1e3;
    let history = histories.remove(MESSAGES).unwrap_or_default();
    let channel = DeltaMessages::restore(o.frequency, &history, thread, cp)?;
    Ok(StateRead {
        value: channel.into_value(),
        replayed: history.writes.len(),
        storage_ms,
    })
}

fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The peak resident set of one call: `start` resets the kernel's high-water mark and notes
/// the resident set; `bytes` is how far the mark rose above it, `None` where the mark could not
/// be reset or read (no such `/proc` files): the mark would then be the whole process's, not
/// the call's.
struct PeakRss(Option<u64>);

impl PeakRss {
    fn start() -> Self {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        Self(rss_kib("VmRSS:").filter(|_| reset))
    }

    fn bytes(&self) -> Option<u64> {
        match (self.0, rss_kib("VmHWM:")) {
            (Some(before), Some(peak)) => Some(peak.saturating_sub(before) * 1024),
            _ => None,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        // An even count: the mean of the two middle values.
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Where `antler bench cold-peak` finds the store: a SQLite path or a PostgreSQL URL.
const COLD_PEAK_DB_ENV: &str = "ANTLER_COLD_PEAK_DB";

/// `antler bench cold-peak …` (run by the benchmark itself): opens the store named by the
/// arguments, reads the thread's head once through the workload graph, and prints one JSON
/// line with the rise of the resident set during that read and the number of messages read.
pub(crate) fn cold_peak(args: &[&str]) -> Result<(), BoxError> {
    let mut rest = Vec::new();
    let (mut thread, mut schema) = (None, None);
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        match a {
            "--thread" => thread = it.next().map(|s| (*s).to_owned()),
            "--schema" => schema = it.next().map(|s| (*s).to_owned()),
            other => rest.push(other),
        }
    }
    let o = Options::parse(&rest)?.ok_or("cold-peak takes no --help")?;
    let thread = thread.ok_or("cold-peak needs --thread")?;
    let db = std::env::var(COLD_PEAK_DB_ENV)
        .map_err(|_| format!("cold-peak needs {COLD_PEAK_DB_ENV}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let saver: Arc<dyn Saver> = match o.saver {
            SaverKind::Sqlite => {
                Arc::new(SqliteSaver::open(&PathBuf::from(&db), o.store_config()).await?)
            }
            SaverKind::Postgres => {
                let schema = schema.ok_or("cold-peak on postgres needs --schema")?;
                Arc::new(
                    PostgresSaver::connect(
                        PostgresOptions::new(db).with_schema(schema),
                        o.store_config(),
                    )
                    .await?,
                )
            }
            SaverKind::Memory => return Err("cold-peak needs a database saver".into()),
        };
        let graph = workload_graph(&o, saver)?;
        let cfg = RunConfig::new(thread.as_str());
        let peak = PeakRss::start();
        let snapshot = graph.get_state(&cfg).await?.ok_or("no state")?;
        let bytes = peak.bytes();
        let messages = snapshot.values.get(&MESSAGES_KEY).map_or(0, Vec::len);
        println!("{}", json!({"peak_bytes": bytes, "messages": messages}));
        Ok(())
    })
}

/// Runs one configuration; `allocator` is what `main` set up, reported with the figures
/// (cold reads depend on it, see `crate::alloc`).
pub(crate) fn run(o: &Options, allocator: crate::alloc::Settings) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(o, allocator))
}

/// What one driver measured.
struct Measured {
    invoke_ms: Vec<f64>,
    new_data_bytes: u64,
    /// Growth of the stored bytes over each of the last 10 turns.
    growth: Vec<f64>,
    stats: StorageStats,
    warm: Vec<f64>,
    cold: Vec<f64>,
    /// Saver driver only: the part of a cold read spent in the saver.
    cold_storage: Option<Vec<f64>>,
    /// Opening the fresh saver of each cold read (outside the cold figure: on PostgreSQL it
    /// includes preparing and running the read statements once on the new connection).
    cold_open: Vec<f64>,
    /// `None`: the peak could not be measured here (written as `null`).
    peak_bytes: Option<u64>,
    /// Where `peak_bytes` was measured: `fresh-process` or `in-process`.
    peak_source: &'static str,
    max_replayed: usize,
    head_replayed: usize,
    window: usize,
    /// Saver driver only: how many snapshots were stored.
    snapshots: Option<usize>,
    /// Graph driver, delta mode: cold reads of the newest checkpoint that replays the most
    /// writes (empty when none replays any).
    cold_replay: Vec<f64>,
}

impl Measured {
    /// What a growth pass returns: the growth per turn, and nothing else measured.
    fn growth_only(growth: Vec<f64>) -> Self {
        Self {
            invoke_ms: Vec::new(),
            new_data_bytes: 0,
            growth,
            stats: StorageStats::default(),
            warm: Vec::new(),
            cold: Vec::new(),
            cold_storage: None,
            cold_open: Vec::new(),
            peak_bytes: None,
            peak_source: "none",
            max_replayed: 0,
            head_replayed: 0,
            window: 0,
            snapshots: None,
            cold_replay: Vec::new(),
        }
    }
}

/// What a first turn, a page of history and a fork cost at the end of a run, each through a
/// freshly opened saver and graph (medians of 5): what a process that did not write the
/// thread pays, which must not grow with the thread beyond reading its state.
struct HistoryCosts {
    /// One invoke (a turn of the workload) on the thread's head.
    invoke_ms: f64,
    /// `get_state_history_with(limit 10)`.
    page10_ms: f64,
    /// `update_state` on the thread's middle checkpoint (a fork: it reads the namespace's
    /// version mark for its floor).
    fork_ms: f64,
}

/// Measures [`HistoryCosts`]. Runs last: each turn and fork adds checkpoints to the thread.
async fn history_and_fork(
    o: &Options,
    store: &Store,
    saver: &dyn Saver,
    cfg: &RunConfig,
    thread: &ThreadId,
) -> Result<HistoryCosts, BoxError> {
    let (mut invoke, mut page, mut fork) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let fresh = workload_graph(o, store.reopen(o.store_config()).await?)?;
        let began = Instant::now();
        fresh.invoke(Update::new(), cfg).await?;
        invoke.push(began.elapsed().as_secs_f64() * 1e3);
    }
    let all = saver
        .list_without_values(&ListQuery::thread(thread.clone()))
        .await?;
    let middle = all
        .get(all.len() / 2)
        .map(|t| antler::graph::CheckpointId::new(t.checkpoint.id.to_string()))
        .ok_or("the thread has no checkpoint")?;
    // Every page before any fork: a fork adds a checkpoint, which the next page (newest
    // first, all branches) would include.
    for _ in 0..5 {
        let fresh = workload_graph(o, store.reopen(o.store_config()).await?)?;
        let began = Instant::now();
        let got = fresh
            .get_state_history_with(cfg, &antler::graph::HistoryQuery::limit(10))
            .await?;
        page.push(began.elapsed().as_secs_f64() * 1e3);
        if got.len() != 10.min(all.len()) {
            return Err(format!("a history page of 10 returned {}", got.len()).into());
        }
    }
    for _ in 0..5 {
        let fresh = workload_graph(o, store.reopen(o.store_config()).await?)?;
        let began = Instant::now();
        fresh
            .update_state(
                &cfg.clone().with_checkpoint(middle.clone()),
                Update::new(),
                None,
            )
            .await?;
        fork.push(began.elapsed().as_secs_f64() * 1e3);
    }
    Ok(HistoryCosts {
        invoke_ms: median(&invoke),
        page10_ms: median(&page),
        fork_ms: median(&fork),
    })
}

/// Size samples taken in this process: the tests check that a timed pass takes none.
#[cfg(test)]
static SAMPLES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Samples the stored bytes before each of the last 10 turns (and after the last one), on the
/// growth pass's scratch thread.
struct Growth {
    last_total: Option<u64>,
    deltas: Vec<f64>,
}

impl Growth {
    fn new() -> Self {
        Self {
            last_total: None,
            deltas: Vec::new(),
        }
    }

    async fn sample(&mut self, store: &Store, thread: &ThreadId) -> Result<(), BoxError> {
        #[cfg(test)]
        SAMPLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let total = store.stats(thread).await?.total();
        if let Some(prev) = self.last_total {
            self.deltas.push(total.saturating_sub(prev) as f64);
        }
        self.last_total = Some(total);
        Ok(())
    }
}

/// The window of newest checkpoints whose replay depth is measured: a full snapshot cycle
/// (about 3F + 4 checkpoints: the graph driver stores three per turn, the saver driver two)
/// when F is small, else the 64 newest. The deepest replay of a
/// cycle is just before its snapshot, so for T a multiple of F (or T < F, where the depth only
/// grows) the window holds the maximum.
fn replay_window(o: &Options) -> usize {
    (3 * o.frequency.get() as usize + 4)
        .min(3 * o.turns)
        .min(64)
}

/// How many of the thread's deepest checkpoints by their delta counters are walked besides
/// the window.
const DEEPEST_BY_COUNTERS: usize = 3;

/// The checkpoints whose replay depth is walked: the newest [`replay_window`], plus the
/// [`DEEPEST_BY_COUNTERS`] whose `messages` counters since the last snapshot are the highest
/// anywhere in the thread. The counters find the deepest replays without walking every
/// checkpoint (a snapshot cycle of F = 50 spans more checkpoints than the window, so for T not
/// a multiple of F the window alone missed the cycle's deepest); the walk, not the counter,
/// gives the figure.
async fn replay_candidates(
    saver: &dyn Saver,
    thread: &ThreadId,
    o: &Options,
) -> Result<Vec<antler::checkpoint::CheckpointTuple>, BoxError> {
    let mut out = saver
        .list(&ListQuery {
            limit: Some(replay_window(o)),
            ..ListQuery::thread(thread.clone())
        })
        .await?;
    let all = saver
        .list_without_values(&ListQuery::thread(thread.clone()))
        .await?;
    let channel = ChannelName::new(MESSAGES);
    let updates = |t: &antler::checkpoint::CheckpointTuple| {
        t.metadata
            .counters_since_delta_snapshot
            .get(&channel)
            .map_or(0, |c| c.updates)
    };
    let mut deepest: Vec<&antler::checkpoint::CheckpointTuple> = all.iter().collect();
    deepest.sort_by_key(|t| std::cmp::Reverse(updates(t)));
    for t in deepest.into_iter().take(DEEPEST_BY_COUNTERS) {
        if out
            .iter()
            .any(|w| w.config.checkpoint_id == t.config.checkpoint_id)
        {
            continue;
        }
        if let Some(full) = saver.get_tuple(&t.config).await? {
            out.push(full);
        }
    }
    Ok(out)
}

/// The workload's two messages of turn `t`.
fn turn_messages(t: usize) -> Vec<Message> {
    vec![
        Message::human(text(t, "human")).with_id(format!("m{t}h")),
        Message::ai(text(t, "ai")).with_id(format!("m{t}a")),
    ]
}

async fn run_async(o: &Options, allocator: crate::alloc::Settings) -> Result<(), BoxError> {
    let store = Store::open(o).await?;
    // The store is closed (its temporary file or schema removed) whether or not measuring
    // succeeded; a failed measurement is the error reported.
    let measured = measure(&store, o, allocator).await;
    let closed = store.close().await;
    let out = match (measured, closed) {
        (Ok(out), closed) => {
            closed?;
            out
        }
        (Err(e), Err(close)) => {
            eprintln!("antler bench write-amp: removing the store also failed: {close}");
            return Err(e);
        }
        (Err(e), Ok(())) => return Err(e),
    };
    let line = serde_json::Value::Object(out);
    if o.json {
        println!("{line}");
    } else {
        println!("{}", serde_json::to_string_pretty(&line)?);
    }
    Ok(())
}

/// Runs the configuration over `store` and renders its figures.
async fn measure(
    store: &Store,
    o: &Options,
    allocator: crate::alloc::Settings,
) -> Result<serde_json::Map<String, serde_json::Value>, BoxError> {
    let thread = ThreadId::new("write-amp");
    // A store given with `--db` may hold an earlier run's threads: its bytes would be counted
    // as this run's, so the run starts only on empty threads.
    for t in [&thread, &ThreadId::new("write-amp-growth")] {
        if store.stats(t).await?.total() > 0 {
            return Err(format!(
                "the store already holds thread {t} (an earlier run on this --db?): its bytes would count as this run's; use a new store or delete the thread"
            )
            .into());
        }
    }
    let mut m = match o.driver {
        Driver::Graph => drive_graph(store, &thread, o, Pass::Timed).await?,
        Driver::Saver => drive_saver(store, &thread, o, Pass::Timed).await?,
    };
    let mut sorted = m.invoke_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let last10: Vec<f64> = m.invoke_ms.iter().rev().take(10).copied().collect();
    let persisted = m.stats.total();
    let mut out = serde_json::Map::new();
    out.insert("saver".into(), json!(o.saver.as_str()));
    out.insert("mode".into(), json!(o.mode.as_str()));
    out.insert("snapshot_frequency".into(), json!(o.frequency.get()));
    out.insert("turns".into(), json!(o.turns));
    out.insert("driver".into(), json!(o.driver.as_str()));
    out.insert("allocator".into(), json!(allocator.as_str()));
    out.insert("persisted_bytes".into(), json!(persisted));
    out.insert("new_data_bytes".into(), json!(m.new_data_bytes));
    out.insert(
        "amplification".into(),
        json!(persisted as f64 / m.new_data_bytes.max(1) as f64),
    );
    out.insert("invoke_ms_mean".into(), json!(mean(&m.invoke_ms)));
    out.insert("invoke_ms_p50".into(), json!(percentile(&sorted, 50.0)));
    out.insert("invoke_ms_p99".into(), json!(percentile(&sorted, 99.0)));
    out.insert("invoke_ms_last10_mean".into(), json!(mean(&last10)));
    out.insert("get_state_ms_warm".into(), json!(median(&m.warm)));
    out.insert("get_state_ms_cold".into(), json!(median(&m.cold)));
    // The spread of the 20 cold reads: on a shared machine it moves by milliseconds from one
    // read to the next, so the median alone hides how often a read meets a latency target.
    let mut cold_sorted = m.cold.clone();
    cold_sorted.sort_by(f64::total_cmp);
    out.insert(
        "get_state_ms_cold_min".into(),
        json!(cold_sorted.first().copied().unwrap_or(0.0)),
    );
    out.insert(
        "get_state_ms_cold_p90".into(),
        json!(percentile(&cold_sorted, 90.0)),
    );
    // What opening each fresh saver took, outside the cold figure (PostgreSQL's open prepares
    // and runs the read statements once on its new connection).
    out.insert("saver_open_ms_cold".into(), json!(median(&m.cold_open)));
    // The stricter reading of "from a freshly opened saver": opening it and the read, each
    // cold read's sum (PostgreSQL's open makes and warms its connections).
    let with_open: Vec<f64> = m
        .cold
        .iter()
        .zip(&m.cold_open)
        .map(|(read, open)| read + open)
        .collect();
    out.insert(
        "get_state_ms_cold_incl_open".into(),
        json!(median(&with_open)),
    );
    if let Some(cs) = &m.cold_storage {
        out.insert("get_state_storage_ms_cold".into(), json!(median(cs)));
    }
    out.insert("get_state_peak_bytes".into(), json!(m.peak_bytes));
    out.insert("get_state_peak_source".into(), json!(m.peak_source));
    out.insert("max_replayed_writes".into(), json!(m.max_replayed));
    if !m.cold_replay.is_empty() {
        // The head may store a snapshot (T a multiple of F): the read that replays the most,
        // from a freshly opened saver, median of 20.
        out.insert(
            "get_state_ms_cold_max_replay".into(),
            json!(median(&m.cold_replay)),
        );
    }
    out.insert("head_replayed_writes".into(), json!(m.head_replayed));
    out.insert("max_replayed_window_checkpoints".into(), json!(m.window));
    if let Some(n) = m.snapshots {
        out.insert("snapshots".into(), json!(n));
    }
    out.insert(
        "persisted_breakdown".into(),
        json!({
            "checkpoint_records": m.stats.checkpoint_bytes,
            "metadata": m.stats.metadata_bytes,
            "blobs": m.stats.blob_bytes,
            "writes": m.stats.write_bytes,
            "message_bodies": m.stats.message_bytes,
            "rows": m.stats.rows,
        }),
    );
    out.insert(
        "compression".into(),
        json!("none (payload bytes are uncompressed)"),
    );
    if let Some((ms, scan)) = store.body_scan_cold(o.store_config(), &thread).await? {
        // The storage floor under a cold read: every body of the thread, fetched raw.
        out.insert("bodies_scan_ms_cold".into(), json!(ms));
        out.insert("bodies_scan_rows".into(), json!(scan.rows));
        out.insert("bodies_scan_bytes".into(), json!(scan.bytes));
    }
    store.sizes(&mut out, &thread).await?;
    if o.driver == Driver::Graph {
        // Last: these add turns and forks to the thread.
        let cfg = RunConfig::new(thread.as_str());
        let h = history_and_fork(o, store, store.saver().as_ref(), &cfg, &thread).await?;
        out.insert("invoke_ms_cold".into(), json!(h.invoke_ms));
        out.insert("history_page10_ms_cold".into(), json!(h.page10_ms));
        out.insert("fork_ms_cold".into(), json!(h.fork_ms));
    }
    // Growth per turn, from the same workload run again on a scratch thread of the same store,
    // sampled before and after each of its last 10 turns, then deleted. A sample reads the
    // size of the whole thread, and taken on the timed thread it slowed the next invoke (at
    // T = 2000 on PostgreSQL the last-10 mean was 6.8-8.0 ms with samples against 3.9-4.4 ms
    // without, interleaved); the workload is deterministic, so the scratch thread grows by
    // the same bytes per turn.
    let scratch = ThreadId::new("write-amp-growth");
    m.growth = match o.driver {
        Driver::Graph => drive_graph(store, &scratch, o, Pass::Growth).await?,
        Driver::Saver => drive_saver(store, &scratch, o, Pass::Growth).await?,
    }
    .growth;
    store.saver().delete_thread(&scratch).await?;
    out.insert("bytes_per_turn_mean".into(), json!(mean(&m.growth)));
    out.insert("bytes_per_turn_median".into(), json!(median(&m.growth)));
    Ok(out)
}

/// Which pass a driver runs: the timed one, which measures everything but the growth per
/// turn and samples no size while it runs, or the growth one, which only samples the thread's
/// size around each of its last 10 turns and returns right after its turns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Timed,
    Growth,
}

const MESSAGES_KEY: Key<Vec<Message>> = Key::from_static(MESSAGES);

/// The workload's graph: START → `turn` → END; `turn` appends the turn's two messages.
fn workload_graph(
    o: &Options,
    saver: Arc<dyn Saver>,
) -> Result<antler::graph::CompiledGraph, BoxError> {
    let mut g = StateGraph::new();
    let spec = match o.mode {
        ChannelMode::Full => ChannelSpec::messages(),
        ChannelMode::Delta => ChannelSpec::messages_delta(o.frequency.get()),
    };
    g.channel(&MESSAGES_KEY, spec)?;
    g.add_node("turn", |s: State, _c| async move {
        let t = s.get(&MESSAGES_KEY).map_or(0, Vec::len) / 2;
        Ok(Update::new().set(&MESSAGES_KEY, turn_messages(t)))
    });
    g.add_edge(antler::graph::START, "turn")
        .add_edge("turn", antler::graph::END);
    Ok(g.compile()?
        .with_checkpointer(Arc::new(SaverCheckpointer::new(saver))))
}

/// One `get_state` through a graph, checked against the expected messages.
async fn graph_state(
    graph: &antler::graph::CompiledGraph,
    cfg: &RunConfig,
    expected: &[Message],
    what: &str,
) -> Result<f64, BoxError> {
    let began = Instant::now();
    let snapshot = graph.get_state(cfg).await?.ok_or("no state")?;
    let ms = began.elapsed().as_secs_f64() * 1e3;
    if snapshot.values.get(&MESSAGES_KEY).map(Vec::as_slice) != Some(expected) {
        return Err(format!("{what} get_state differs from the expected messages").into());
    }
    Ok(ms)
}

async fn drive_graph(
    store: &Store,
    thread: &ThreadId,
    o: &Options,
    pass: Pass,
) -> Result<Measured, BoxError> {
    let saver = store.saver();
    let graph = workload_graph(o, saver.clone())?;
    let cfg = RunConfig::new(thread.as_str());
    let mut invoke_ms = Vec::with_capacity(o.turns);
    let mut new_data_bytes = 0u64;
    let mut growth = Growth::new();
    let mut expected = Vec::with_capacity(2 * o.turns);
    for t in 0..o.turns {
        if pass == Pass::Growth && t + 11 > o.turns {
            growth.sample(store, thread).await?;
        }
        let ms = turn_messages(t);
        for m in &ms {
            new_data_bytes += serde_json::to_vec(m)?.len() as u64;
        }
        expected.extend(ms);
        let began = Instant::now();
        graph.invoke(Update::new(), &cfg).await?;
        invoke_ms.push(began.elapsed().as_secs_f64() * 1e3);
    }
    if pass == Pass::Growth {
        growth.sample(store, thread).await?;
        return Ok(Measured::growth_only(growth.deltas));
    }
    let stats = store.stats(thread).await?;

    let mut warm = Vec::new();
    for _ in 0..20 {
        warm.push(graph_state(&graph, &cfg, &expected, "warm").await?);
    }
    // Cold: a freshly opened saver, a fresh checkpointer and graph each time (nothing cached).
    let mut cold = Vec::new();
    let mut cold_open = Vec::new();
    let mut peak_bytes = None;
    for i in 0..20 {
        let opened = Instant::now();
        let saver = store.reopen(o.store_config()).await?;
        cold_open.push(opened.elapsed().as_secs_f64() * 1e3);
        let fresh = workload_graph(o, saver)?;
        let peak = (i == 0).then(PeakRss::start);
        cold.push(graph_state(&fresh, &cfg, &expected, "cold").await?);
        if let Some(p) = peak {
            peak_bytes = p.bytes();
        }
    }
    // The database savers' figure comes from a fresh process (see `peak_in_fresh_process`);
    // the in-process one above (memory saver) reuses what earlier reads freed.
    let mut peak_source = "in-process";
    if let Some(bytes) = store.peak_in_fresh_process(o, thread)? {
        peak_bytes = bytes;
        peak_source = "fresh-process";
    }
    // Replay depth of the newest checkpoints, from the saver's history walk (the one the
    // runtime restores delta channels with).
    let window = replay_window(o);
    let (mut max_replayed, mut head_replayed) = (0, 0);
    // The newest checkpoint among those that replay the most.
    let mut deepest = None;
    if o.mode == ChannelMode::Delta {
        let recent = replay_candidates(saver.as_ref(), thread, o).await?;
        let channel = ChannelName::new(MESSAGES);
        for (i, tuple) in recent.iter().enumerate() {
            // The writes replayed, and how many messages the checkpoint holds: each of the
            // workload's writes appends two to its seed's.
            let (replayed, messages) = if tuple.checkpoint.channel_values.contains_key(&channel) {
                (0, None)
            } else {
                let h = saver
                    .delta_channel_history(&tuple.config, std::slice::from_ref(&channel))
                    .await?
                    .remove(&channel)
                    .unwrap_or_default();
                let seed = match &h.seed {
                    Some(antler::checkpoint::Blob::Messages(m)) => Some(m.items.len()),
                    Some(_) => None,
                    None => Some(0),
                };
                (h.writes.len(), seed.map(|n| n + 2 * h.writes.len()))
            };
            if replayed > max_replayed || deepest.is_none() {
                deepest = tuple.config.checkpoint_id.zip(messages);
            }
            max_replayed = max_replayed.max(replayed);
            if i == 0 {
                head_replayed = replayed;
            }
        }
    }
    // The head at a multiple of F stores a snapshot (T = 2000 with F = 10) and replays
    // nothing; every other head replays up to F - 1 writes, so the cold read of the checkpoint
    // that replays the most is measured too, the same way.
    let mut cold_replay = Vec::new();
    if let Some((id, messages)) = deepest.filter(|_| max_replayed > 0) {
        let at = RunConfig::new(thread.as_str())
            .with_checkpoint(antler::graph::CheckpointId::new(id.to_string()));
        for _ in 0..20 {
            let saver = store.reopen(o.store_config()).await?;
            let fresh = workload_graph(o, saver)?;
            // Exactly the workload's first messages up to the seed's and the replayed writes':
            // a replay that dropped a write, or applied one the checkpoint has not, differs.
            let want = expected
                .get(..messages)
                .ok_or("the replaying checkpoint holds more messages than the workload wrote")?;
            cold_replay.push(graph_state(&fresh, &at, want, "cold max-replay").await?);
        }
    }
    drop(graph);
    Ok(Measured {
        invoke_ms,
        new_data_bytes,
        growth: growth.deltas,
        stats,
        warm,
        cold,
        cold_storage: None,
        cold_open,
        peak_bytes,
        peak_source,
        max_replayed,
        head_replayed,
        window,
        snapshots: None,
        cold_replay,
    })
}

#[expect(
    clippy::too_many_lines,
    reason = "one linear benchmark script reads best top to bottom"
)]
async fn drive_saver(
    store: &Store,
    thread: &ThreadId,
    o: &Options,
    pass: Pass,
) -> Result<Measured, BoxError> {
    let saver_arc = store.saver();
    let saver: &dyn Saver = saver_arc.as_ref();
    let thread = thread.clone();
    let messages = ChannelName::new(MESSAGES);
    let start = ChannelName::new(START);
    let mut live = match o.mode {
        ChannelMode::Full => Live::Full(Vec::new()),
        ChannelMode::Delta => Live::Delta(DeltaMessages::new(o.frequency)),
    };
    let mut versions: BTreeMap<ChannelName, ChannelVersion> = BTreeMap::new();
    let mut seen_start: Option<ChannelVersion> = None;
    let mut max_version = 0u64;
    let mut head = CheckpointConfig::latest(thread.clone());
    let mut step: i64 = -1;
    let mut invoke_ms = Vec::with_capacity(o.turns);
    let mut new_data_bytes = 0u64;
    let mut growth = Growth::new();
    let mut snapshots = 0usize;

    for t in 0..o.turns {
        if pass == Pass::Growth && t + 11 > o.turns {
            growth.sample(store, &thread).await?;
        }
        let began = Instant::now();
        let run_id = RunId::new(uuid::Uuid::new_v4().to_string());
        let counters_meta = |meta: &mut CheckpointMetadata, live: &Live| {
            if let Live::Delta(d) = live {
                meta.channel_mode = Some(ChannelMode::Delta);
                delta::write_counters(meta, MESSAGES, d.counters());
            }
        };

        // 1. The input checkpoint: the input writes `__start__` only.
        max_version += 1;
        let v = ChannelVersion::new(max_version);
        versions.insert(start.clone(), v);
        let mut cp = Checkpoint::empty();
        cp.channel_values
            .insert(start.clone(), Blob::json(&json!({}))?);
        let mut new_versions: ChannelVersions = [(start.clone(), v)].into();
        if let Live::Delta(d) = &mut live
            && d.on_checkpoint(false).is_snapshot()
        {
            // A snapshot-only version bump, so the saver stores the blob.
            versions.insert(messages.clone(), v);
            new_versions.insert(messages.clone(), v);
            cp.channel_values
                .insert(messages.clone(), d.snapshot_blob()?);
            snapshots += 1;
        }
        cp.channel_versions = versions.clone();
        if let Some(s) = seen_start {
            cp.versions_seen
                .entry(NodeName::new("turn"))
                .or_default()
                .insert(start.clone(), s);
        }
        cp.updated_channels = Some(vec![start.clone()]);
        let mut meta = CheckpointMetadata {
            source: Some(CheckpointSource::Input),
            step,
            run_id: Some(run_id.clone()),
            ..Default::default()
        };
        counters_meta(&mut meta, &live);
        let input = saver.put(&head, cp, meta, &new_versions).await?;
        step += 1;

        // 2. The `turn` task appends two messages; its write is persisted as it finishes.
        let turn_messages = turn_messages(t);
        for m in &turn_messages {
            new_data_bytes += serde_json::to_vec(m)?.len() as u64;
        }
        let write_blob = match o.mode {
            ChannelMode::Full => Blob::json(&turn_messages)?,
            ChannelMode::Delta => DeltaWrite::from(turn_messages.clone()).to_blob()?,
        };
        let task_id = TaskId::new(uuid::Uuid::new_v4().to_string());
        saver
            .put_writes(
                &input,
                vec![(messages.clone(), write_blob)],
                &task_id,
                &TaskPath::new("~__pregel_pull, turn"),
            )
            .await?;

        // 3. The barrier: apply the step's writes.
        match &mut live {
            Live::Full(v) => {
                let state = std::mem::take(v);
                *v = merge_message_writes_owned(state, [MessageWrite::Messages(turn_messages)])?;
            }
            Live::Delta(d) => {
                d.update(vec![DeltaWrite::from(turn_messages)])?;
            }
        }

        // 4. The loop checkpoint: `messages` moved, `__start__` was consumed.
        seen_start = Some(v);
        max_version += 1;
        let v2 = ChannelVersion::new(max_version);
        versions.insert(messages.clone(), v2);
        versions.insert(start.clone(), v2);
        let mut cp = Checkpoint::empty();
        cp.channel_versions = versions.clone();
        cp.versions_seen
            .entry(NodeName::new("turn"))
            .or_default()
            .insert(start.clone(), v);
        cp.updated_channels = Some(vec![messages.clone()]);
        let new_versions: ChannelVersions = [(messages.clone(), v2), (start.clone(), v2)].into();
        match &mut live {
            Live::Full(list) => {
                cp.channel_values
                    .insert(messages.clone(), Blob::json(list)?);
            }
            Live::Delta(d) => {
                if d.on_checkpoint(true).is_snapshot() {
                    cp.channel_values
                        .insert(messages.clone(), d.snapshot_blob()?);
                    snapshots += 1;
                }
            }
        }
        let mut meta = CheckpointMetadata {
            source: Some(CheckpointSource::Loop),
            step,
            run_id: Some(run_id),
            ..Default::default()
        };
        counters_meta(&mut meta, &live);
        head = saver.put(&input, cp, meta, &new_versions).await?;
        step += 1;
        invoke_ms.push(began.elapsed().as_secs_f64() * 1e3);
    }
    if pass == Pass::Growth {
        growth.sample(store, &thread).await?;
        return Ok(Measured::growth_only(growth.deltas));
    }
    let stats = store.stats(&thread).await?;

    // get_state, warm: the same saver, median of 20.
    let mut warm = Vec::new();
    for _ in 0..20 {
        let began = Instant::now();
        let read = get_state(saver, &thread, o).await?;
        warm.push(began.elapsed().as_secs_f64() * 1e3);
        if read.value.as_slice() != live.value() {
            return Err("warm get_state differs from the live state".into());
        }
    }
    // get_state, cold: a freshly opened saver each time (memory: the same saver, no cold state exists).
    let mut cold = Vec::new();
    let mut cold_storage = Vec::new();
    let mut cold_open = Vec::new();
    let mut head_replayed = 0;
    let mut peak_bytes = None;
    for i in 0..20 {
        let opened = Instant::now();
        let fresh = store.reopen(o.store_config()).await?;
        cold_open.push(opened.elapsed().as_secs_f64() * 1e3);
        let s: &dyn Saver = fresh.as_ref();
        let peak = (i == 0).then(PeakRss::start);
        let began = Instant::now();
        let read = get_state(s, &thread, o).await?;
        cold.push(began.elapsed().as_secs_f64() * 1e3);
        cold_storage.push(read.storage_ms);
        if let Some(p) = peak {
            peak_bytes = p.bytes();
        }
        head_replayed = read.replayed;
        if read.value.as_slice() != live.value() {
            return Err("cold get_state differs from the live state".into());
        }
    }
    // Replay depth, measured by walking the history of each of the newest checkpoints and of
    // the deepest by their counters.
    let window = replay_window(o);
    let recent = replay_candidates(saver, &thread, o).await?;
    let mut max_replayed = 0;
    for tuple in &recent {
        let read = materialize(saver, tuple, o).await?;
        max_replayed = max_replayed.max(read.replayed);
    }

    Ok(Measured {
        invoke_ms,
        new_data_bytes,
        growth: growth.deltas,
        stats,
        warm,
        cold,
        cold_storage: Some(cold_storage),
        cold_open,
        peak_bytes,
        peak_source: "in-process",
        max_replayed,
        head_replayed,
        window,
        snapshots: Some(snapshots),
        cold_replay: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both drivers run the workload on memory and SQLite, read back the exact state warm and
    /// cold (a mismatch is an error inside the driver), count the same new data, and replay at
    /// most F − 1 writes for any of the newest checkpoints in delta mode.
    #[test]
    fn both_drivers_run_the_workload_and_bound_replay() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for saver in ["memory", "sqlite"] {
            let mut new_data = Vec::new();
            for driver in ["graph", "saver"] {
                for mode in ["delta", "full"] {
                    let args = [
                        "--driver",
                        driver,
                        "--saver",
                        saver,
                        "--mode",
                        mode,
                        "--turns",
                        "23",
                        "--snapshot-frequency",
                        "4",
                    ];
                    let o = Options::parse(&args).unwrap().unwrap();
                    let m = rt
                        .block_on(async {
                            let store = Store::open(&o).await?;
                            let thread = ThreadId::new("t");
                            let mut m = match o.driver {
                                Driver::Graph => {
                                    drive_graph(&store, &thread, &o, Pass::Timed).await?
                                }
                                Driver::Saver => {
                                    drive_saver(&store, &thread, &o, Pass::Timed).await?
                                }
                            };
                            // The timed pass samples no size; the growth pass samples
                            // around each of its last 10 turns.
                            let samples = || SAMPLES.load(std::sync::atomic::Ordering::Relaxed);
                            assert_eq!(samples(), 0, "{args:?}: the timed pass sampled");
                            let scratch = ThreadId::new("t-growth");
                            m.growth = match o.driver {
                                Driver::Graph => {
                                    drive_graph(&store, &scratch, &o, Pass::Growth).await?
                                }
                                Driver::Saver => {
                                    drive_saver(&store, &scratch, &o, Pass::Growth).await?
                                }
                            }
                            .growth;
                            assert_eq!(samples(), 11, "{args:?}");
                            SAMPLES.store(0, std::sync::atomic::Ordering::Relaxed);
                            if o.driver == Driver::Graph {
                                let cfg = RunConfig::new("t");
                                let h = history_and_fork(
                                    &o,
                                    &store,
                                    store.saver().as_ref(),
                                    &cfg,
                                    &thread,
                                )
                                .await?;
                                assert!(h.invoke_ms > 0.0 && h.page10_ms > 0.0 && h.fork_ms > 0.0);
                            }
                            // The raw body scan reads every body the workload stored (two per
                            // turn; the saver driver stores full-mode lists as whole values, no
                            // bodies); the memory saver has none to scan.
                            let scan = store.body_scan_cold(o.store_config(), &thread).await?;
                            match (saver, scan) {
                                ("memory", None) => {}
                                ("sqlite", Some((_, scan)))
                                    if driver == "saver" && mode == "full" =>
                                {
                                    assert_eq!(scan.rows, 0, "{args:?}");
                                }
                                ("sqlite", Some((ms, scan))) => {
                                    assert!(ms > 0.0);
                                    assert!(scan.rows >= 2 * 23, "{args:?}: {scan:?}");
                                    assert!(scan.bytes > 400 * scan.rows, "{args:?}: {scan:?}");
                                }
                                other => panic!("{args:?}: {other:?}"),
                            }
                            store.close().await?;
                            Ok::<_, BoxError>(m)
                        })
                        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
                    assert_eq!(m.invoke_ms.len(), 23);
                    assert_eq!(m.growth.len(), 10, "{args:?}");
                    new_data.push(m.new_data_bytes);
                    if mode == "delta" {
                        assert!(
                            (1..4).contains(&m.max_replayed),
                            "{args:?}: {}",
                            m.max_replayed
                        );
                    } else {
                        assert_eq!(m.max_replayed, 0);
                    }
                }
            }
            assert!(new_data.windows(2).all(|w| w[0] == w[1]), "{new_data:?}");
        }
    }

    #[test]
    fn text_is_400_ascii_chars_with_the_prefix() {
        let h = text(3, "human");
        assert_eq!(h.len(), 400);
        assert!(h.starts_with("turn 3 human: victor whiskey xray"));
        let a = text(0, "ai");
        assert!(a.starts_with("turn 0 ai: november oscar"));
        assert!(a.is_ascii());
    }
}
