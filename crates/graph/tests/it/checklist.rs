//! One test per rule of runtime-spec §10 that the runtime owns (rules 1–4, 9, 10; 5 without the
//! delta snapshot part), named after the rule, plus the loop rules of §2 they rest on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use antler_graph::{
    ChannelSpec, Command, Context, Error, Input, Key, NodeError, RunConfig, State, TaskStatus,
    Update,
};
use serde_json::json;
use tokio::sync::Notify;

use crate::common::{
    LAST, LOG, N, Op, Recording, graph, log, logging_nodes, memory, only_subgraph,
};

fn add(
    name: &'static str,
) -> impl Fn(State, Context) -> std::future::Ready<Result<Update, NodeError>> {
    move |_s, _c| std::future::ready(Ok(Update::new().set(&LOG, log(&[name]))))
}

/// START → `a` (which logs "a") → END.
fn start_a_end() -> antler_graph::StateGraph {
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    g
}

/// Rule 1: writes of step N are stored against the checkpoint step N started from.
#[tokio::test]
async fn rule_01_writes_of_a_step_go_to_the_checkpoint_it_started_from() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let store = Arc::new(Recording::default());
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    let ops = store.ops();
    let mut last_put = None;
    let mut checked = 0;
    for op in &ops {
        match op {
            Op::Put(r) => last_put = Some(r.id.clone()),
            Op::Writes { checkpoint, .. } => {
                assert_eq!(
                    Some(checkpoint),
                    last_put.as_ref(),
                    "writes attach to the step's starting checkpoint"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 3, "__start__, a and b each persisted their writes");
}

/// Rule 2: one new version per step, shared by every changed channel, above the global maximum;
/// clearing an ephemeral value is a change; versions_seen records pre-write versions.
#[tokio::test]
async fn rule_02_one_new_version_per_step_and_clearing_is_a_change() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])).set(&N, 1))
    });
    g.add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let store = Arc::new(Recording::default());
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    let puts = store.puts();
    for w in puts.windows(2) {
        let (prev, cur) = (&w[0], &w[1]);
        let prev_max = prev.versions.values().copied().max().unwrap_or(0);
        let moved: Vec<u64> = cur
            .versions
            .iter()
            .filter(|(c, v)| prev.versions.get(*c) != Some(*v))
            .map(|(_, v)| *v)
            .collect();
        assert!(!moved.is_empty());
        assert!(
            moved.iter().all(|v| *v == moved[0]),
            "one version for every channel changed in the step"
        );
        assert!(moved[0] > prev_max, "above the global maximum");
    }
    // Step of `a` (puts[2]): a's trigger `branch:to:a` was cleared by update([]) — a version bump without a value.
    let step_a = &puts[2];
    assert!(step_a.versions["branch:to:a"] > puts[1].versions["branch:to:a"]);
    assert!(!step_a.values.contains_key("branch:to:a"));
    // versions_seen[a] holds the version of its trigger before the step's writes.
    assert_eq!(
        step_a.versions_seen["a"]["branch:to:a"],
        puts[1].versions["branch:to:a"]
    );
}

/// Rule 3: tasks never see each other's writes; reducers see writes in task-path order, not completion order.
#[tokio::test]
async fn rule_03_step_local_visibility_and_task_path_order() {
    let b_done = Arc::new(Notify::new());
    let mut g = graph();
    let signal = b_done.clone();
    // `a` finishes last (it waits for `b`), but its writes reach the reducer first.
    g.add_node("a", move |s: State, _c| {
        let signal = signal.clone();
        async move {
            signal.notified().await;
            Ok(Update::new().set(
                &LOG,
                log(&[&format!("a saw {}", s.get(&LOG).map_or(0, Vec::len))]),
            ))
        }
    });
    let signal = b_done.clone();
    g.add_node("b", move |s: State, _c| {
        let signal = signal.clone();
        async move {
            signal.notify_one();
            Ok(Update::new().set(
                &LOG,
                log(&[&format!("b saw {}", s.get(&LOG).map_or(0, Vec::len))]),
            ))
        }
    });
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    let graph = memory(g);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a saw 1", "b saw 1"])
    );
}

/// START → a and START → b1 → b2, both into `d`, a deferred node (it waits for the longer branch).
fn deferred_join() -> antler_graph::StateGraph {
    let mut g = graph();
    g.add_node("a", add("a"))
        .add_node("b1", add("b1"))
        .add_node("b2", add("b2"));
    g.add_node_with(
        "d",
        Arc::new(Fn2(|_s: State| {
            Ok(Update::new().set(&LOG, log(&["d"])).into())
        })),
        antler_graph::NodeOptions {
            defer: true,
            ..Default::default()
        },
    );
    g.add_edge("__start__", "a")
        .add_edge("__start__", "b1")
        .add_edge("b1", "b2");
    g.add_edge("a", "d")
        .add_edge("b2", "d")
        .add_edge("d", "__end__");
    g
}

/// Rule 4: `update([])` runs only on real steps, `finish()` only when nothing will trigger;
/// a deferred node therefore runs once, after the longer branch finished.
#[tokio::test]
async fn rule_04_finish_only_when_nothing_triggers_releases_deferred_node() {
    let g = deferred_join();
    let graph = memory(g);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b1", "b2", "d"])
    );
}

/// Rule 4, NULL-task batches: a command's update applied to a paused head neither updates the
/// unwritten channels nor finishes them, so a deferred node waiting for the longer branch is not
/// released early (it would run beside that branch and then again after it).
#[tokio::test]
async fn rule_04_a_commands_update_does_not_release_a_deferred_node() {
    let mut g = deferred_join();
    g.interrupt_before(["b2"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused, "stopped before b2, with d waiting");
    let out = graph
        .invoke(
            Command::new().update(Update::new().set(&LOG, log(&["cmd"]))),
            &cfg,
        )
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b1", "cmd", "b2", "d"])
    );
}

struct Fn2<F>(F);
#[async_trait::async_trait]
impl<F: Fn(State) -> Result<Command, NodeError> + Send + Sync + 'static> antler_graph::Node
    for Fn2<F>
{
    async fn run(&self, input: State, _ctx: Context) -> Result<Command, NodeError> {
        (self.0)(input)
    }
}

/// Rule 5 (runtime part): one Overwrite per step; it drops the step's other writes to the channel.
#[tokio::test]
async fn rule_05_overwrite_one_per_step_drops_other_writes() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().overwrite(&LOG, log(&["reset"])))
    });
    g.add_node("b", add("b"));
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    let graph = memory(g);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["reset"]));

    let mut g = graph_with_two_overwrites();
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    let err = memory(g)
        .invoke(Update::new().set(&N, 1), &RunConfig::new("t"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::MultipleOverwrites { ref channel } if channel == "log"),
        "{err}"
    );
}

fn graph_with_two_overwrites() -> antler_graph::StateGraph {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().overwrite(&LOG, log(&["x"])))
    });
    g.add_node("b", |_s, _c| async {
        Ok(Update::new().overwrite(&LOG, log(&["y"])))
    });
    g
}

/// Two writes to a last-value channel in one step are an `InvalidConcurrentUpdate` with the reference text.
#[tokio::test]
async fn last_value_concurrent_writes_are_invalid_update() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LAST, "a".to_owned()))
    });
    g.add_node("b", |_s, _c| async {
        Ok(Update::new().set(&LAST, "b".to_owned()))
    });
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let err = graph
        .invoke(Update::new().set(&N, 1), &cfg)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), antler_graph::ErrorKind::InvalidUpdate);
    assert!(
        err.to_string()
            .starts_with("At key 'last': Can receive only one value per step.")
    );
    // No checkpoint for the failed step; both tasks' writes stay pending (status done). The
    // head cannot show them applied (they are what failed), so it shows the checkpoint as
    // stored, with both tasks still next, instead of failing the read.
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.step, 0);
    assert!(snap.tasks.iter().all(|t| t.status == TaskStatus::Done));
    assert_eq!(
        snap.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(snap.values.get(&LAST), None);
}

/// Rule 9, the in-process store: a task's regular writes are insert-if-absent by position (a
/// second put of the same task keeps the first values), control writes are upserts at their
/// fixed negative index (the last error wins); only the four of runtime-spec §4.2 are control
/// writes there, as in the savers (`__error_source_node__` is kept first-wins).
#[tokio::test]
async fn rule_09_the_in_process_store_keeps_first_writes_and_upserts_control_writes() {
    use antler_graph::{Checkpointer, MemoryCheckpointer, Scope, TaskId};
    let store = Arc::new(MemoryCheckpointer::new());
    let scope = Scope::root("t");
    // A checkpoint to attach writes to: the head of a short run.
    let mut g = graph();
    g.add_node("a", add("a")).add_edge("__start__", "a");
    let g = g
        .compile()
        .expect("valid graph")
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    g.invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let head = store.get_tuple(&scope, None).await.unwrap().unwrap();
    let id = head.checkpoint.id.clone();
    let task = TaskId::new("task-1");
    // The same task's writes put twice, at the same positions.
    for (log_item, error, node) in [
        ("first", "one", "first-node"),
        ("second", "two", "second-node"),
    ] {
        store
            .put_writes(
                &scope,
                &id,
                &task,
                "~p",
                vec![
                    ("log".to_owned(), json!([log_item])),
                    ("__error__".to_owned(), json!({"message": error})),
                    ("__error_source_node__".to_owned(), json!(node)),
                ],
            )
            .await
            .unwrap();
    }
    let pending = store
        .get_tuple(&scope, Some(&id))
        .await
        .unwrap()
        .unwrap()
        .pending_writes;
    let mine: Vec<(&str, &serde_json::Value)> = pending
        .iter()
        .filter(|w| w.task_id == task)
        .map(|w| (w.channel.as_str(), &w.value))
        .collect();
    assert_eq!(
        mine,
        vec![
            ("__error__", &json!({"message": "two"})),
            ("log", &json!(["first"])),
            ("__error_source_node__", &json!("first-node")),
        ]
    );
}

/// Rule 9: deterministic task ids + insert-if-absent writes: resuming after a failure re-runs only
/// the failed task, and the reducer still sees the writes in task-path order.
#[tokio::test]
async fn rule_09_resume_after_error_reruns_only_unfinished_tasks() {
    let runs_a = Arc::new(AtomicUsize::new(0));
    let runs_b = Arc::new(AtomicUsize::new(0));
    let mut g = graph();
    let ra = runs_a.clone();
    g.add_node("a", move |_s, _c| {
        ra.fetch_add(1, Ordering::SeqCst);
        async { Ok(Update::new().set(&LOG, log(&["a"]))) }
    });
    let rb = runs_b.clone();
    g.add_node("b", move |_s, _c| {
        let first = rb.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                return Err(NodeError::failed("boom"));
            }
            Ok(Update::new().set(&LOG, log(&["b"])))
        }
    });
    g.add_edge("__start__", "b").add_edge("__start__", "a");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let err = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NodeFailed { ref node, .. } if node.as_str() == "b"));
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    let status: Vec<_> = snap
        .tasks
        .iter()
        .map(|t| (t.node.as_str().to_owned(), t.status))
        .collect();
    assert_eq!(
        status,
        vec![
            ("a".into(), TaskStatus::Done),
            ("b".into(), TaskStatus::Error)
        ]
    );
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(
        runs_a.load(Ordering::SeqCst),
        1,
        "finished sibling is not re-run"
    );
    assert_eq!(runs_b.load(Ordering::SeqCst), 2);
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
}

