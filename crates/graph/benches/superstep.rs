//! Criterion benchmarks of the super-step loop: per-step overhead of a 3-node chain without a
//! checkpointer, and a 100-way `Send` fan-out with a join.
//!
//! Each invoke is timed whole; the throughput criterion reports is per super-step for the
//! chain (4 per invoke) and per task for the fan-out (103 per invoke), so its inverse is the
//! time per step and per task. Run with `cargo bench -p antler-graph --bench superstep`.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented public function"
)]

use std::hint::black_box;

use antler_graph::{
    ChannelSpec, Command, Key, NodeOptions, RunConfig, Send, State, StateGraph, Update, node_fn,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const N: Key<i64> = Key::from_static("n");
const ITEM: Key<i64> = Key::from_static("item");

fn sum() -> ChannelSpec<i64> {
    ChannelSpec::reducer(
        "sum",
        || 0,
        |a: &i64, w: &[i64]| Ok(a + w.iter().sum::<i64>()),
    )
}

fn chain() -> antler_graph::CompiledGraph {
    let mut g = StateGraph::new();
    g.channel(&N, sum()).expect("declared once");
    for name in ["a", "b", "c"] {
        g.add_node(name, |_s: State, _c| async { Ok(Update::new().set(&N, 1)) });
    }
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", "__end__");
    g.compile().expect("valid graph")
}

fn fan_out(width: i64) -> antler_graph::CompiledGraph {
    let mut g = StateGraph::new();
    g.channel(&N, sum()).expect("declared once");
    g.channel(&ITEM, ChannelSpec::packet_only())
        .expect("declared once");
    let split = node_fn(move |_s: State, _c| async move {
        let mut cmd = Command::new();
        for i in 0..width {
            cmd = cmd.goto(Send::new("work").with(&ITEM, i));
        }
        Ok(cmd)
    });
    g.add_node_with(
        "split",
        split,
        NodeOptions {
            destinations: vec!["work".into()],
            ..NodeOptions::default()
        },
    );
    g.add_node("work", |s: State, _c| async move {
        Ok(Update::new().set(&N, *s.get(&ITEM).unwrap_or(&0)))
    });
    g.add_node("join", |_s: State, _c| async { Ok(Update::new()) });
    g.add_edge("__start__", "split")
        .add_edge("work", "join")
        .add_edge("join", "__end__");
    g.compile().expect("valid graph")
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let cfg = RunConfig::new("bench");
    let graph = chain();
    // What is timed must still do the work: a run that dropped a step would read as faster.
    assert_eq!(result(&rt, &graph, &cfg), 3, "each of a, b and c adds 1");
    // 4 super-steps per invoke: __start__, a, b, c.
    let mut steps = c.benchmark_group("chain3_no_saver");
    steps.throughput(Throughput::Elements(4));
    steps.bench_function("invoke(4 steps)", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    graph
                        .invoke(Update::new().set(&N, 0), &cfg)
                        .await
                        .expect("runs"),
                )
            })
        })
    });
    steps.finish();
    let graph = fan_out(100);
    assert_eq!(
        result(&rt, &graph, &cfg),
        (0..100).sum::<i64>(),
        "every packet's task adds its item"
    );
    // 4 super-steps, 103 tasks per invoke: __start__, split, 100 × work, join.
    let mut tasks = c.benchmark_group("send_fanout100_join");
    tasks.throughput(Throughput::Elements(103));
    tasks.bench_function("invoke(103 tasks)", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    graph
                        .invoke(Update::new().set(&N, 0), &cfg)
                        .await
                        .expect("runs"),
                )
            })
        })
    });
    tasks.finish();
}

/// `n` after one invoke of `graph`.
fn result(
    rt: &tokio::runtime::Runtime,
    graph: &antler_graph::CompiledGraph,
    cfg: &RunConfig,
) -> i64 {
    let out = rt
        .block_on(graph.invoke(Update::new().set(&N, 0), cfg))
        .expect("runs");
    *out.values.get(&N).expect("n is set")
}

criterion_group!(group, benches);
criterion_main!(group);
