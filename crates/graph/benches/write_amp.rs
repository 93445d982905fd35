//! The write-amplification workload (`shared/bench/write-amp.md`) through the real graph:
//! START → `turn` → END, two 400-character messages per turn, on the memory and SQLite savers,
//! `messages` in full mode and in delta mode. Prints one JSON object per configuration.
//!
//! Each invoke's input updates no field (`{}`, as the workload says); `WRITE_AMP_INPUT=tick`
//! instead writes a counter channel nobody reads (the variant measured before empty inputs ran).
//! `WRITE_AMP_TURNS` (default 200) sets T, `WRITE_AMP_ONLY=memory-delta,sqlite-full` picks configurations;
//! `cargo bench -p antler-graph --bench write_amp`. `breakdown_per_turn` divides each stored
//! category by T.
#![expect(clippy::print_stdout, reason = "a benchmark report")]

use std::sync::Arc;
use std::time::Instant;

use antler_checkpoint::{
    MemorySaver, PostgresOptions, PostgresSaver, Saver, SnapshotFrequency, SqliteSaver,
    StorageStats, StoreConfig, ThreadId,
};
use antler_graph::{ChannelSpec, Key, RunConfig, SaverCheckpointer, State, StateGraph, Update};
use antler_state_reducers::{Message, MessageType};

const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
const TICK: Key<i64> = Key::from_static("tick");
const WORDS: [&str; 26] = [
    "alfa", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
];

fn text(t: usize, role: &str) -> String {
    let off = if role == "human" { 7 * t } else { 7 * t + 13 };
    let mut s = format!("turn {t} {role}:");
    let mut k = 0;
    while s.len() < 400 {
        s.push(' ');
        s.push_str(WORDS[(off + k) % 26]);
        k += 1;
    }
    s.truncate(400);
    s
}

fn message(t: usize, role: &str) -> Message {
    let kind = if role == "human" {
        MessageType::Human
    } else {
        MessageType::Ai
    };
    let mut m = Message::new(kind, text(t, role));
    m.id = Some(format!("m{t}{}", &role[..1]));
    m
}

fn graph(delta: Option<u32>) -> StateGraph {
    let mut g = StateGraph::new();
    let spec = match delta {
        Some(f) => ChannelSpec::messages_delta(f),
        None => ChannelSpec::messages(),
    };
    g.channel(&MESSAGES, spec).expect("declared once");
    // The input updates no field of interest: a counter nobody reads.
    g.channel(&TICK, ChannelSpec::last_value())
        .expect("declared once");
    g.add_node("turn", |s: State, _c| async move {
        let t = s.get(&MESSAGES).map_or(0, Vec::len) / 2;
        Ok(Update::new().set(&MESSAGES, vec![message(t, "human"), message(t, "ai")]))
    });
    g.add_edge("__start__", "turn").add_edge("turn", "__end__");
    g
}

/// The saver under test, kept typed for its storage statistics.
#[derive(Clone)]
enum Store {
    Memory(Arc<MemorySaver>),
    Sqlite(Arc<SqliteSaver>, std::path::PathBuf),
    Postgres(Arc<PostgresSaver>, PostgresOptions),
}