/// Fault: a panicking node among parallel siblings is caught, becomes an error, and resume re-runs only it.
#[tokio::test]
async fn fault_panicking_sibling_is_caught_and_resume_reruns_only_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let runs_a = Arc::new(AtomicUsize::new(0));
    let mut g = graph();
    let ra = runs_a.clone();
    g.add_node("a", move |_s, _c| {
        ra.fetch_add(1, Ordering::SeqCst);
        async move { Ok(Update::new().set(&LOG, log(&["a"]))) }
    });
    let r = runs.clone();
    g.add_node("z", move |_s, _c| {
        let first = r.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            assert!(!first, "deliberate panic in z");
            Ok(Update::new().set(&LOG, log(&["z"])))
        }
    });
    g.add_edge("__start__", "z").add_edge("__start__", "a");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let err = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NodePanicked { ref node, ref message } if node.as_str() == "z" && message.contains("deliberate"))
    );
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "z"]));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        runs_a.load(Ordering::SeqCst),
        1,
        "the sibling that finished before the panic is not re-run"
    );
}

/// Fault: a router that panics (it runs after its node's task, outside it) is caught and
/// stored as that task's panic, siblings keep their writes, and a resume re-runs only it;
/// a reducer that panics fails the step with a reducer error. Before, both panics unwound
/// through `invoke` into the caller.
#[tokio::test]
async fn a_panicking_router_or_reducer_is_caught() {
    let routes = Arc::new(AtomicUsize::new(0));
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    let r = routes.clone();
    g.add_router("a", None, move |_s: &State| {
        assert!(
            r.fetch_add(1, Ordering::SeqCst) > 0,
            "deliberate panic in a's router"
        );
        vec!["__end__".into()]
    });
    g.add_edge("b", "__end__");
    let routed = memory(g);
    let cfg = RunConfig::new("t");
    let err = routed
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NodePanicked { ref node, ref message } if node.as_str() == "a" && message.contains("deliberate")),
        "{err}"
    );
    let head = routed.get_state(&cfg).await.unwrap().unwrap();
    let a = head.tasks.iter().find(|t| t.node.as_str() == "a").unwrap();
    assert!(
        a.error.as_deref().unwrap_or("").contains("deliberate"),
        "{a:?}"
    );
    let out = routed.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    // `update_state` as `a` runs a's router too: its panic is the update's error.
    routes.store(0, Ordering::SeqCst);
    let err = routed
        .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), Some("a".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NodePanicked { ref node, .. } if node.as_str() == "a"),
        "{err}"
    );

    // A router on `__start__` runs in the input task: its panic is caught the same way.
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_router("__start__", None, |_s: &State| -> Vec<antler_graph::Goto> {
        panic!("deliberate panic in the start router")
    });
    g.add_edge("a", "__end__");
    let err = memory(g)
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("s"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NodePanicked { ref node, ref message } if node.as_str() == "__start__" && message.contains("start router")),
        "{err}"
    );
    // A recursion limit near `i64::MAX` means no practical limit, not an overflow.
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let big = memory(g);
    let deep = RunConfig::new("d").with_recursion_limit(i64::MAX as usize);
    for _ in 0..2 {
        big.invoke(Update::new().set(&LOG, log(&["in"])), &deep)
            .await
            .unwrap();
    }

    const BAD: Key<i64> = Key::from_static("bad");
    let mut g = graph();
    g.channel(
        &BAD,
        ChannelSpec::reducer(
            "explodes",
            || 0,
            |_acc: &i64, _w: &[i64]| -> Result<i64, antler_graph::BoxError> {
                panic!("deliberate panic in a reducer")
            },
        ),
    )
    .unwrap();
    g.add_node("a", |_s, _c| async { Ok(Update::new().set(&BAD, 1)) });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let reducing = memory(g);
    let err = reducing
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), antler_graph::ErrorKind::Reducer, "{err}");
    assert!(err.to_string().contains("deliberate"), "{err}");
}

fn asking_graph() -> antler_graph::CompiledGraph {
    const ASKED: Key<bool> = Key::from_static("asked");
    let mut g = graph();
    g.channel(&ASKED, ChannelSpec::last_value())
        .expect("declared once");
    g.add_node("ask", |s: State, ctx: Context| async move {
        if s.get(&ASKED) == Some(&true) {
            return Ok(Update::new());
        }
        let answer = ctx.interrupt(json!("name?"))?;
        Ok(Update::new()
            .set(&ASKED, true)
            .set(&LOG, log(&[&format!("answer {answer}")])))
    });
    g.add_node("other", add("other"));
    g.add_edge("__start__", "ask")
        .add_edge("__start__", "other");
    memory(g)
}

/// Rule 10: new input abandons an interrupted step (the node asks again); `Command::resume` continues it.
#[tokio::test]
async fn rule_10_new_input_abandons_interrupted_step_and_resume_continues_it() {
    let graph = asking_graph();
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1);
    assert_eq!(out.interrupts[0].value, json!("name?"));
    // New input: the pending step (ask interrupted, other done) is abandoned; both run again.
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in2"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1, "the node asks again");
    // The run's output has the finished sibling's write of this step applied (as the
    // reference's output has); the first run's writes were abandoned, not applied.
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "in2", "other"]),
        "abandoned writes are not applied"
    );
    // So does the head's state; the checkpoint itself stores the step's start, with `other`'s
    // write pending on it for the resume.
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        head.values.get(&LOG).unwrap(),
        &log(&["in", "in2", "other"])
    );
    assert_eq!(
        head.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["ask"]
    );
    let stored = graph
        .get_state(&cfg.clone().with_checkpoint(head.checkpoint_id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.values.get(&LOG).unwrap(), &log(&["in", "in2"]));
    // Resume: only `ask` re-runs; `other` keeps its saved writes.
    let out = graph
        .invoke(Command::resume(json!("ada")), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty());
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "in2", "answer \"ada\"", "other"])
    );
}

/// Several interrupts pending: a single resume value is rejected, a map by interrupt id answers each.
#[tokio::test]
async fn several_interrupts_need_a_resume_map() {
    let mut g = graph();
    for name in ["p", "q"] {
        g.add_node(name, move |_s: State, ctx: Context| async move {
            let a = ctx.interrupt(json!(format!("{name}?")))?;
            Ok(Update::new().set(&LOG, log(&[&format!("{name}={a}")])))
        });
        g.add_edge("__start__", name);
    }
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph.invoke(Update::new().set(&N, 1), &cfg).await.unwrap();
    assert_eq!(out.interrupts.len(), 2);
    let err = graph
        .invoke(Command::resume(json!(1)), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AmbiguousResume { count: 2 }));
    let map = out
        .interrupts
        .iter()
        .map(|i| (i.id.clone(), json!(i.node.as_str().to_uppercase())))
        .collect();
    let out = graph.invoke(Command::resume_map(map), &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["p=\"P\"", "q=\"Q\""]));
}

/// Only pending interrupts make a single resume value ambiguous (runtime-spec §2.2): once a
/// resume map answered one of two interrupted tasks, the other's interrupt is the only one
/// pending, and a single value answers it (the answered task's interrupt write stays stored).
#[tokio::test]
async fn a_single_resume_value_answers_the_one_interrupt_still_pending() {
    let mut g = graph();
    for name in ["p", "q"] {
        g.add_node(name, move |_s: State, ctx: Context| async move {
            let a = ctx.interrupt(json!(format!("{name}?")))?;
            Ok(Update::new().set(&LOG, log(&[&format!("{name}={a}")])))
        });
        g.add_edge("__start__", name);
    }
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph.invoke(Update::new().set(&N, 1), &cfg).await.unwrap();
    let p = out
        .interrupts
        .iter()
        .find(|i| i.node.as_str() == "p")
        .unwrap()
        .id
        .clone();
    let out = graph
        .invoke(
            Command::resume_map([(p, json!("P"))].into_iter().collect()),
            &cfg,
        )
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1);
    assert_eq!(out.interrupts[0].node.as_str(), "q");
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.interrupts().len(), 1, "{:?}", snap.tasks);
    let out = graph
        .invoke(Command::resume(json!("Q")), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["p=\"P\"", "q=\"Q\""]));
}

/// A task that failed once and then, run again, stops on an interrupt is interrupted, not
/// failed: `get_state` shows the interrupt it waits on (its error write, an upsert, stays).
#[tokio::test]
async fn a_task_interrupted_after_it_failed_shows_its_interrupt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let failed = Arc::new(AtomicBool::new(false));
    let mut g = graph();
    let f = failed.clone();
    g.add_node("a", move |_s: State, ctx: Context| {
        let f = f.clone();
        async move {
            if !f.swap(true, Ordering::SeqCst) {
                return Err(NodeError::failed(std::io::Error::other("transient")));
            }
            let a = ctx.interrupt(json!("approve?"))?;
            Ok(Update::new().set(&LOG, log(&[&format!("a={a}")])))
        }
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    assert!(graph.invoke(Update::new().set(&N, 1), &cfg).await.is_err());
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.tasks[0].status, TaskStatus::Error);
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.interrupts.len(), 1);
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.tasks[0].status, TaskStatus::Interrupted);
    assert_eq!(snap.interrupts(), out.interrupts);
    let out = graph
        .invoke(Command::resume(json!("yes")), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["a=\"yes\""]));
}

/// `*` in a static breakpoint list names every node but the hidden ones (runtime-spec
/// §2.3.5): the run stops before `a` with its input applied, not before the `__start__` task,
/// and `interrupt_after(["*"])` does not pause after that task either.
#[tokio::test]
async fn a_star_breakpoint_skips_the_hidden_start_task() {
    for before in [true, false] {
        let mut g = graph();
        g.add_node("a", add("a")).add_node("b", add("b"));
        g.add_edge("__start__", "a")
            .add_edge("a", "b")
            .add_edge("b", "__end__");
        if before {
            g.interrupt_before(["*"]);
        } else {
            g.interrupt_after(["*"]);
        }
        let graph = memory(g);
        let cfg = RunConfig::new("t");
        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        let (first, next) = if before {
            (log(&["in"]), "a")
        } else {
            (log(&["in", "a"]), "b")
        };
        assert_eq!(out.values.get(&LOG).unwrap(), &first, "before: {before}");
        assert_eq!(
            graph.get_state(&cfg).await.unwrap().unwrap().next,
            vec![next.into()],
            "before: {before}"
        );
    }
}

/// The recursion limit counts super-steps of real nodes after `__start__` (runtime-spec §2.3).
#[tokio::test]
async fn recursion_limit_error_after_limit_steps() {
    let mut g = graph();
    g.add_node("loop", |_s, _c| async { Ok(Update::new().set(&N, 1)) });
    g.add_edge("__start__", "loop");
    g.add_router("loop", None, |_s: &State| vec!["loop".into()]);
    let graph = memory(g);
    let cfg = RunConfig::new("t").with_recursion_limit(3);
    let err = graph
        .invoke(Update::new().set(&N, 0), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RecursionLimit { limit: 3 }));
    assert!(
        err.to_string()
            .starts_with("Recursion limit of 3 reached without hitting a stop condition.")
    );
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        snap.values.get(&N),
        Some(&3),
        "exactly 3 supersteps of real nodes ran"
    );
}

/// A recursion limit of zero is refused as the reference refuses it, before anything is read
/// or stored (before 2026-12-02 the input checkpoint and the first step's were stored, then the
/// run failed with `RecursionLimit`).
#[tokio::test]
async fn a_zero_recursion_limit_is_refused_before_anything_is_stored() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t").with_recursion_limit(0);
    let err = graph.invoke(Update::new(), &cfg).await.unwrap_err();
    assert!(matches!(err, Error::InvalidRecursionLimit), "{err}");
    assert_eq!(err.kind(), antler_graph::ErrorKind::Input);
    assert_eq!(err.to_string(), "recursion_limit must be at least 1");
    assert!(graph.get_state_history(&cfg).await.unwrap().is_empty());
    graph
        .invoke(Update::new(), &RunConfig::new("t"))
        .await
        .unwrap();
}

/// A resume value serves the step the run resumes (runtime-spec §2.3: pending writes, the
/// NULL task's resume value among them, are cleared after the first step): resuming past a
/// static breakpoint with a value must not answer an `interrupt` a later step raises.
#[tokio::test]
async fn a_resume_value_does_not_answer_a_later_steps_interrupt() {
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_node("b", |_s: State, ctx: Context| async move {
        let answer = ctx.interrupt(json!("b?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("b got {answer}")])))
    });
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    g.interrupt_before(["a"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty(), "a static breakpoint");
    let out = graph
        .invoke(Command::resume(json!("early")), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
    assert_eq!(
        out.interrupts.len(),
        1,
        "b asks: the value was for the first step"
    );
    assert_eq!(out.interrupts[0].value, json!("b?"));
    let out = graph
        .invoke(Command::resume(json!("late")), &cfg)
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b got \"late\""])
    );
}

/// A command whose update the channels refuse fails the run and stores nothing: the thread
/// stays readable and runnable (stored first, the refused writes would be re-applied, and
/// refused, by every later read and run of the head).
#[tokio::test]
async fn a_refused_command_update_is_not_stored() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let twice = Command::new().update(
        Update::new()
            .set(&LAST, "x".to_owned())
            .set(&LAST, "y".to_owned()),
    );
    let err = graph.invoke(twice, &cfg).await.unwrap_err();
    assert!(err.to_string().contains("last"), "{err}");
    let state = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(state.values.get(&LOG).unwrap(), &log(&["in", "a"]));
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in2"])), &cfg)
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "in2", "a"])
    );
}

/// Stored writes to a channel the compiled graph does not declare (a deploy removed it) fail
/// closed with `UnknownChannel`, a finished task's as well as the checkpoint's stored input
/// (NULL-task writes): skipping them would drop stored data without a sign. Before, the input
/// writes were skipped by runs, `get_state` and `update_state`.
#[tokio::test]
async fn stored_writes_to_an_undeclared_channel_fail_closed() {
    use antler_graph::{CheckpointId, Checkpointer, ErrorKind, MemoryCheckpointer, Scope, TaskId};
    let build = || {
        let mut g = graph();
        g.add_node("a", add("a")).add_node("b", add("b"));
        g.add_edge("__start__", "a")
            .add_edge("a", "b")
            .add_edge("b", "__end__");
        g.interrupt_before(["b"]);
        g
    };
    for task in [None, Some("a-task")] {
        let store = Arc::new(MemoryCheckpointer::new());
        let graph = build().compile().unwrap().with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        let head = graph.get_state(&cfg).await.unwrap().unwrap();
        let head_id = CheckpointId::new(head.checkpoint_id.as_str());
        // What an older build stored on the paused head: input (NULL task) or a task's write.
        let task_id = match task {
            None => TaskId::new("00000000-0000-0000-0000-000000000000"),
            Some(_) => head.tasks[0].id.clone(),
        };
        store
            .put_writes(
                &Scope::root("t"),
                &head_id,
                &task_id,
                "",
                vec![("removed".to_owned(), json!("kept input"))],
            )
            .await
            .unwrap();
        let unknown = |e: Error| {
            assert_eq!(e.kind(), ErrorKind::InvalidUpdate, "{e}");
            assert!(e.to_string().contains("removed"), "{e}");
        };
        unknown(graph.invoke(Input::Continue, &cfg).await.unwrap_err());
        if task.is_some() {
            // The head's state, which applies finished tasks' results, shows the checkpoint as
            // stored when one does not decode: the read still serves to inspect the thread.
            let snap = graph.get_state(&cfg).await.unwrap().unwrap();
            assert_eq!(snap.values.get(&LOG), head.values.get(&LOG));
            assert_eq!(snap.next, head.next);
        }
        if task.is_none() {
            unknown(graph.get_state(&cfg).await.unwrap_err());
            unknown(
                graph
                    .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), None)
                    .await
                    .unwrap_err(),
            );
        }
    }
}

/// `update_state` on a head whose join barrier is complete keeps the join's target next
/// (graph-programs rule 6: "a complete join barrier survives, so its target stays in `next`"),
/// and a following run without input runs it.
#[tokio::test]
async fn update_state_keeps_a_complete_join_pending() {
    let mut g = graph();
    g.add_node("a", add("a"))
        .add_node("b", add("b"))
        .add_node("c", add("c"));
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    g.add_join(["a", "b"], "c");
    g.add_edge("c", "__end__");
    g.interrupt_before(["c"]);
    let graph = memory(g);
    // Continued without input, and with a command's update (input applied before the step).
    for (thread, input, last) in [
        ("t1", Input::Continue, None),
        (
            "t2",
            Input::Command(Command::new().update(Update::new().set(&LOG, log(&["cmd"])))),
            Some("cmd"),
        ),
    ] {
        let cfg = RunConfig::new(thread);
        graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert_eq!(
            graph.get_state(&cfg).await.unwrap().unwrap().next,
            vec!["c".into()]
        );
        graph
            .update_state(
                &cfg,
                Update::new().set(&LOG, log(&["fix"])),
                Some("a".into()),
            )
            .await
            .unwrap();
        assert_eq!(
            graph.get_state(&cfg).await.unwrap().unwrap().next,
            vec!["c".into()],
            "the complete join survives the update"
        );
        let out = graph.invoke(input, &cfg).await.unwrap();
        let mut want = vec!["in", "a", "b", "fix"];
        want.extend(last);
        want.push("c");
        assert_eq!(out.values.get(&LOG).unwrap(), &log(&want));
    }
}

/// A command with no update, goto or resume is refused with the reference's
/// `EmptyInputError` text, on a fresh thread and on a paused one, and stores nothing (before,
/// it ran as a plain continue).
#[tokio::test]
async fn an_empty_command_is_refused() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    g.interrupt_before(["b"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let err = graph.invoke(Command::new(), &cfg).await.unwrap_err();
    assert_eq!(err.to_string(), "Received empty Command input");
    assert_eq!(err.kind(), antler_graph::ErrorKind::Input);
    assert!(graph.get_state(&cfg).await.unwrap().is_none());
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    let err = graph.invoke(Command::new(), &cfg).await.unwrap_err();
    assert!(matches!(err, Error::EmptyCommand), "{err}");
    let after = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(after.checkpoint_id, head.checkpoint_id);
    assert_eq!(after.next, vec!["b".into()], "b was not run");
}

/// Static breakpoints fire once per new versions.
#[tokio::test]
async fn static_interrupt_before_and_after() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    g.interrupt_before(["b"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
    assert_eq!(
        graph.get_state(&cfg).await.unwrap().unwrap().next,
        vec!["b".into()]
    );
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    drop(graph);

    let mut g = crate::common::graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    g.interrupt_after(["a"]);
    let graph = memory(g);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
}

/// `Send` fan-out: one PUSH task per packet with the packet as input; joins wait for every source.
#[tokio::test]
async fn send_fan_out_and_join() {
    use crate::common::{ITEM, add_split};
    let mut g = graph();
    add_split(&mut g, 3);
    g.add_node("work", |s: State, _c| async move {
        Ok(Update::new()
            .set(
                &LOG,
                log(&[&format!("w:{}", s.get(&ITEM).cloned().unwrap_or_default())]),
            )
            .set(&N, 1))
    });
    g.add_node("side", add("side"));
    g.add_node("join", |s: State, _c| async move {
        Ok(Update::new().set(&LAST, format!("n={}", s.get(&N).unwrap_or(&0))))
    });
    g.add_edge("__start__", "split")
        .add_edge("__start__", "side");
    g.add_join(["work", "side"], "join");
    g.add_edge("join", "__end__");
    let graph = g
        .compile()
        .unwrap_or_else(|e| panic!("{e}"))
        .with_checkpointer(Arc::new(antler_graph::MemoryCheckpointer::new()));
    let out = graph
        .invoke(Update::new().set(&N, 0), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["side", "w:x0", "w:x1", "w:x2"])
    );
    assert_eq!(out.values.get(&LAST).unwrap(), "n=3");
}

/// Time travel: replaying an older checkpoint forks; `update_state` writes as a node and sets `next`.
#[tokio::test]
async fn time_travel_fork_and_update_state() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let history = graph.get_state_history(&cfg).await.unwrap();
    assert_eq!(history.len(), 4);
    let after_a = history
        .iter()
        .find(|s| s.next == vec!["b".into()])
        .unwrap()
        .checkpoint_id
        .clone();
    let out = graph
        .invoke(
            Input::Continue,
            &cfg.clone().with_checkpoint(after_a.clone()),
        )
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    let history = graph.get_state_history(&cfg).await.unwrap();
    assert_eq!(history.len(), 6, "fork checkpoint + replayed step");
    let fork = history
        .iter()
        .find(|s| s.source == antler_graph::Source::Fork)
        .unwrap();
    assert_eq!(fork.parent_id.as_ref(), Some(&after_a));

    let id = graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["manual"])),
            Some("a".into()),
        )
        .await
        .unwrap();
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.checkpoint_id, id);
    assert_eq!(snap.source, antler_graph::Source::Update);
    assert_eq!(snap.next, vec!["b".into()], "as_node a's edge triggers b");
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b", "manual", "b"])
    );
}

/// Durability exit: nothing is stored during the run, the final checkpoint at exit.
#[tokio::test]
async fn durability_exit_stores_only_the_final_checkpoint() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let store = Arc::new(Recording::default());
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Exit);
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let puts = store.puts();
    assert_eq!(puts.len(), 1);
    assert_eq!(puts[0].step, 2);
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    // Sync stores every checkpoint.
    let cfg = RunConfig::new("u").with_durability(antler_graph::Durability::Sync);
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(store.puts().len(), 1 + 4);
}

/// Retry policy: a failing attempt is retried (paused clock, no real sleeping).
#[tokio::test(start_paused = true)]
async fn retry_policy_reruns_failed_attempts() {
    let (out, runs) = run_flaky(antler_graph::RetryPolicy::default()).await;
    assert_eq!(runs, 3, "two failures, then the run");
    assert_eq!(out.unwrap().values.get(&LOG).unwrap(), &log(&["ok"]));
}

/// A retry policy whose waits cannot be durations (a negative factor, an unbounded interval)
/// still retries: a negative wait is no wait, an overflowing one the policy's bound.
#[tokio::test(start_paused = true)]
async fn retry_waits_that_are_not_durations_do_not_panic() {
    for (factor, max_interval) in [
        (-3.0, std::time::Duration::from_secs(1)),
        (f64::MAX, std::time::Duration::MAX),
    ] {
        let policy = antler_graph::RetryPolicy {
            backoff_factor: factor,
            max_interval,
            ..antler_graph::RetryPolicy::default()
        };
        let (out, runs) = run_flaky(policy).await;
        assert_eq!(runs, 3, "factor {factor}");
        assert_eq!(out.unwrap().values.get(&LOG).unwrap(), &log(&["ok"]));
    }
}

/// A retry policy retries only what its rule accepts: by default not this runtime's own
/// deterministic errors coming up from a subgraph (here its recursion limit: before, each
/// attempt ran the subgraph again from where the last one stopped, multiplying the limit), and
/// with `retry_on` only what the predicate accepts.
#[tokio::test(start_paused = true)]
async fn a_retry_policy_retries_only_what_its_rule_accepts() {
    // The subgraph that fails is the retried node itself (depth 1) or a node one plain
    // subgraph further down (depth 2): the rule classifies what the innermost node failed
    // with, not the subgraph node that passed the failure up.
    for depth in [1, 2] {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut inner = graph();
        let r = runs.clone();
        inner.add_node("spin", move |_s: State, _c| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Ok(Update::new().set(&LOG, log(&["spin"]))) }
        });
        inner.add_edge("__start__", "spin");
        inner.add_router("spin", None, |_s: &State| vec!["spin".into()]);
        let mut failing = inner.compile().unwrap();
        if depth == 2 {
            let mut middle = graph();
            only_subgraph(&mut middle, "inner", failing);
            failing = middle.compile().unwrap();
        }
        let err = memory(retried_subgraph(failing))
            .invoke(
                Update::new().set(&LOG, log(&["in"])),
                &RunConfig::new("t").with_recursion_limit(4),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Recursion limit"), "{err}");
        let spins = runs.load(Ordering::SeqCst);
        assert!(
            spins <= 5,
            "depth {depth}: one attempt of the subgraph, not three: {spins} runs"
        );
    }

    // A panic inside a subgraph is not retried either, as a panic of the node's own is not.
    let runs = Arc::new(AtomicUsize::new(0));
    let mut inner = graph();
    let r = runs.clone();
    inner.add_node("boom", move |_s: State, _c| {
        r.fetch_add(1, Ordering::SeqCst);
        async {
            if true {
                panic!("a bug, not a transient failure");
            }
            Ok(Update::new())
        }
    });
    inner
        .add_edge("__start__", "boom")
        .add_edge("boom", "__end__");
    let err = memory(retried_subgraph(inner.compile().unwrap()))
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the panic was not retried");

    let never = antler_graph::RetryPolicy {
        retry_on: Some(antler_graph::RetryOn::new(|_| false)),
        ..antler_graph::RetryPolicy::default()
    };
    let (out, runs) = run_flaky(never).await;
    assert!(out.is_err());
    assert_eq!(runs, 1, "the predicate refused the retry");
}