impl Store {
    fn saver(&self) -> Arc<dyn Saver> {
        match self {
            Self::Memory(s) => s.clone(),
            Self::Sqlite(s, _) => s.clone(),
            Self::Postgres(s, _) => s.clone(),
        }
    }
    async fn stats(&self, thread: &ThreadId) -> StorageStats {
        match self {
            Self::Memory(s) => s.storage_stats(thread).await,
            Self::Sqlite(s, _) => s.storage_stats(thread).await,
            Self::Postgres(s, _) => s.storage_stats(thread).await,
        }
        .expect("stats")
    }
    /// A second saver on the same store, opened from scratch (the memory saver is shared).
    async fn reopen(&self, config: StoreConfig) -> Arc<dyn Saver> {
        match self {
            Self::Memory(s) => s.clone(),
            Self::Sqlite(_, path) => {
                Arc::new(SqliteSaver::open(path, config).await.expect("reopens"))
            }
            Self::Postgres(_, o) => Arc::new(
                PostgresSaver::connect(o.clone(), config)
                    .await
                    .expect("reconnects"),
            ),
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn main() {
    let turns: usize = std::env::var("WRITE_AMP_TURNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("antler-write-amp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let only = std::env::var("WRITE_AMP_ONLY").unwrap_or_default();
    let tick_input = std::env::var("WRITE_AMP_INPUT").is_ok_and(|v| v == "tick");
    // PostgreSQL runs when `WRITE_AMP_PG_URL` is set (each configuration in a fresh schema).
    let pg_url = std::env::var("WRITE_AMP_PG_URL").ok();
    for saver_kind in ["memory", "sqlite", "postgres"] {
        if saver_kind == "postgres" && pg_url.is_none() {
            continue;
        }
        for delta in [None, Some(10u32)] {
            let name = format!(
                "{saver_kind}-{}",
                if delta.is_some() { "delta" } else { "full" }
            );
            if !only.is_empty() && !only.split(',').any(|o| o == name) {
                continue;
            }
            rt.block_on(async {
                let config = match delta {
                    Some(f) => StoreConfig::delta(SnapshotFrequency::new(f).expect("positive")),
                    None => StoreConfig::full(),
                };
                let path = dir.join(format!(
                    "{saver_kind}-{}.db",
                    delta.map_or("full".to_owned(), |f| format!("delta{f}"))
                ));
                let store = match saver_kind {
                    "memory" => Store::Memory(Arc::new(MemorySaver::new(config))),
                    "sqlite" => Store::Sqlite(
                        Arc::new(SqliteSaver::open(&path, config).await.expect("SQLite opens")),
                        path.clone(),
                    ),
                    _ => {
                        let o = PostgresOptions::new(pg_url.clone().unwrap_or_default()).with_schema(
                            format!("antler_graph_bench_{}", std::process::id()) + &name.replace('-', "_"),
                        );
                        Store::Postgres(
                            Arc::new(PostgresSaver::connect(o.clone(), config).await.expect("PostgreSQL connects")),
                            o,
                        )
                    }
                };
                let saver = store.saver();
                let graph = graph(delta)
                    .compile()
                    .expect("valid")
                    .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
                let cfg = RunConfig::new("bench");
                let mut lat = Vec::with_capacity(turns);
                let mut new_data = 0usize;
                let thread = ThreadId::new("bench");
                let mut growth = Vec::new();
                let mut last_total = None;
                for t in 0..turns {
                    if t + 11 > turns {
                        let total = store.stats(&thread).await.total();
                        if let Some(prev) = last_total {
                            growth.push((total - prev) as f64);
                        }
                        last_total = Some(total);
                    }
                    new_data += serde_json::to_vec(&message(t, "human")).map_or(0, |v| v.len());
                    new_data += serde_json::to_vec(&message(t, "ai")).map_or(0, |v| v.len());
                    let start = Instant::now();
                    let input = if tick_input {
                        Update::new().set(&TICK, t as i64)
                    } else {
                        Update::new()
                    };
                    graph.invoke(input, &cfg).await.expect("turn runs");
                    lat.push(start.elapsed().as_secs_f64() * 1e3);
                }
                let stats = store.stats(&thread).await;
                let warm = {
                    let start = Instant::now();
                    graph.get_state(&cfg).await.expect("state");
                    start.elapsed().as_secs_f64() * 1e3
                };
                let cold = {
                    // A freshly opened saver (SQLite, PostgreSQL) and a fresh adapter: nothing cached.
                    let fresh = store.reopen(config).await;
                    let g2 = self::graph(delta)
                        .compile()
                        .expect("valid")
                        .with_checkpointer(Arc::new(SaverCheckpointer::new(fresh)));
                    let start = Instant::now();
                    g2.get_state(&cfg).await.expect("state");
                    start.elapsed().as_secs_f64() * 1e3
                };
                if let Some(prev) = last_total {
                    growth.push((stats.total() - prev) as f64);
                }
                let mut growth_sorted = growth.clone();
                growth_sorted.sort_by(f64::total_cmp);
                let per_turn = |b: u64| b as f64 / turns as f64;
                let mut sorted = lat.clone();
                sorted.sort_by(f64::total_cmp);
                let last10 = mean(&lat[lat.len().saturating_sub(10)..]);
                let first10 = mean(&lat[..lat.len().min(10)]);
                println!(
                    "{}",
                    serde_json::json!({
                        "saver": saver_kind, "mode": if delta.is_some() { "delta" } else { "full" },
                        "snapshot_frequency": delta, "turns": turns,
                        "persisted_bytes": stats.total(), "new_data_bytes": new_data,
                        "breakdown": {"checkpoint": stats.checkpoint_bytes, "metadata": stats.metadata_bytes,
                                      "blobs": stats.blob_bytes, "writes": stats.write_bytes, "messages": stats.message_bytes},
                        "breakdown_per_turn": {"checkpoint": per_turn(stats.checkpoint_bytes), "metadata": per_turn(stats.metadata_bytes),
                                      "blobs": per_turn(stats.blob_bytes), "writes": per_turn(stats.write_bytes), "messages": per_turn(stats.message_bytes)},
                        "amplification": stats.total() as f64 / new_data as f64,
                        "input": if tick_input { "tick" } else { "{}" },
                        "bytes_per_turn_mean": mean(&growth),
                        "bytes_per_turn_median": growth_sorted.get(growth_sorted.len() / 2).copied().unwrap_or(0.0),
                        "invoke_ms_p99": sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)],
                        "invoke_ms_mean": mean(&lat), "invoke_ms_p50": sorted[sorted.len() / 2],
                        "invoke_ms_first10_mean": first10, "invoke_ms_last10_mean": last10,
                        "get_state_ms_warm": warm, "get_state_ms_cold": cold,
                    })
                );
            });
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