/// START → `sub` → END, where `sub` runs `inner` under the default retry policy.
fn retried_subgraph(inner: antler_graph::CompiledGraph) -> antler_graph::StateGraph {
    let mut outer = graph();
    outer.add_subgraph_with(
        "sub",
        inner,
        antler_graph::NodeOptions {
            retry: Some(antler_graph::RetryPolicy::default()),
            ..Default::default()
        },
    );
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    outer
}

/// The runtime waits as the policy says between attempts: two retries of 1 s and 2 s take
/// exactly 3 s of (paused) time without jitter, and between 3 and 5 s with it, a different
/// total each time (before jitter existed, every run took exactly 3 s).
#[tokio::test(start_paused = true)]
async fn retry_waits_back_off_with_jitter_by_default() {
    let policy = |jitter| antler_graph::RetryPolicy {
        initial_interval: std::time::Duration::from_secs(1),
        backoff_factor: 2.0,
        jitter,
        ..antler_graph::RetryPolicy::default()
    };
    let began = tokio::time::Instant::now();
    let (out, runs) = run_flaky(policy(false)).await;
    assert!(out.is_ok() && runs == 3);
    assert_eq!(began.elapsed(), std::time::Duration::from_secs(3));

    let mut totals = Vec::new();
    for _ in 0..3 {
        let began = tokio::time::Instant::now();
        let (out, runs) = run_flaky(policy(true)).await;
        assert!(out.is_ok() && runs == 3);
        let took = began.elapsed();
        assert!(
            took > std::time::Duration::from_secs(3) && took < std::time::Duration::from_secs(5),
            "{took:?}"
        );
        totals.push(took);
    }
    totals.dedup();
    assert!(totals.len() > 1, "the same jitter every run: {totals:?}");
}

/// Runs a node that fails twice, then writes `ok`, under `policy`: the outcome and the
/// node's runs.
async fn run_flaky(
    policy: antler_graph::RetryPolicy,
) -> (antler_graph::Result<antler_graph::RunOutcome>, usize) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut g = graph();
    let r = runs.clone();
    g.add_node_with(
        "flaky",
        Arc::new(Fn2(move |_s: State| {
            if r.fetch_add(1, Ordering::SeqCst) < 2 {
                return Err(NodeError::failed("transient"));
            }
            Ok(Update::new().set(&LOG, log(&["ok"])).into())
        })),
        antler_graph::NodeOptions {
            retry: Some(policy),
            ..Default::default()
        },
    );
    g.add_edge("__start__", "flaky");
    let out = memory(g)
        .invoke(Update::new().set(&N, 1), &RunConfig::new("t"))
        .await;
    (out, runs.load(Ordering::SeqCst))
}

/// Of several faults, compile() reports the same one every time: routers are checked in
/// node-name order (before 2026-12-02 in a hash map's order, which differs between map
/// instances, so two routers with unknown targets gave either error).
#[test]
fn compile_reports_the_same_fault_every_time() {
    use antler_graph::BuildError;
    let build = || {
        let mut g = graph();
        g.add_node("a", add("a")).add_node("b", add("b"));
        g.add_edge("__start__", "a").add_edge("__start__", "b");
        g.add_router("b", Some(vec!["nope-b".into()]), |_: &State| vec![]);
        g.add_router("a", Some(vec!["nope-a".into()]), |_: &State| vec![]);
        g.compile().err()
    };
    for _ in 0..24 {
        assert!(
            matches!(build(), Some(BuildError::UnknownNode { ref node, .. }) if node == "nope-a")
        );
    }
}

/// compile() rejects invalid graphs with typed errors.
#[test]
fn compile_errors_are_typed() {
    use antler_graph::BuildError;
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a").add_edge("a", "nope");
    assert!(
        matches!(g.compile().err(), Some(BuildError::UnknownNode { ref node, .. }) if node == "nope")
    );

    let mut g = graph();
    g.add_node("a", add("a")).add_node("island", add("i"));
    g.add_edge("__start__", "a");
    assert!(
        matches!(g.compile().err(), Some(BuildError::Unreachable { ref node }) if node == "island")
    );

    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "a");
    assert!(matches!(
        g.compile().err(),
        Some(BuildError::NoPathToEnd { .. })
    ));

    let mut g = graph();
    g.add_node("a", add("a"));
    assert!(matches!(g.compile().err(), Some(BuildError::NoEntry)));

    let mut g = graph();
    let again: Key<Vec<String>> = Key::new("log");
    let err = g.channel(&again, ChannelSpec::last_value()).err();
    assert!(
        matches!(err, Some(BuildError::ChannelConflict { ref channel, .. }) if channel == "log")
    );
    // The identical declaration is fine (several schema parts may declare a shared field).
    g.channel(
        &again,
        ChannelSpec::reducer("append", Vec::new, |a: &Vec<String>, _w: &[Vec<String>]| {
            Ok(a.clone())
        }),
    )
    .unwrap();
}

/// Messages declared in full mode in one place and with another reducer elsewhere is a build error.
#[test]
fn messages_declared_twice_with_different_kinds_is_a_build_error() {
    use antler_state_reducers::Message;
    const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
    let mut g = antler_graph::StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages()).unwrap();
    g.channel(&MESSAGES, ChannelSpec::messages()).unwrap();
    let err = g.channel(&MESSAGES, ChannelSpec::last_value()).err();
    assert!(matches!(
        err,
        Some(antler_graph::BuildError::ChannelConflict { .. })
    ));
}

/// Delta and full `messages` mixed in one graph is a build error, in either order, and so is
/// the delta channel declared again with another snapshot frequency; the same declaration
/// twice is fine.
#[test]
fn delta_and_full_messages_mixed_is_a_build_error() {
    use antler_state_reducers::Message;
    const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
    let conflict = |first: ChannelSpec<Vec<Message>>, second: ChannelSpec<Vec<Message>>| {
        let mut g = antler_graph::StateGraph::new();
        g.channel(&MESSAGES, first).unwrap();
        g.channel(&MESSAGES, second).err()
    };
    for (first, second) in [
        (ChannelSpec::messages(), ChannelSpec::messages_delta(10)),
        (ChannelSpec::messages_delta(10), ChannelSpec::messages()),
        (
            ChannelSpec::messages_delta(10),
            ChannelSpec::messages_delta(50),
        ),
    ] {
        assert!(matches!(
            conflict(first, second),
            Some(antler_graph::BuildError::ChannelConflict { .. })
        ));
    }
    assert!(
        conflict(
            ChannelSpec::messages_delta(10),
            ChannelSpec::messages_delta(10)
        )
        .is_none()
    );
}

/// Kernel-spec R29: a delta channel's snapshot frequency must be positive; 0 is refused when the
/// channel is declared (before, it was taken as 1 without a word).
#[test]
fn a_delta_channel_with_snapshot_frequency_zero_is_a_build_error() {
    use antler_state_reducers::Message;
    const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
    let mut g = antler_graph::StateGraph::new();
    let err = g.channel(&MESSAGES, ChannelSpec::messages_delta(0)).err();
    assert_eq!(
        err,
        Some(antler_graph::BuildError::InvalidSnapshotFrequency {
            channel: "messages".into()
        })
    );
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("channel 'messages': snapshot frequency must be positive")
    );
    let counts: Key<Vec<i64>> = Key::new("counts");
    let err = g
        .channel(
            &counts,
            ChannelSpec::delta(
                "sum",
                Vec::new,
                |a: &Vec<i64>, w: &[Vec<i64>]| {
                    Ok(a.iter().chain(w.iter().flatten()).copied().collect())
                },
                0,
            ),
        )
        .err();
    assert!(matches!(
        err,
        Some(antler_graph::BuildError::InvalidSnapshotFrequency { .. })
    ));
    g.channel(&MESSAGES, ChannelSpec::messages_delta(1))
        .unwrap();
}

/// Public futures are `Send` (they can run on a multi-threaded runtime).
#[test]
fn public_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    assert_send(&graph.invoke(Update::new(), &cfg));
    assert_send(&graph.get_state(&cfg));
    assert_send(&graph.update_state(&cfg, Update::new(), None));
    assert_send(&graph.stream(Update::new(), &cfg, antler_graph::StreamModes::all()));
}

fn cache_graph(store: Arc<dyn antler_graph::Checkpointer>) -> antler_graph::CompiledGraph {
    const ASKED: Key<bool> = Key::from_static("asked");
    let mut g = graph();
    g.channel(&ASKED, ChannelSpec::last_value())
        .expect("declared once");
    g.add_node("ask", |s: State, ctx: Context| async move {
        if s.get(&ASKED) == Some(&true) {
            return Ok(Update::new().set(&ASKED, false));
        }
        let answer = ctx.interrupt(json!("?"))?;
        Ok(Update::new()
            .set(&ASKED, true)
            .set(&LOG, log(&[&format!("answer {answer}")])))
    });
    g.add_node("count", |_s, _c| async { Ok(Update::new().set(&N, 1)) });
    g.add_edge("__start__", "ask")
        .add_edge("__start__", "count")
        .add_edge("ask", "__end__");
    g.compile().expect("valid graph").with_checkpointer(store)
}

/// The per-thread hot-state cache: a run that starts from the cache behaves exactly like one that
/// rebuilds the channels from the store.
#[tokio::test]
async fn hot_cache_hit_gives_the_same_state_as_a_cold_read() {
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let warm = cache_graph(store.clone());
    let ops: Vec<Input> = vec![
        Update::new().set(&LOG, log(&["t1"])).into(),
        Command::resume(json!("x")).into(),
        Update::new().set(&LOG, log(&["t2"])).into(),
        Update::new().set(&LOG, log(&["t3"])).into(),
        Command::resume(json!("y")).into(),
        Input::Continue,
    ];
    for op in ops {
        let w = warm
            .invoke(op.clone(), &RunConfig::new("warm"))
            .await
            .unwrap();
        // A fresh compiled graph has an empty cache: it must rebuild from the store.
        let cold = cache_graph(store.clone());
        let c = cold.invoke(op, &RunConfig::new("cold")).await.unwrap();
        assert_eq!(format!("{:?}", w.values), format!("{:?}", c.values));
        assert_eq!(w.interrupts.len(), c.interrupts.len());
        let ws = warm
            .get_state(&RunConfig::new("warm"))
            .await
            .unwrap()
            .unwrap();
        let cs = cold
            .get_state(&RunConfig::new("cold"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ws.next, cs.next);
        assert_eq!(ws.step, cs.step);
        assert_eq!(cold.hot_cache_hits(), 0);
    }
    assert!(
        warm.hot_cache_hits() >= 3,
        "warm runs started from the cache ({})",
        warm.hot_cache_hits()
    );
}

/// Two compiled graphs on one store advance the same thread: each one's hot cache holds an
/// older head after the other's run, so neither may serve it, for `get_state` or for the next
/// invoke.
#[tokio::test]
async fn a_hot_cache_never_serves_a_head_another_graph_moved() {
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let (a, b) = (cache_graph(store.clone()), cache_graph(store.clone()));
    let cfg = RunConfig::new("shared");
    a.invoke(Input::from(Update::new().set(&LOG, log(&["a1"]))), &cfg)
        .await
        .unwrap();
    a.invoke(Input::from(Command::resume(json!("x"))), &cfg)
        .await
        .unwrap();
    b.invoke(Input::from(Update::new().set(&LOG, log(&["b1"]))), &cfg)
        .await
        .unwrap();
    let from_a = a.get_state(&cfg).await.unwrap().unwrap();
    let from_b = b.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(from_a.checkpoint_id, from_b.checkpoint_id);
    assert_eq!(
        format!("{:?}", from_a.values),
        format!("{:?}", from_b.values)
    );
    assert_eq!(from_a.next, from_b.next);
    // A's next run starts from B's head, not from A's cached state.
    let ra = a
        .invoke(Input::from(Command::resume(json!("y"))), &cfg)
        .await
        .unwrap();
    let fresh = cache_graph(store.clone());
    let now = fresh.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(format!("{:?}", ra.values), format!("{:?}", now.values));
    assert!(
        format!("{:?}", now.values).contains("b1"),
        "{:?}",
        now.values
    );
}

/// Durability async: checkpoint N is stored while step N+1's tasks run (here the put of step 1
/// can only start once step 2's node runs, and that node finishes only once the put is stored;
/// in sync mode the put would never start, and before, when the put waited for the next write,
/// it never finished), and an invoke that returned has stored everything.
#[tokio::test]
async fn durability_async_stores_checkpoints_while_the_next_step_runs() {
    let store = Arc::new(crate::common::GatedStore::new(1));
    let mut g = graph();
    g.add_node("a", add("a"));
    let s = store.clone();
    g.add_node("b", move |_s: State, _c| {
        s.open();
        let s = s.clone();
        async move {
            // A guard against a hang, not a timing assertion.
            tokio::time::timeout(std::time::Duration::from_secs(30), s.stored.notified())
                .await
                .map_err(|_| NodeError::failed("the step-1 checkpoint was not stored meanwhile"))?;
            Ok(Update::new().set(&LOG, log(&["b"])))
        }
    });
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = g.compile().expect("valid graph").with_checkpointer(store);
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Async);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    assert_eq!(
        graph.get_state_history(&cfg).await.unwrap().len(),
        4,
        "every checkpoint stored on return"
    );
}

static CLONES: AtomicUsize = AtomicUsize::new(0);

/// A list that counts its clones.
#[derive(serde::Serialize, serde::Deserialize, Default, Debug, PartialEq)]
struct Counted(Vec<i64>);

impl Clone for Counted {
    fn clone(&self) -> Self {
        CLONES.fetch_add(1, Ordering::SeqCst);
        Self(self.0.clone())
    }
}

/// An owned reducer updates the channel's value in place: across steps and invokes (hot cache on),
/// the accumulated value is never cloned.
#[tokio::test]
async fn owned_reducer_updates_in_place_without_cloning_the_value() {
    const ACC: Key<Counted, i64> = Key::from_static("acc");
    let mut g = antler_graph::StateGraph::new();
    g.channel(
        &ACC,
        ChannelSpec::reducer_owned("push", Counted::default, |mut acc: Counted, w: &[&i64]| {
            acc.0.extend(w.iter().copied());
            Ok(acc)
        }),
    )
    .expect("declared once");
    for (name, n) in [("a", 1), ("b", 2)] {
        g.add_node(name, move |_s: State, _c| async move {
            Ok(Update::new().set(&ACC, n))
        });
    }
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    for i in 0..3 {
        let out = graph
            .invoke(Update::new().set(&ACC, 10 * i), &cfg)
            .await
            .unwrap();
        assert_eq!(
            out.values.get(&ACC).map(|c| c.0.len()),
            Some(3 * (i as usize + 1))
        );
    }
    assert_eq!(
        CLONES.load(Ordering::SeqCst),
        0,
        "no clone of the accumulated value"
    );
}

/// A `Command` (update or goto, no resume value) on a thread with nothing stored is
/// `EmptyInput` and stores nothing: a command acts on a checkpoint. The reference runs it (its
/// `__start__` task applies the update, which its NULL-task writes apply once more), a
/// deliberate difference (docs/super-step.md).
#[tokio::test]
async fn a_command_on_a_fresh_thread_is_empty_input_and_stores_nothing() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t");
    for cmd in [
        antler_graph::Command::new().update(Update::new().set(&LOG, vec!["x".to_owned()])),
        antler_graph::Command::new().goto("a"),
    ] {
        let err = graph.invoke(cmd, &cfg).await.unwrap_err();
        assert!(matches!(err, Error::EmptyInput { .. }), "{err}");
    }
    assert!(graph.get_state_history(&cfg).await.unwrap().is_empty());
}

/// A `Command` on a thread whose newest checkpoint holds no channel version (an empty update
/// as a node that leads only to the end) has nothing to resume either: `EmptyInput`, refused
/// before anything is stored. Before 2026-12-02 its update was stored on that checkpoint as
/// input and only then refused, so `get_state` showed it and the next run applied it, once per
/// refused attempt (the reference also stores a command's writes before it raises).
#[tokio::test]
async fn a_refused_command_stores_nothing_on_a_checkpoint_without_versions() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t");
    graph
        .update_state(&cfg, Update::new(), Some("a".into()))
        .await
        .unwrap();
    let before = graph.get_state(&cfg).await.unwrap().unwrap();
    assert!(before.next.is_empty(), "{:?}", before.next);
    for _ in 0..2 {
        let cmd = antler_graph::Command::new().update(Update::new().set(&LOG, log(&["x"])));
        let err = graph.invoke(cmd, &cfg).await.unwrap_err();
        assert!(matches!(err, Error::EmptyInput { .. }), "{err}");
    }
    let after = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(after.values.get(&LOG), before.values.get(&LOG));
    assert!(after.values.get(&LOG).is_none_or(Vec::is_empty));
    assert_eq!(after.checkpoint_id, before.checkpoint_id);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
}

/// §2.2: an empty value input is an input (the reference's `map_input` writes `{}` to
/// `__start__`): it saves an input checkpoint and runs the graph; only "no input"
/// (`Input::Continue`) on a thread with nothing to resume is `EmptyInput`.
#[tokio::test]
async fn empty_value_input_runs_the_graph_and_no_input_is_an_error() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t");
    assert!(matches!(
        graph.invoke(Input::Continue, &cfg).await,
        Err(Error::EmptyInput { .. })
    ));
    for round in 1..=2 {
        let out = graph.invoke(Update::new(), &cfg).await.unwrap();
        assert_eq!(out.values.get(&LOG).map(Vec::len), Some(round));
    }
    let history = graph.get_state_history(&cfg).await.unwrap();
    let shape: Vec<(i64, &str)> = history
        .iter()
        .map(|s| (s.step, s.source.as_str()))
        .collect();
    assert_eq!(
        shape,
        [
            (4, "loop"),
            (3, "loop"),
            (2, "input"),
            (1, "loop"),
            (0, "loop"),
            (-1, "input")
        ]
    );
}

/// A replay on the thread's newest fork checkpoint (which saves no new fork) keeps that
/// checkpoint's pending input but not a resume value stored on it: the resume answered a run
/// that was interrupted again, and a replay starts the step afresh (runtime-spec §2.2, "drop
/// stale resume writes"), so the node asks its first question again.
#[tokio::test]
async fn a_replay_of_the_newest_fork_drops_its_stale_resume_value() {
    let mut g = graph();
    g.add_node("ask", |_s: State, ctx: Context| async move {
        let first = ctx.interrupt(json!("first?"))?;
        let second = ctx.interrupt(json!("second?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("{first} {second}")])))
    });
    g.add_edge("__start__", "ask");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts[0].value, json!("first?"));
    // A replay of that checkpoint saves a fork (the thread's newest), and asks again.
    let head = out.checkpoint_id.unwrap();
    let out = graph
        .invoke(Input::Continue, &cfg.clone().with_checkpoint(head))
        .await
        .unwrap();
    assert_eq!(out.interrupts[0].value, json!("first?"));
    let fork = out.checkpoint_id.unwrap();
    // Resuming answers the first question; the second interrupts before a new checkpoint, so
    // the answer stays stored on the fork.
    let out = graph
        .invoke(Command::resume(json!("ada")), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts[0].value, json!("second?"));
    assert_eq!(out.checkpoint_id.as_ref(), Some(&fork));
    // Replaying the fork by id: it stores the earlier answer, so the replay saves a fork of
    // its own (its tasks get new ids), and the stale answer is not reused, neither now nor by
    // the answers that follow. Before, the replay ran in place under the same task ids, the
    // stored "ada" answered "first?" again on the next resume, and "bob" went to "second?".
    let out = graph
        .invoke(Input::Continue, &cfg.clone().with_checkpoint(fork.clone()))
        .await
        .unwrap();
    assert_eq!(out.interrupts[0].value, json!("first?"));
    assert_ne!(out.checkpoint_id.as_ref(), Some(&fork));
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.interrupts().len(), 1);
    assert_eq!(snap.interrupts()[0].value, json!("first?"));
    let out = graph
        .invoke(Command::resume(json!("bob")), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts[0].value, json!("second?"));
    let out = graph
        .invoke(Command::resume(json!("cy")), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty());
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "\"bob\" \"cy\""])
    );
}

/// `update_state(values, as_node = "__start__")` applies the values as the input task's writes
/// (runtime-spec §8: "its writers run"): a fresh thread is seeded with them, the nodes after
/// `__start__` are next, and a run continues from there.
#[tokio::test]
async fn update_state_as_start_seeds_a_thread() {
    let graph = memory(start_a_end());
    let cfg = RunConfig::new("t");
    graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["seed"])),
            Some("__start__".into()),
        )
        .await
        .unwrap();
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.values.get(&LOG).unwrap(), &log(&["seed"]));
    assert_eq!(snap.next, vec!["a".into()]);
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["seed", "a"]));
}

/// An update as a node of a fresh thread records that the node has seen nothing: it has not
/// run. A later update without `as_node` then lands as input, as the reference's does when
/// no node has seen anything, and the first node is next; before 2026-12-01 the empty
/// record counted as that node's run, the update landed as it and its successor was next.
#[tokio::test]
async fn a_node_that_has_seen_nothing_is_not_the_last_to_have_run() {
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_node("b", add("b"));
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["as a"])),
            Some("a".into()),
        )
        .await
        .unwrap();
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.next, vec!["b".into()]);
    graph
        .update_state(&cfg, Update::new().set(&LOG, log(&["input"])), None)
        .await
        .unwrap();
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.next, vec!["a".into()]);
}

/// Without `as_node`, `update_state` takes the node that ran last, `__start__` included, and
/// `__start__` when nothing ran: on a fresh thread, and after an input that stopped at a
/// breakpoint before the first node, the values land as input and the first node stays next
/// (a one-node graph too, where the update used to count as that node's and left nothing next).
#[tokio::test]
async fn update_state_without_as_node_after_only_the_input_is_input() {
    for nodes in [1, 2] {
        let mut g = graph();
        g.add_node("a", add("a"));
        g.add_edge("__start__", "a");
        if nodes == 2 {
            g.add_node("b", add("b"));
            g.add_edge("a", "b").add_edge("b", "__end__");
        } else {
            g.add_edge("a", "__end__");
        }
        g.interrupt_before(["a"]);
        let graph = memory(g);
        // A fresh thread.
        let fresh = RunConfig::new("fresh");
        graph
            .update_state(&fresh, Update::new().set(&LOG, log(&["seed"])), None)
            .await
            .unwrap();
        let snap = graph.get_state(&fresh).await.unwrap().unwrap();
        assert_eq!(snap.next, vec!["a".into()], "nodes: {nodes}");
        // An input stopped before `a`.
        let cfg = RunConfig::new("t");
        graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        graph
            .update_state(&cfg, Update::new().set(&LOG, log(&["more"])), None)
            .await
            .unwrap();
        let snap = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(snap.next, vec!["a".into()], "nodes: {nodes}");
        assert_eq!(snap.values.get(&LOG).unwrap(), &log(&["in", "more"]));
        let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
        let want = if nodes == 2 {
            log(&["in", "more", "a", "b"])
        } else {
            log(&["in", "more", "a"])
        };
        assert_eq!(out.values.get(&LOG).unwrap(), &want, "nodes: {nodes}");
    }
}

const SCRATCH: Key<String> = Key::from_static("scratch");

/// `note` logs the untracked value it sees, sets it, and sends `worker` a packet carrying one;
/// `worker` logs what it sees.
fn scratch_graph(
    store: Arc<dyn antler_graph::Checkpointer>,
    pause_before_worker: bool,
) -> antler_graph::CompiledGraph {
    let mut g = graph();
    g.channel(&SCRATCH, ChannelSpec::untracked())
        .expect("declared once");
    let note = antler_graph::node_fn(|s: State, _c| async move {
        let seen = s.get(&SCRATCH).cloned().unwrap_or_else(|| "none".into());
        Ok(Command::new()
            .update(
                Update::new()
                    .set(&SCRATCH, "secret".to_owned())
                    .set(&LOG, log(&[&format!("saw {seen}")])),
            )
            .goto(antler_graph::Send::new("worker").with(&SCRATCH, "in packet".to_owned())))
    });
    g.add_node_with(
        "note",
        note,
        antler_graph::NodeOptions {
            destinations: vec!["worker".into()],
            ..Default::default()
        },
    );
    g.add_node("worker", |s: State, _c| async move {
        let seen = s.get(&SCRATCH).cloned().unwrap_or_else(|| "none".into());
        Ok(Update::new().set(&LOG, log(&[&format!("worker saw {seen}")])))
    });
    g.add_edge("__start__", "note")
        .add_edge("worker", "__end__");
    if pause_before_worker {
        g.interrupt_before(["worker"]);
    }
    g.compile().expect("valid graph").with_checkpointer(store)
}

/// Runtime-spec §3, `UntrackedValue`: never stored, and its writes are left out of the
/// persisted writes (of a `Send` packet too). So a run or `get_state` served from the hot cache
/// sees it as a cold load does: gone after the run that wrote it (before, the cache kept it).
/// Nor does a run show it outside itself: not in its outcome, nor in its `values`, `updates`
/// or debug events, which match what a read of the thread shows (before 2026-12-01 they
/// carried it, so a middleware's `jump_to` reached the caller, against kernel-spec R1).
#[tokio::test]
async fn untracked_values_are_never_stored_and_the_hot_cache_forgets_them() {
    use antler_graph::{StreamEvent, StreamItem, StreamModes};
    use futures::StreamExt;
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let warm = scratch_graph(store.clone(), false);
    let cfg = RunConfig::new("t");
    for turn in 0..2 {
        let out = warm
            .invoke(Update::new().set(&LOG, log(&[&format!("in {turn}")])), &cfg)
            .await
            .unwrap();
        assert_eq!(out.values.get(&SCRATCH), None, "turn {turn}");
        let cold = scratch_graph(store.clone(), false).with_hot_cache(false);
        let hot = warm.get_state(&cfg).await.unwrap().unwrap();
        let fresh = cold.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(hot.values.get(&SCRATCH), None, "turn {turn}");
        assert_eq!(fresh.values.get(&SCRATCH), None, "turn {turn}");
        assert_eq!(out.values.get(&LOG), fresh.values.get(&LOG));
    }
    // Each turn's `note` saw no value from the turn before, hot or cold.
    let state = warm.get_state(&cfg).await.unwrap().unwrap();
    let log_text = format!("{:?}", state.values.get(&LOG));
    assert_eq!(log_text.matches("saw none").count(), 2, "{log_text}");
    assert_eq!(
        log_text.matches("worker saw in packet").count(),
        2,
        "{log_text}"
    );
    // Nothing persisted names the untracked value.
    let scope = cfg.scope();
    let mut packets = 0;
    for t in store.list(&scope).await.unwrap() {
        let full = store
            .get_tuple(&scope, Some(&t.checkpoint.id))
            .await
            .unwrap()
            .unwrap();
        for w in &full.pending_writes {
            assert_ne!(w.channel, "scratch", "{w:?}");
            assert!(!w.value.to_string().contains("secret"), "{w:?}");
            if w.channel == "__pregel_tasks" {
                packets += 1;
                assert!(!w.value.to_string().contains("in packet"), "{w:?}");
            }
        }
    }
    assert_eq!(packets, 2, "each turn persisted its packet");
    // The stream shows no more than the outcome does.
    let items: Vec<_> = warm
        .stream(
            Update::new().set(&LOG, log(&["streamed"])),
            &RunConfig::new("streamed"),
            StreamModes::all(),
        )
        .collect()
        .await;
    let mut seen = 0;
    for item in items {
        match item.unwrap() {
            StreamItem::Event(StreamEvent::Values(v)) => {
                seen += 1;
                assert_eq!(v.get(&SCRATCH), None);
            }
            StreamItem::Event(StreamEvent::Updates { node, writes, .. }) => {
                seen += 1;
                assert!(writes.iter().all(|(c, _)| c != "scratch"), "{node}");
            }
            StreamItem::Event(StreamEvent::Task(t)) => {
                assert!(t.writes.iter().all(|(c, _)| c != "scratch"), "{t:?}");
                assert!(
                    t.sends.iter().all(|(_, p)| p.get("scratch").is_none()),
                    "{t:?}"
                );
            }
            StreamItem::Done(out) => assert_eq!(out.values.get(&SCRATCH), None),
            _ => {}
        }
    }
    assert!(seen > 0, "the stream carried values and updates");
}

/// Untracked input is applied in the run it is given to, a `Send` packet's untracked value
/// included (only the persisted forms leave them out); and a `Send` packet queued when the run
/// stops (here at a breakpoint) loses its untracked value in the hot cache as in the store, so
/// the resumed task sees the same, hot or cold (before, the command's untracked writes were
/// dropped in its own run, and the cached packet kept its value).
#[tokio::test]
async fn untracked_input_is_applied_in_its_run_and_queued_packets_forget_it() {
    use antler_graph::Send as Packet;
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let graph = scratch_graph(store.clone(), false);
    let cfg = RunConfig::new("input");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let out = graph
        .invoke(
            Command::new()
                .update(Update::new().set(&SCRATCH, "from input".to_owned()))
                .goto("note"),
            &cfg,
        )
        .await
        .unwrap();
    let text = format!("{:?}", out.values.get(&LOG));
    assert!(text.contains("saw from input"), "{text}");
    let out = graph
        .invoke(
            Command::new().goto(Packet::new("worker").with(&SCRATCH, "sent from input".to_owned())),
            &cfg,
        )
        .await
        .unwrap();
    let text = format!("{:?}", out.values.get(&LOG));
    assert!(text.contains("worker saw sent from input"), "{text}");

    let warm = scratch_graph(store.clone(), true);
    let cfg = RunConfig::new("paused");
    let out = warm
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused, "stopped before worker");
    let hot = warm.invoke(Input::Continue, &cfg).await.unwrap();
    let text = format!("{:?}", hot.values.get(&LOG));
    assert!(text.contains("worker saw none"), "{text}");
    let cold_cfg = RunConfig::new("paused-cold");
    let cold = scratch_graph(store.clone(), true);
    cold.invoke(Update::new().set(&LOG, log(&["in"])), &cold_cfg)
        .await
        .unwrap();
    let cold = scratch_graph(store, true).with_hot_cache(false);
    let out = cold.invoke(Input::Continue, &cold_cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG), hot.values.get(&LOG));
}

/// A subgraph's untracked values reach its parent task within the enclosing run (its nodes'
/// state, not the run's output, is the task's result), while the parent's own outcome leaves
/// them out, as every run's does.
#[tokio::test]
async fn a_subgraphs_untracked_values_reach_its_parent_task() {
    const OUT: Key<String> = Key::from_static("out");
    let mut inner = antler_graph::StateGraph::new();
    inner
        .channel(&SCRATCH, ChannelSpec::untracked())
        .expect("declared once");
    inner.add_node("set", |_s: State, _c| async {
        Ok(Update::new().set(&SCRATCH, "from the subgraph".to_owned()))
    });
    inner
        .add_edge("__start__", "set")
        .add_edge("set", "__end__");
    let mut outer = graph();
    outer
        .channel(&SCRATCH, ChannelSpec::untracked())
        .expect("declared once");
    outer
        .channel(&OUT, ChannelSpec::last_value())
        .expect("declared once");
    outer.add_subgraph("sub", inner.compile().expect("valid inner graph"));
    outer.add_node("copy", |s: State, _c| async move {
        let seen = s.get(&SCRATCH).cloned().unwrap_or_else(|| "nothing".into());
        Ok(Update::new().set(&OUT, seen))
    });
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "copy")
        .add_edge("copy", "__end__");
    let out = memory(outer)
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(
        out.values.get(&OUT).map(String::as_str),
        Some("from the subgraph")
    );
    assert_eq!(out.values.get(&SCRATCH), None);
}

/// A command's goto `Send` on a thread whose pending step has packets queued is refused: the
/// queue takes one step's packets, so the new packet would replace the queued one and, as a
/// packet's task id is its position, take that task's id and stored results. A command without
/// a `Send`, and continuing the step, still work. Before 2026-12-01 the new packet silently
/// replaced the queued one.
#[tokio::test]
async fn a_command_send_over_queued_packets_is_refused() {
    use antler_graph::{ErrorKind, Send as Packet};
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let graph = scratch_graph(store.clone(), true);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused, "stopped before worker, its packet queued");
    let e = graph
        .invoke(
            Command::new().goto(Packet::new("worker").with(&SCRATCH, "replacement".to_owned())),
            &cfg,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::SendOverQueuedPackets { queued: 1 }),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Input);
    // Nothing was stored: no input on the head, whose step is still pending with its packet.
    let stored = store.get_tuple(&cfg.scope(), None).await.unwrap().unwrap();
    assert!(
        stored
            .pending_writes
            .iter()
            .all(|w| w.task_id.as_str() != "00000000-0000-0000-0000-000000000000"),
        "{:?}",
        stored.pending_writes
    );
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.next, [antler_graph::NodeId::from("worker")]);
    let out = graph
        .invoke(
            Command::new().update(Update::new().set(&LOG, log(&["noted"]))),
            &cfg,
        )
        .await
        .unwrap();
    let text = format!("{:?}", out.values.get(&LOG));
    assert!(
        text.contains("noted") && text.contains("worker saw"),
        "{text}"
    );
}

/// Values input with an untracked value: the run's nodes see it, and the input checkpoint
/// stores `__start__`'s value without it (runtime-spec §3: untracked values are never stored).
#[tokio::test]
async fn untracked_values_input_is_applied_but_not_stored_with_start() {
    let store: Arc<dyn antler_graph::Checkpointer> =
        Arc::new(antler_graph::MemoryCheckpointer::new());
    let graph = scratch_graph(store.clone(), false);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(
            Update::new()
                .set(&LOG, log(&["in"]))
                .set(&SCRATCH, "top secret".to_owned()),
            &cfg,
        )
        .await
        .unwrap();
    let text = format!("{:?}", out.values.get(&LOG));
    assert!(text.contains("saw top secret"), "{text}");
    let scope = cfg.scope();
    let mut checked = 0;
    for t in store.list(&scope).await.unwrap() {
        let full = store
            .get_tuple(&scope, Some(&t.checkpoint.id))
            .await
            .unwrap()
            .unwrap();
        // The node copied what it saw into `log` (a tracked channel, stored as written);
        // the untracked input itself must not be stored with `__start__`.
        if let Some(start) = full.checkpoint.values.get("__start__") {
            assert!(!start.to_string().contains("top secret"), "{start}");
            assert!(start.to_string().contains("log"), "{start}");
            checked += 1;
        }
    }
    assert_eq!(checked, 1, "the input checkpoint stores `__start__`");
}

/// A resume addressed to the thread's newest checkpoint is a run on the head: the input of an
/// earlier command stored there is kept, and the new command's input joins it, as without the
/// address (before, the stored input was dropped from the run, and the new input, stored after
/// it by position, was refused by the store, so a later run applied the old input instead).
#[tokio::test]
async fn a_resume_addressed_to_the_newest_checkpoint_is_a_run_on_the_head() {
    fn twice_asking() -> antler_graph::CompiledGraph {
        let mut g = graph();
        g.add_node("ask", |_s: State, ctx: Context| async move {
            let first = ctx.interrupt(json!("first?"))?;
            let second = ctx.interrupt(json!("second?"))?;
            Ok(Update::new().set(&LOG, log(&[&format!("{first}/{second}")])))
        });
        g.add_edge("__start__", "ask").add_edge("ask", "__end__");
        memory(g)
    }
    let mut results = Vec::new();
    for addressed in [false, true] {
        let graph = twice_asking();
        let cfg = RunConfig::new("t");
        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert_eq!(out.interrupts.len(), 1);
        let out = graph
            .invoke(
                Command::resume(json!("x")).update(Update::new().set(&LOG, log(&["A"]))),
                &cfg,
            )
            .await
            .unwrap();
        assert_eq!(out.interrupts.len(), 1, "asks the second question");
        let newest = graph.get_state(&cfg).await.unwrap().unwrap();
        let at = if addressed {
            cfg.clone().with_checkpoint(newest.checkpoint_id.clone())
        } else {
            cfg.clone()
        };
        let out = graph
            .invoke(
                Command::resume(json!("y")).update(Update::new().set(&LOG, log(&["B"]))),
                &at,
            )
            .await
            .unwrap();
        results.push(format!("{:?}", out.values.get(&LOG)));
    }
    assert_eq!(results[0], results[1]);
}

/// A live write the compiled graph cannot take fails the task with a typed error naming it,
/// where the reference drops it with at most a warning (runtime-spec §2.4 step 5, §2.3): an
/// update of an undeclared channel, a goto or `Send` to an unknown node, and a subgraph's
/// command for its parent that updates a channel only the subgraph declares. Dropping them
/// would lose the node's output without a sign.
#[tokio::test]
async fn live_writes_to_an_undeclared_channel_or_node_fail_the_task() {
    use antler_graph::{ErrorKind, MemoryCheckpointer, Send as Packet, StateGraph};
    const UNDECLARED: Key<String> = Key::from_static("undeclared");
    let run = |g: antler_graph::StateGraph| async move {
        memory(g)
            .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
            .await
            .unwrap_err()
    };
    let single = |out: fn() -> Command| {
        let mut g = graph();
        g.add_node("a", move |_s: State, _c| std::future::ready(Ok(out())));
        g.add_edge("__start__", "a").add_edge("a", "__end__");
        g
    };
    for (what, g, named) in [
        (
            "update",
            single(|| Command::new().update(Update::new().set(&UNDECLARED, "x".to_owned()))),
            "undeclared",
        ),
        ("goto", single(|| Command::new().goto("nowhere")), "nowhere"),
        (
            "send",
            single(|| Command::new().goto(Packet::new("nowhere"))),
            "nowhere",
        ),
    ] {
        let e = run(g).await;
        assert_eq!(e.kind(), ErrorKind::InvalidUpdate, "{what}: {e}");
        assert!(e.to_string().contains(named), "{what}: {e}");
    }
    // A subgraph's command for its parent, updating a channel the parent does not declare.
    let mut inner = graph();
    inner
        .channel(&UNDECLARED, ChannelSpec::last_value())
        .expect("declared once");
    inner.add_node("escalate", |_s: State, _c| async {
        Ok(Command::new()
            .update(Update::new().set(&UNDECLARED, "child only".to_owned()))
            .to_parent())
    });
    inner
        .add_edge("__start__", "escalate")
        .add_edge("escalate", "__end__");
    let mut outer = StateGraph::new();
    outer
        .channel(&LOG, ChannelSpec::last_value())
        .expect("declared once");
    only_subgraph(
        &mut outer,
        "sub",
        inner.compile().expect("valid inner graph"),
    );
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let e = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUpdate, "{e}");
    assert!(e.to_string().contains("undeclared"), "{e}");
}

/// A memory store whose writes fail while the returned flag is set.
fn breakable() -> (
    Arc<crate::common::Failing>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = broken.clone();
    let store = crate::common::Failing::new(move |_, _| flag.load(Ordering::SeqCst));
    (Arc::new(store), broken)
}

/// A run that fails, and whose buffered state (exit durability) then fails to store, reports
/// both: the node's error, and the store's as the source (kind `Storage`: the thread may lack
/// the failed step). Before 2026-12-01 the store's error replaced the node's, which was lost.
/// The same under sync and async durability, where the failed task's error write is stored
/// as it fails (before, that store error replaced the node's as well).
#[tokio::test]
async fn a_failed_run_whose_state_fails_to_store_reports_both_errors() {
    use antler_graph::{Durability, ErrorKind};
    let (store, broken) = breakable();
    for durability in [Durability::Exit, Durability::Sync, Durability::Async] {
        broken.store(false, Ordering::SeqCst);
        let mut g = graph();
        let s = broken.clone();
        g.add_node("boom", move |_s: State, _c| {
            // The store goes down while the node fails: storing its error fails too.
            s.store(true, Ordering::SeqCst);
            async { Err::<Update, _>(NodeError::failed("the node's own failure")) }
        });
        g.add_edge("__start__", "boom").add_edge("boom", "__end__");
        let graph = g.compile().unwrap().with_checkpointer(store.clone());
        let cfg = RunConfig::new(format!("t-{durability:?}")).with_durability(durability);
        let e = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage, "{durability:?}: {e}");
        let Error::RunFailedUnstored { error, storage } = &e else {
            panic!("{durability:?}: {e:?}");
        };
        assert_eq!(error.kind(), ErrorKind::Node, "{durability:?}: {error}");
        assert!(e.to_string().contains("the node's own failure"), "{e}");
        assert!(
            storage.to_string().contains("the store is down"),
            "{durability:?}: {storage}"
        );
    }
    // A failure the store takes in stride is reported as it is.
    broken.store(false, Ordering::SeqCst);
    let mut g = graph_fails_without_breaking();
    g.add_edge("__start__", "boom").add_edge("boom", "__end__");
    let e = g
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .invoke(
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("u").with_durability(antler_graph::Durability::Exit),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Node, "{e}");
}

/// A step that stops on a store error cancels its tasks still running, and waits for them to
/// end, before the run returns: none of them (a subgraph that stores what it buffered when
/// it is dropped, say) still runs once the caller has the error. Before 2026-12-01 they were
/// only told to stop, and ended some time after the run returned.
#[tokio::test]
async fn a_step_stopped_by_a_store_error_ends_its_running_tasks_first() {
    struct Ended(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (store, broken) = breakable();
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let mut g = graph();
    let (e, st) = (ended.clone(), started.clone());
    g.add_node("slow", move |_s: State, _c| {
        let guard = Ended(e.clone());
        let st = st.clone();
        async move {
            let _guard = guard;
            st.notify_one();
            std::future::pending::<()>().await;
            Ok(Update::new())
        }
    });
    let (s, st) = (broken.clone(), started.clone());
    g.add_node("boom", move |_s: State, _c| {
        let (s, st) = (s.clone(), st.clone());
        async move {
            // Fails once its sibling runs, with the store down: storing the failure fails.
            st.notified().await;
            s.store(true, Ordering::SeqCst);
            Err::<Update, _>(NodeError::failed("the node's own failure"))
        }
    });
    g.add_edge("__start__", "slow")
        .add_edge("__start__", "boom");
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Sync);
    let e = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::RunFailedUnstored { .. }), "{e:?}");
    assert!(
        ended.load(Ordering::SeqCst),
        "the sibling still ran when the run returned"
    );
}

fn graph_fails_without_breaking() -> antler_graph::StateGraph {
    let mut g = graph();
    g.add_node("boom", |_s: State, _c| async {
        Err::<Update, _>(NodeError::failed("the node's own failure"))
    });
    g
}

/// One run of the root graph per thread at a time in a process: a second run, or an
/// `update_state`, on a thread whose run is going fails with `ThreadBusy` before it reads or
/// writes anything, while other threads run; once the run has ended (or its stream is dropped)
/// the thread takes the next one. Before 2026-12-01 both ran and the thread forked, and with a
/// delta channel a cold read of one branch could show the other's task writes.
#[tokio::test]
async fn a_second_run_on_a_busy_thread_is_refused() {
    use antler_graph::{ErrorKind, StreamModes};
    use futures::StreamExt;
    let entered = Arc::new(Notify::new());
    // Permits to leave `slow`: one per run let through.
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let mut g = graph();
    let (e, r) = (entered.clone(), release.clone());
    g.add_node("slow", move |_s: State, _c| {
        let (e, r) = (e.clone(), r.clone());
        async move {
            e.notify_one();
            r.acquire().await.expect("never closed").forget();
            Ok(Update::new().set(&LOG, log(&["slow"])))
        }
    });
    g.add_edge("__start__", "slow").add_edge("slow", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let first = tokio::spawn({
        let (graph, cfg) = (graph.clone(), cfg.clone());
        async move {
            graph
                .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
                .await
        }
    });
    entered.notified().await;
    let busy = |e: Error| {
        assert!(
            matches!(&e, Error::ThreadBusy { thread } if thread == "t"),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::Busy);
    };
    // Bounded: a second run that is not refused would wait in `slow` too.
    busy(
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            graph.invoke(Update::new().set(&LOG, log(&["second"])), &cfg),
        )
        .await
        .expect("refused at once, not run")
        .unwrap_err(),
    );
    busy(
        graph
            .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), None)
            .await
            .unwrap_err(),
    );
    // Reads go on, and so do runs of other threads (here one that waits in `slow` too).
    assert!(graph.get_state(&cfg).await.is_ok());
    let other = tokio::spawn({
        let graph = graph.clone();
        async move {
            graph
                .invoke(
                    Update::new().set(&LOG, log(&["other"])),
                    &RunConfig::new("t2"),
                )
                .await
        }
    });
    entered.notified().await;
    // Both runs are in `slow` now: let both through.
    release.add_permits(2);
    other
        .await
        .expect("no panic")
        .expect("another thread runs meanwhile");
    let out = first
        .await
        .expect("no panic")
        .expect("the first run finishes");
    assert_eq!(out.values.get(&LOG), Some(&log(&["in", "slow"])));
    // The thread is free again; a dropped stream frees it too.
    {
        let mut s = Box::pin(graph.stream(
            Update::new().set(&LOG, log(&["again"])),
            &cfg,
            StreamModes::default(),
        ));
        let poll = async { while s.next().await.is_some() {} };
        tokio::select! {
            biased;
            () = poll => panic!("the run must wait in `slow`"),
            () = entered.notified() => {}
        }
    }
    let next = graph
        .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), None)
        .await;
    assert!(next.is_ok(), "{next:?}");
}

/// A join into a name that is no node does not compile (before, the empty name passed the
/// check and the join was dropped, its sources wired to the end), and neither do two joins
/// whose barrier channels would share one name (node names may hold `+`; before, the second
/// join's stored barrier overwrote the first's, and a restored barrier could complete early).
#[test]
fn joins_into_no_node_or_with_colliding_names_do_not_compile() {
    use antler_graph::BuildError;
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    g.add_join(["a"], "");
    assert!(
        matches!(g.compile().err(), Some(BuildError::UnknownNode { ref node, .. }) if node.is_empty())
    );

    let mut g = graph();
    for n in ["a+b", "c", "a", "b+c", "d"] {
        g.add_node(n, add("n"));
        g.add_edge("__start__", n);
    }
    g.add_edge("d", "__end__");
    g.add_join(["a+b", "c"], "d").add_join(["a", "b+c"], "d");
    assert!(
        matches!(g.compile().err(), Some(BuildError::ChannelConflict { ref channel, .. }) if channel == "join:a+b+c:d")
    );
}

/// `compile` refuses a cycle a run cannot leave: a node's edges fire whatever it returns, so a
/// declared goto (optional) or a router's END target on a node whose edge leads back into the
/// cycle is no way out. Before 2026-12-02 either made the cycle pass, and the run went round
/// until the recursion limit.
#[test]
fn a_cycle_left_only_by_a_goto_or_a_route_beside_an_edge_back_does_not_compile() {
    use antler_graph::BuildError;
    // Node `a` that logs its name and declares `dests` as its goto targets.
    let a_going_to = |g: &mut antler_graph::StateGraph, dests: &[&str]| {
        g.add_node_with(
            "a",
            antler_graph::node_fn(add("a")),
            antler_graph::NodeOptions {
                destinations: dests.iter().map(|&d| d.into()).collect(),
                ..Default::default()
            },
        );
    };
    let cycle = || {
        let mut g = graph();
        a_going_to(&mut g, &["b"]);
        g.add_node("b", add("b"));
        g.add_edge("__start__", "a")
            .add_edge("a", "b")
            .add_edge("b", "a");
        g
    };
    assert!(
        matches!(cycle().compile().err(), Some(BuildError::NoPathToEnd { ref node }) if node == "a")
    );
    let mut g = cycle();
    g.add_router("a", Some(vec!["__end__".into()]), |_: &State| {
        vec!["__end__".into()]
    });
    assert!(matches!(g.compile().err(), Some(BuildError::NoPathToEnd { ref node }) if node == "a"));
    // A router that can pick END on the node whose edge closes the loop is a way out; so is a
    // goto on a node with no edge of its own.
    let mut g = graph();
    g.add_node("agent", add("agent"))
        .add_node("tools", add("tools"));
    g.add_edge("__start__", "agent").add_edge("tools", "agent");
    g.add_router(
        "agent",
        Some(vec!["tools".into(), "__end__".into()]),
        |_: &State| vec!["__end__".into()],
    );
    g.compile().expect("the agent loop ends through its router");
    // A router whose every target loops back is a trap.
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a");
    g.add_router("a", Some(vec!["a".into()]), |_: &State| vec!["a".into()]);
    assert!(matches!(g.compile().err(), Some(BuildError::NoPathToEnd { ref node }) if node == "a"));
    let mut g = graph();
    a_going_to(&mut g, &["a"]);
    g.add_edge("__start__", "a");
    g.compile()
        .expect("a goto is optional: `a` may end its branch");
}

/// A join's target is reached only when every source is: one whose other source runs only
/// after the target never opens its barrier, so both are unreachable. Before 2026-12-02 each
/// source counted as an edge of its own and the graph compiled, with nodes that never ran.
#[test]
fn a_join_waiting_on_its_own_target_leaves_its_nodes_unreachable() {
    use antler_graph::BuildError;
    let mut g = graph();
    g.add_node("a", add("a"))
        .add_node("b", add("b"))
        .add_node("c", add("c"));
    g.add_edge("__start__", "a")
        .add_edge("c", "b")
        .add_edge("c", "__end__");
    g.add_join(["a", "b"], "c");
    assert!(matches!(g.compile().err(), Some(BuildError::Unreachable { ref node }) if node == "b"));
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("b", "a").add_edge("a", "__end__");
    g.add_join(["__start__", "a"], "b");
    assert!(matches!(g.compile().err(), Some(BuildError::Unreachable { ref node }) if node == "a"));
}

/// A join into END, as the reference takes it, compiles and waits for nothing: each source ends
/// its branch. Before 2026-12-02 it was `UnknownNode`.
#[tokio::test]
async fn a_join_into_end_compiles_and_each_source_ends_its_branch() {
    let mut g = graph();
    g.add_node("a", add("a")).add_node("b", add("b"));
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    g.add_join(["a", "b"], "__end__");
    let graph = memory(g);
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a", "b"]));
    assert!(!out.paused);
}

/// A channel declaration that failed fails `compile` too, whether or not the caller looked at
/// the declaration's result. Before 2026-12-02 the first declaration silently won.
#[test]
fn a_failed_channel_declaration_fails_compile() {
    use antler_graph::BuildError;
    let mut g = graph();
    g.add_node("a", add("a"));
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let again: Key<Vec<String>> = Key::new("log");
    let ignored = g.channel(&again, ChannelSpec::last_value()).is_err();
    assert!(ignored, "a different kind under the same name is refused");
    assert!(matches!(
        g.compile().err(),
        Some(BuildError::ChannelConflict { ref channel, .. }) if channel == "log"
    ));
}

/// A plain write to a reducer channel whose own JSON looks like the stored form of an
/// `Overwrite` (`{"__overwrite__": …}`) is stored escaped and reads back plain: the state a run
/// shows, the head's state and a resume agree. Before 2026-12-01 it was read back as an
/// Overwrite, so the resumed thread lost what the reducer had kept.
#[tokio::test]
async fn a_plain_write_shaped_like_an_overwrite_stays_plain_through_the_store() {
    const DOC: Key<serde_json::Value> = Key::from_static("doc");
    let mut g = graph();
    g.channel(
        &DOC,
        ChannelSpec::reducer(
            "merge",
            || json!({}),
            |acc: &serde_json::Value, ws: &[serde_json::Value]| {
                let mut out = acc.as_object().cloned().unwrap_or_default();
                for w in ws {
                    if let Some(m) = w.as_object() {
                        out.extend(m.clone());
                    }
                }
                Ok(serde_json::Value::Object(out))
            },
        ),
    )
    .expect("declared once");
    g.add_node("a", |_s: State, _c| async {
        Ok(Update::new().set(&DOC, json!({"__overwrite__": {"x": 1}})))
    });
    g.add_node("b", |_s: State, ctx: Context| async move {
        ctx.interrupt(json!("go on?"))?;
        Ok(Update::new())
    });
    g.add_edge("__start__", "a")
        .add_edge("__start__", "b")
        .add_edge("a", "__end__")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&DOC, json!({"keep": true})), &cfg)
        .await
        .unwrap();
    let want = json!({"keep": true, "__overwrite__": {"x": 1}});
    assert_eq!(out.values.get(&DOC), Some(&want));
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.values.get(&DOC), Some(&want));
    let done = graph
        .invoke(Command::resume(json!("yes")), &cfg)
        .await
        .unwrap();
    assert_eq!(done.values.get(&DOC), Some(&want));
    // A stream shows the write as the node wrote it, not its stored escape.
    use futures::StreamExt;
    let items: Vec<_> = graph
        .stream(
            Update::new().set(&DOC, json!({"keep": true})),
            &RunConfig::new("streamed"),
            antler_graph::StreamModes::all(),
        )
        .collect()
        .await;
    let shown: Vec<serde_json::Value> = items
        .into_iter()
        .filter_map(|i| match i {
            Ok(antler_graph::StreamItem::Event(antler_graph::StreamEvent::Updates {
                node,
                writes,
                ..
            })) if node.as_str() == "a" => {
                writes.into_iter().find(|(c, _)| c == "doc").map(|(_, v)| v)
            }
            _ => None,
        })
        .collect();
    assert_eq!(shown, [json!({"__overwrite__": {"x": 1}})]);
}

/// Turning the hot cache off holds whatever the order of the builder calls: a checkpointer
/// attached after `with_hot_cache(false)` keeps it off (before 2026-12-01 it turned it back
/// on). With it on, the second run on the thread starts from the cache.
#[tokio::test]
async fn the_hot_cache_stays_off_when_the_checkpointer_comes_after() {
    for enabled in [false, true] {
        let mut g = graph();
        g.add_node("a", add("a"));
        g.add_edge("__start__", "a").add_edge("a", "__end__");
        let graph = g
            .compile()
            .unwrap()
            .with_hot_cache(enabled)
            .with_checkpointer(Arc::new(antler_graph::MemoryCheckpointer::new()));
        let cfg = RunConfig::new("t");
        for _ in 0..2 {
            graph
                .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
                .await
                .unwrap();
        }
        assert_eq!(graph.hot_cache_hits() > 0, enabled, "enabled: {enabled}");
    }
}

/// `update_state` as a node the graph lacks is an invalid update naming the node, as the
/// reference's `InvalidUpdateError` (before, `AmbiguousAsNode`, kind `Input`); nothing is
/// stored.
#[tokio::test]
async fn update_state_as_an_unknown_node_is_an_invalid_update() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let before = graph.get_state_history(&cfg).await.unwrap().len();
    let err = graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["x"])),
            Some("typo".into()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownNode { node } if node == "typo"),
        "{err}"
    );
    assert_eq!(err.kind(), antler_graph::ErrorKind::InvalidUpdate);
    assert_eq!(graph.get_state_history(&cfg).await.unwrap().len(), before);
}

/// A router that declared its targets goes nowhere else: returning another node fails the
/// step with `UndeclaredRoute` (kind `InvalidUpdate`), as the reference maps a router's result
/// through its path map and fails on a key it lacks; the graph was validated with those
/// targets. A declared target routes as before, and a `Send` is a packet, not a route.
/// Before 2026-12-02 the declared targets were only used by `compile`'s checks.
#[tokio::test]
async fn a_router_goes_only_where_it_declared() {
    for (returns, ok) in [("b", true), ("c", false), ("send c", true)] {
        let mut g = graph();
        logging_nodes(&mut g, &["a", "b", "c"]);
        // `c` is reachable through `b` (compile checks the router's declared targets).
        g.add_edge("__start__", "a")
            .add_edge("b", "c")
            .add_edge("c", "__end__");
        g.add_router(
            "a",
            Some(vec!["b".into(), "__end__".into()]),
            move |_s: &State| {
                if returns == "send c" {
                    vec![antler_graph::Goto::Send(antler_graph::Send::new("c"))]
                } else {
                    vec![returns.into()]
                }
            },
        );
        let graph = memory(g);
        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
            .await;
        if ok {
            let want: &[&str] = if returns == "b" {
                &["in", "a", "b", "c"]
            } else {
                &["in", "a", "c"]
            };
            assert_eq!(
                out.unwrap().values.get(&LOG).unwrap(),
                &log(want),
                "{returns}"
            );
        } else {
            let err = out.unwrap_err();
            assert!(
                matches!(&err, Error::UndeclaredRoute { node, target } if node == "a" && target == "c"),
                "{err}"
            );
            assert_eq!(err.kind(), antler_graph::ErrorKind::InvalidUpdate);
        }
    }
}

/// `update_state` without `as_node` takes the node whose seen version is newest only when no
/// other seen version equals it, counting every seen version on its own, as the reference
/// does: a node that saw its two triggers at one version (an edge and a join from the same
/// step) is as ambiguous as two nodes that ran in one step (before 2026-12-02 antler took
/// that node). After a plain chain the last node is still taken.
#[tokio::test]
async fn update_state_without_as_node_is_ambiguous_on_a_tie_of_seen_versions() {
    let mut g = graph();
    logging_nodes(&mut g, &["a", "b", "c"]);
    g.add_edge("__start__", "a")
        .add_edge("__start__", "b")
        .add_edge("a", "c")
        .add_join(["a", "b"], "c")
        .add_edge("c", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let err = graph
        .update_state(&cfg, Update::new().set(&LOG, log(&["x"])), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AmbiguousAsNode { .. }), "{err}");
    // A chain: the last node.
    let chain = memory(graph_chain());
    chain
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    chain
        .update_state(&cfg, Update::new().set(&LOG, log(&["x"])), None)
        .await
        .expect("the last node");
}

fn graph_chain() -> antler_graph::StateGraph {
    let mut g = graph();
    logging_nodes(&mut g, &["a", "b"]);
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    g
}
