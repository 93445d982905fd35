//! Streaming: modes, custom events, and dropping the stream mid-run.

use std::sync::Arc;

use antler_graph::{
    Context, Input, RunConfig, State, StreamEvent, StreamItem, StreamModes, TaskStatus, Update,
};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Notify;

use crate::common::{GatedStore, LOG, graph, log, memory, only_subgraph};

/// The modes' events in order. The `__start__` task, which applies the input, streams no
/// update unless `hidden` asks for it: the reference tags its start node hidden, and its
/// `updates` and `debug` streams leave it out (before, every run's first update was
/// `__start__`'s). A step's `values` event comes before its checkpoint's, as the reference's
/// `after_tick` emits values before it saves the checkpoint (before 2026-12-02, after it).
#[tokio::test]
async fn stream_modes_values_updates_custom() {
    for hidden in [false, true] {
        let mut g = graph();
        g.add_node("a", |_s, ctx: Context| async move {
            ctx.emit(json!("working"));
            Ok(Update::new().set(&LOG, log(&["a"])))
        });
        g.add_edge("__start__", "a");
        let graph = memory(g);
        let modes = StreamModes {
            values: true,
            updates: true,
            custom: true,
            debug: true,
            hidden,
            ..StreamModes::default()
        };
        let items: Vec<_> = graph
            .stream(
                Update::new().set(&LOG, log(&["in"])),
                &RunConfig::new("t"),
                modes,
            )
            .collect()
            .await;
        let mut kinds = Vec::new();
        for item in &items {
            kinds.push(match item {
                Ok(StreamItem::Event(StreamEvent::Values(v))) => {
                    format!("values {}", v.get(&LOG).map_or(0, Vec::len))
                }
                Ok(StreamItem::Event(StreamEvent::Updates { node, writes, .. })) => {
                    format!("updates {node} {}", writes.len())
                }
                Ok(StreamItem::Event(StreamEvent::Custom { node, value })) => {
                    format!("custom {node} {value}")
                }
                Ok(StreamItem::Event(StreamEvent::Task(t))) => format!("task {}", t.node),
                Ok(StreamItem::Event(StreamEvent::Checkpoint(c))) => {
                    format!("checkpoint {}", c.step)
                }
                Ok(StreamItem::Done(_)) => "done".to_owned(),
                other => format!("{other:?}"),
            });
        }
        let start: &[&str] = if hidden {
            &["updates __start__ 1", "task __start__"]
        } else {
            &[]
        };
        let want: Vec<&str> = ["checkpoint -1"]
            .into_iter()
            .chain(start.iter().copied())
            .chain([
                "values 1",
                "checkpoint 0",
                "custom a \"working\"",
                "updates a 1",
                "task a",
                "values 2",
                "checkpoint 1",
                "done",
            ])
            .collect();
        assert_eq!(kinds, want, "hidden: {hidden}");
    }
}

/// Dropping the stream while a step runs stops the run; the thread stays consistent: no checkpoint
/// for the unfinished step, finished tasks keep their saved writes, and a later resume completes it,
/// running only the unfinished task. In every durability mode: under async durability the
/// checkpoint of the finished step is stored although the run is dropped while its put may still
/// be running (before, that put only started with the next write, and was lost); under exit
/// durability the buffered checkpoint and writes are stored when the run is dropped (before,
/// nothing was).
#[tokio::test]
async fn dropping_the_stream_stops_without_corrupting_the_thread() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for durability in [
        antler_graph::Durability::Sync,
        antler_graph::Durability::Async,
        antler_graph::Durability::Exit,
    ] {
        let release = Arc::new(Notify::new());
        let started = Arc::new(Notify::new());
        let fast_runs = Arc::new(AtomicUsize::new(0));
        let mut g = graph();
        let runs = fast_runs.clone();
        g.add_node("fast", move |_s, _c| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok(Update::new().set(&LOG, log(&["fast"]))) }
        });
        let (r, st) = (release.clone(), started.clone());
        g.add_node("slow", move |_s: State, _c| {
            let (r, st) = (r.clone(), st.clone());
            async move {
                st.notify_one();
                r.notified().await;
                Ok(Update::new().set(&LOG, log(&["slow"])))
            }
        });
        g.add_edge("__start__", "fast")
            .add_edge("__start__", "slow");
        let graph = memory(g);
        let cfg = RunConfig::new("t").with_durability(durability);
        {
            let mut s = Box::pin(graph.stream(
                Update::new().set(&LOG, log(&["in"])),
                &cfg,
                StreamModes::all(),
            ));
            // Drive the stream until `slow` runs, then drop it. The stream is polled first, so
            // on this single-threaded runtime the run has taken `fast`'s result (finished in the
            // same wake-up as `slow` started) when it stops.
            let poll = async { while s.next().await.is_some() {} };
            tokio::select! {
                biased;
                () = poll => panic!("run must not finish while slow waits"),
                () = started.notified() => {}
            }
        }
        // Puts that outlive the dropped run run as their own tasks; the state read waits for
        // them to land.
        let snap = graph
            .get_state(&cfg)
            .await
            .unwrap()
            .expect("the thread was stored");
        assert_eq!(
            snap.step, 0,
            "{durability:?}: no checkpoint for the interrupted step"
        );
        // `fast` finished before the drop: its stored result shows on the head.
        assert_eq!(
            snap.values.get(&LOG).unwrap(),
            &log(&["in", "fast"]),
            "{durability:?}"
        );
        assert_eq!(
            snap.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
            ["slow"],
            "{durability:?}"
        );
        assert!(snap.tasks.iter().all(|t| t.status != TaskStatus::Error));
        release.notify_one();
        let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "fast", "slow"]),
            "{durability:?}"
        );
        assert_eq!(
            fast_runs.load(Ordering::SeqCst),
            1,
            "{durability:?}: the finished task kept its writes"
        );
    }
}

/// Custom events reach the stream while their task still runs (the node waits until the consumer saw it).
#[tokio::test]
async fn custom_events_arrive_while_the_task_runs() {
    let seen = Arc::new(Notify::new());
    let mut g = graph();
    let gate = seen.clone();
    g.add_node("a", move |_s: State, ctx: Context| {
        let gate = gate.clone();
        async move {
            ctx.emit(json!("started"));
            gate.notified().await;
            Ok(Update::new().set(&LOG, log(&["a"])))
        }
    });
    g.add_edge("__start__", "a");
    let graph = memory(g);
    let modes = StreamModes {
        custom: true,
        ..StreamModes::default()
    };
    let mut s = Box::pin(graph.stream(
        Update::new().set(&LOG, log(&["in"])),
        &RunConfig::new("t"),
        modes,
    ));
    let mut got = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(StreamItem::Event(StreamEvent::Custom { value, .. })) => {
                got.push(value.to_string());
                // Only now may the node finish: the event arrived before the task ended.
                seen.notify_one();
            }
            Ok(StreamItem::Done(o)) => {
                got.push(format!("done {}", o.values.get(&LOG).map_or(0, Vec::len)))
            }
            other => got.push(format!("{other:?}")),
        }
    }
    assert_eq!(got, vec!["\"started\"".to_owned(), "done 2".to_owned()]);
}

/// A subgraph paused at a static breakpoint pauses the parent without an `Interrupted` event,
/// as a static breakpoint of the parent's own does (there is no interrupt to report); the
/// final outcome says the run paused.
#[tokio::test]
async fn a_subgraph_breakpoint_streams_no_empty_interrupt_event() {
    let mut inner = graph();
    inner.add_node("first", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["first"])))
    });
    inner.add_node("second", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["second"])))
    });
    inner
        .add_edge("__start__", "first")
        .add_edge("first", "second")
        .add_edge("second", "__end__");
    inner.interrupt_before(["second"]);
    let mut outer = graph();
    only_subgraph(&mut outer, "sub", inner.compile().unwrap());
    let graph = memory(outer);
    let modes = StreamModes {
        values: true,
        updates: true,
        custom: true,
        debug: true,
        hidden: false,
        ..StreamModes::default()
    };
    let items: Vec<_> = graph
        .stream(
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("t"),
            modes,
        )
        .collect()
        .await;
    assert!(
        !items
            .iter()
            .any(|i| matches!(i, Ok(StreamItem::Event(StreamEvent::Interrupted(_))))),
        "{items:?}"
    );
    match items.last() {
        Some(Ok(StreamItem::Done(out))) => {
            assert!(out.paused);
            assert!(out.interrupts.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// Under exit durability the debug stream's last checkpoint event names the parent the store
/// records for that checkpoint (the head the run found), not a step checkpoint that was
/// buffered and never stored.
#[tokio::test]
async fn exit_durability_checkpoint_events_name_the_stored_parent() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_node("b", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["b"])))
    });
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Exit);
    for _ in 0..2 {
        let before = graph
            .get_state(&cfg)
            .await
            .unwrap()
            .map(|s| s.checkpoint_id);
        let events: Vec<_> = graph
            .stream(
                Update::new().set(&LOG, log(&["in"])),
                &cfg,
                StreamModes::all(),
            )
            .collect()
            .await;
        let last = events
            .iter()
            .rev()
            .find_map(|e| match e {
                Ok(StreamItem::Event(StreamEvent::Checkpoint(c))) => Some(c.clone()),
                _ => None,
            })
            .expect("checkpoint events");
        let head = graph.get_state(&cfg).await.unwrap().expect("stored");
        assert_eq!(last.id, head.checkpoint_id);
        assert_eq!(last.parent, before, "the head the run found");
        assert_eq!(head.parent_id, before);
    }
}

/// A run that stops on an interrupt streams a last `values` event with the finished sibling's
/// writes applied, before the interrupt, as the reference does; the stored head keeps them
/// pending.
#[tokio::test]
async fn an_interrupted_step_streams_its_finished_siblings_values() {
    let graph = ask_beside_other(false);
    let modes = StreamModes {
        values: true,
        ..StreamModes::default()
    };
    let cfg = RunConfig::new("t");
    let items: Vec<_> = graph
        .stream(Update::new().set(&LOG, log(&["in"])), &cfg, modes)
        .collect()
        .await;
    let kinds: Vec<String> = items
        .iter()
        .map(|item| match item {
            Ok(StreamItem::Event(StreamEvent::Values(v))) => {
                format!("values {:?}", v.get(&LOG).cloned().unwrap_or_default())
            }
            Ok(StreamItem::Event(StreamEvent::Interrupted(i))) => {
                format!("interrupted {}", i.len())
            }
            Ok(StreamItem::Done(o)) => {
                format!("done {:?}", o.values.get(&LOG).cloned().unwrap_or_default())
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "values [\"in\"]",
            "values [\"in\", \"other\"]",
            "interrupted 1",
            "done [\"in\", \"other\"]"
        ]
    );
    // The head shows the finished sibling's result applied and only `ask` next, as the
    // reference's `get_state` does (`apply_pending_writes`); the checkpoint addressed by id
    // shows what it stores.
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.values.get(&LOG), Some(&log(&["in", "other"])));
    assert_eq!(
        head.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["ask"]
    );
    let stored = graph
        .get_state(&cfg.clone().with_checkpoint(head.checkpoint_id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.values.get(&LOG), Some(&log(&["in"])));
    assert_eq!(
        stored.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["ask", "other"]
    );
}

/// `ask` (which stops on an interrupt, or fails) beside `other` (which writes the log), both
/// after `__start__`, over an in-process store.
fn ask_beside_other(fails: bool) -> antler_graph::CompiledGraph {
    let mut g = graph();
    g.add_node("ask", move |_s, ctx: Context| async move {
        if fails {
            return Err(antler_graph::NodeError::failed("broken"));
        }
        let answer = ctx.interrupt(json!("ok?"))?;
        Ok(Update::new().set(&LOG, vec![answer.to_string()]))
    });
    g.add_node("other", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["other"])))
    });
    g.add_edge("__start__", "ask")
        .add_edge("__start__", "other");
    memory(g)
}

/// Renders a stream's `updates`, interrupt, end and error items.
fn update_kinds(items: &[antler_graph::Result<StreamItem>]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(StreamItem::Event(StreamEvent::Updates {
                node,
                writes,
                cached,
                ..
            })) => Some(format!(
                "updates {node} {}{}",
                writes.len(),
                if *cached { " cached" } else { "" }
            )),
            Ok(StreamItem::Event(StreamEvent::Interrupted(i))) => {
                Some(format!("interrupted {}", i.len()))
            }
            Ok(StreamItem::Done(_)) => Some("done".to_owned()),
            Err(_) => Some("error".to_owned()),
            Ok(_) => None,
        })
        .collect()
}

/// The reference emits a task's updates as it finishes: a step that stops on a sibling's
/// interrupt or error still reports its finished tasks' writes, before the interrupt or the
/// error (before, only steps that finished streamed updates). Resuming the step reports them
/// again marked cached, as the reference does, so a consumer can tell the copy.
#[tokio::test]
async fn a_step_that_stops_streams_its_finished_tasks_updates_first() {
    for fails in [false, true] {
        let graph = ask_beside_other(fails);
        let modes = StreamModes {
            updates: true,
            ..StreamModes::default()
        };
        let cfg = RunConfig::new("t");
        let items: Vec<_> = graph
            .stream(Update::new().set(&LOG, log(&["in"])), &cfg, modes)
            .collect()
            .await;
        let end: &[&str] = if fails {
            &["error"]
        } else {
            &["interrupted 1", "done"]
        };
        let want: Vec<&str> = ["updates other 1"]
            .into_iter()
            .chain(end.iter().copied())
            .collect();
        assert_eq!(update_kinds(&items), want, "fails: {fails}");
        if !fails {
            let items: Vec<_> = graph
                .stream(antler_graph::Command::resume(json!("yes")), &cfg, modes)
                .collect()
                .await;
            assert_eq!(
                update_kinds(&items),
                ["updates ask 1", "updates other 1 cached", "done"]
            );
        }
    }
}

/// A resumed run streams the state it resumes from first, as the reference's first tick does
/// (before, its first `values` event came only after its first step).
#[tokio::test]
async fn a_resumed_run_streams_the_state_it_resumes_from_first() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a");
    g.interrupt_before(["a"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let modes = StreamModes {
        values: true,
        ..StreamModes::default()
    };
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let items: Vec<_> = graph.stream(Input::Continue, &cfg, modes).collect().await;
    let values: Vec<Vec<String>> = items
        .iter()
        .filter_map(|item| match item {
            Ok(StreamItem::Event(StreamEvent::Values(v))) => {
                Some(v.get(&LOG).cloned().unwrap_or_default())
            }
            _ => None,
        })
        .collect();
    assert_eq!(values, [log(&["in"]), log(&["in", "a"])]);
}

/// Runtime-spec §2.6: what a run stored is stored by the time it ends, also when it ends by its
/// stream being dropped. The reference finishes its saves when the stream closes; here a
/// dropped run's store operations finish on their own, and the next run, state read or update
/// of the thread waits for them. Before, a run started right after the drop read the previous
/// head: the dropped run's step was lost under the new run's (async and sync durability), or
/// the new run started the thread afresh beside it (exit durability).
#[tokio::test]
async fn a_run_started_right_after_a_dropped_stream_builds_on_what_the_dropped_run_stored() {
    use antler_graph::Durability;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for (durability, update) in [
        (Durability::Sync, false),
        (Durability::Async, false),
        (Durability::Exit, false),
        (Durability::Sync, true),
        (Durability::Exit, true),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Notify::new());
        let mut g = graph();
        let c = calls.clone();
        g.add_node("a", move |_s: State, _c| {
            let n = c.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok(Update::new().set(&LOG, vec![format!("a{n}")])) }
        });
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, d) = (started.clone(), dropped.clone());
        g.add_node("b", move |_s: State, _c| {
            let first_run = !d.load(Ordering::SeqCst);
            let s = s.clone();
            async move {
                if first_run {
                    // The first run's `b` never finishes: its stream is dropped meanwhile.
                    s.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok(Update::new().set(&LOG, log(&["b"])))
            }
        });
        g.add_edge("__start__", "a").add_edge("a", "b");
        let store = Arc::new(GatedStore::new(1));
        let graph = g
            .compile()
            .expect("valid graph")
            .with_checkpointer(store.clone());
        let cfg = RunConfig::new("t").with_durability(durability);
        {
            let mut s = Box::pin(graph.stream(
                Update::new().set(&LOG, log(&["in"])),
                &cfg,
                StreamModes::all(),
            ));
            let poll = async { while s.next().await.is_some() {} };
            // Sync durability waits in `a`'s step checkpoint put (at the gate); async durability
            // has that put in flight (at the gate) while `b` runs; exit durability stores it only
            // when the dropped run flushes.
            let reached = async {
                if durability == Durability::Exit {
                    started.notified().await;
                } else {
                    store.entered.notified().await;
                }
            };
            tokio::select! {
                biased;
                () = poll => panic!("{durability:?}: the run must not finish"),
                () = reached => {}
            }
        }
        dropped.store(true, Ordering::SeqCst);
        // The next call: a run with new input, or an update as `a`.
        let next = tokio::spawn({
            let graph = graph.clone();
            async move {
                let cfg = RunConfig::new("t");
                if update {
                    graph
                        .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), None)
                        .await?;
                    Ok(graph.get_state(&cfg).await?.map(|s| s.values))
                } else {
                    let input = Update::new().set(&LOG, log(&["in"]));
                    Ok(Some(graph.invoke(input, &cfg).await?.values))
                }
            }
        });
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(
            !next.is_finished(),
            "{durability:?}/{update}: the next call waits for the dropped run's checkpoint"
        );
        store.open();
        let out: antler_graph::Result<Option<State>> = next.await.expect("no panic");
        let values = out
            .unwrap_or_else(|e| panic!("{durability:?}/{update}: {e}"))
            .expect("a stored thread");
        let want = if update {
            log(&["in", "a1", "u"])
        } else {
            log(&["in", "a1", "in", "a2", "b"])
        };
        assert_eq!(
            values.get(&LOG),
            Some(&want),
            "{durability:?}/{update}: the next call builds on the dropped run's step"
        );
    }
}

/// A subgraph task reads its own state when it starts; it does not wait for its enclosing
/// run's checkpoint put still in flight (async durability keeps overlapping the next step).
#[tokio::test]
async fn a_subgraph_task_does_not_wait_for_its_enclosing_runs_put() {
    let inner_started = Arc::new(Notify::new());
    let mut inner = graph();
    let s = inner_started.clone();
    inner.add_node("inside", move |_s: State, _c| {
        let s = s.clone();
        async move {
            s.notify_one();
            Ok(Update::new().set(&LOG, log(&["inside"])))
        }
    });
    inner.add_edge("__start__", "inside");
    let mut outer = graph();
    outer.add_node("pre", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["pre"])))
    });
    outer.add_subgraph("sub", inner.compile().expect("valid subgraph"));
    outer.add_edge("__start__", "pre").add_edge("pre", "sub");
    let store = Arc::new(GatedStore::new(1));
    let graph = outer
        .compile()
        .expect("valid graph")
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Async);
    let run = tokio::spawn({
        let graph = graph.clone();
        let cfg = cfg.clone();
        async move {
            graph
                .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
                .await
        }
    });
    // `pre`'s step checkpoint is held at the gate while `sub` runs.
    tokio::time::timeout(std::time::Duration::from_secs(10), inner_started.notified())
        .await
        .expect("the subgraph starts while the enclosing put is in flight");
    store.open();
    let out = run.await.expect("no panic").expect("the run finishes");
    assert_eq!(
        out.values.get(&LOG),
        Some(&log(&["in", "pre", "in", "pre", "inside"]))
    );
}

/// A subgraph's run streams nothing to the enclosing stream, custom events included: the
/// reference drops a subgraph's events unless the caller asks for them with `subgraphs=True`
/// (`StreamModes::subgraphs` here). The parent's own custom events still arrive.
#[tokio::test]
async fn a_subgraphs_custom_events_are_not_streamed() {
    let mut inner = graph();
    emitting(&mut inner, "deep", "from the subgraph");
    inner
        .add_edge("__start__", "deep")
        .add_edge("deep", "__end__");
    let graph = then_top(inner.compile().unwrap());
    let modes = StreamModes {
        custom: true,
        ..StreamModes::default()
    };
    let items: Vec<_> = graph
        .stream(
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("t"),
            modes,
        )
        .collect()
        .await;
    let custom: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamItem::Event(StreamEvent::Custom { node, value })) => {
                Some(format!("{node} {value}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(custom, ["top \"from the parent\""]);
    assert!(
        !items
            .iter()
            .any(|i| matches!(i, Ok(StreamItem::Subgraph { .. })))
    );
    assert!(matches!(items.last(), Some(Ok(StreamItem::Done(_)))));
}

/// With `subgraphs`, the runs of subgraphs, however deep, stream their events in the modes
/// asked for, tagged with the namespace each runs in (the namespace its task names in the
/// parent's snapshot), as the reference's `subgraphs=True` stream does, before the parent's
/// update of the subgraph node; the streamed graph's own events stay untagged. A caller's run
/// given a namespace is refused (`NamespacedRun`). Before 2026-12-02 no subgraph event was
/// streamed, and such a run stored the graph's checkpoints in that namespace.
#[tokio::test]
async fn subgraph_events_stream_tagged_with_their_namespace_when_asked() {
    let mut inner = graph();
    emitting(&mut inner, "deep", "from the inner graph");
    inner
        .add_edge("__start__", "deep")
        .add_edge("deep", "__end__");
    let mut mid = graph();
    emitting(&mut mid, "m", "from the middle graph");
    mid.add_subgraph("inner", inner.compile().unwrap());
    mid.add_edge("__start__", "m")
        .add_edge("m", "inner")
        .add_edge("inner", "__end__");
    let graph = then_top(mid.compile().unwrap());
    let modes = StreamModes {
        custom: true,
        updates: true,
        subgraphs: true,
        ..StreamModes::default()
    };
    let cfg = RunConfig::new("t");
    let items: Vec<_> = graph
        .stream(Update::new().set(&LOG, log(&["in"])), &cfg, modes)
        .collect()
        .await;
    let render = |e: &StreamEvent| match e {
        StreamEvent::Custom { node, value } => format!("custom {node} {value}"),
        StreamEvent::Updates { node, .. } => format!("updates {node}"),
        other => format!("{other:?}"),
    };
    let seen: Vec<(String, String)> = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamItem::Event(e)) => Some((String::new(), render(e))),
            Ok(StreamItem::Subgraph { namespace, event }) => {
                Some((namespace.clone(), render(event)))
            }
            _ => None,
        })
        .collect();
    // The namespaces, as the snapshots name them.
    let history = graph.get_state_history(&cfg).await.unwrap();
    let sub_ns = history
        .iter()
        .find_map(|s| s.tasks.first().and_then(|t| t.subgraph_ns.clone()))
        .expect("the step that ran `sub`");
    let mut mid_cfg = RunConfig::new("t");
    mid_cfg.checkpoint_ns = sub_ns.clone();
    let inner_ns = graph
        .get_state_history(&mid_cfg)
        .await
        .unwrap()
        .iter()
        .find_map(|s| s.tasks.first().and_then(|t| t.subgraph_ns.clone()))
        .expect("the middle step that ran `inner`");
    assert!(
        inner_ns.starts_with(&format!("{sub_ns}|inner:")),
        "{inner_ns}"
    );
    let expected: Vec<(String, String)> = [
        (&sub_ns, "custom m \"from the middle graph\""),
        (&sub_ns, "updates m"),
        (&inner_ns, "custom deep \"from the inner graph\""),
        (&inner_ns, "updates deep"),
        (&sub_ns, "updates inner"),
        (&String::new(), "updates sub"),
        (&String::new(), "custom top \"from the parent\""),
        (&String::new(), "updates top"),
    ]
    .into_iter()
    .map(|(ns, e)| (ns.clone(), e.to_owned()))
    .collect();
    assert_eq!(seen, expected);
    assert!(matches!(items.last(), Some(Ok(StreamItem::Done(_)))));

    // A caller's run in a namespace is refused (a subgraph's namespace is its parent's to
    // run), streaming nothing but the error.
    let mut own = RunConfig::new("t2");
    own.checkpoint_ns = "elsewhere:1".to_owned();
    let items: Vec<_> = graph
        .stream(Update::new().set(&LOG, log(&["in"])), &own, modes)
        .collect()
        .await;
    assert!(
        matches!(
            items.as_slice(),
            [Err(antler_graph::Error::NamespacedRun { namespace })] if namespace == "elsewhere:1"
        ),
        "{items:?}"
    );
}

/// The stream ends with the run's outcome although a node left a clone of its `Context` in a
/// task of its own (which could still emit): before, the stream stayed open until that task
/// dropped the clone, here never.
#[tokio::test]
async fn the_stream_ends_with_the_outcome_whatever_a_node_left_running() {
    let mut g = graph();
    g.add_node("a", |_s, ctx: Context| async move {
        tokio::spawn(async move {
            std::future::pending::<()>().await;
            ctx.emit(json!("never"));
        });
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let graph = memory(g);
    let modes = StreamModes {
        custom: true,
        ..StreamModes::default()
    };
    let items: Vec<_> = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        graph
            .stream(
                Update::new().set(&LOG, log(&["in"])),
                &RunConfig::new("t"),
                modes,
            )
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the stream ended");
    assert!(
        matches!(items.last(), Some(Ok(StreamItem::Done(_)))),
        "{items:?}"
    );
}

/// A read of a subgraph's namespace through the parent waits, as one of the root namespace
/// does, for what a dropped run still stores: here the subgraph's step checkpoint, in flight
/// under async durability when the stream was dropped. Before 2026-12-02 (when such a read
/// was first handed to the subgraph) it returned the subgraph's earlier checkpoint at once.
#[tokio::test]
async fn a_read_of_a_subgraph_namespace_waits_for_the_dropped_runs_stores() {
    use std::sync::Mutex;
    let started = Arc::new(Notify::new());
    let ns = Arc::new(Mutex::new(String::new()));
    let mut inner = graph();
    inner.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    let (s, n) = (started.clone(), ns.clone());
    inner.add_node("b", move |_s: State, ctx: Context| {
        let (s, n) = (s.clone(), n.clone());
        async move {
            // The subgraph's namespace: the task's own without its last part.
            let task_ns = ctx.checkpoint_ns().to_owned();
            *n.lock().expect("not poisoned") = task_ns
                .rsplit_once('|')
                .map_or(task_ns.clone(), |(sub, _)| sub.to_owned());
            s.notify_one();
            std::future::pending::<()>().await;
            Ok(Update::new())
        }
    });
    inner.add_edge("__start__", "a").add_edge("a", "b");
    let mut outer = graph();
    outer.add_subgraph("sub", inner.compile().expect("valid subgraph"));
    outer.add_edge("__start__", "sub");
    // Step 1 is only the subgraph's (after `a`): the root never gets past step 0 here.
    let store = Arc::new(GatedStore::new(1));
    let graph = outer
        .compile()
        .expect("valid graph")
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Async);
    {
        let mut s = Box::pin(graph.stream(
            Update::new().set(&LOG, log(&["in"])),
            &cfg,
            StreamModes::default(),
        ));
        let poll = async { while s.next().await.is_some() {} };
        let reached = async {
            store.entered.notified().await;
            started.notified().await;
        };
        tokio::select! {
            biased;
            () = poll => panic!("the run must not finish"),
            () = reached => {}
        }
    }
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = ns.lock().expect("not poisoned").clone();
    assert!(sub_cfg.checkpoint_ns.starts_with("sub:"));
    let read = tokio::spawn({
        let graph = graph.clone();
        async move { graph.get_state(&sub_cfg).await }
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(
        !read.is_finished(),
        "the read waits for the subgraph's checkpoint"
    );
    store.open();
    let snap = read
        .await
        .expect("no panic")
        .expect("read")
        .expect("the subgraph's head");
    assert_eq!(snap.next, vec!["b".into()], "the checkpoint after `a`");
}

/// With `subgraphs`, an interrupt inside a subgraph is streamed once, as the streamed graph's
/// own `Interrupted` event, after its task stored it: a consumer that stops at the first
/// `Interrupted` item finds the interrupt stored. Before, the subgraph's run streamed it
/// first, tagged, and a consumer stopping there dropped the run before the parent stored it.
#[tokio::test]
async fn a_subgraph_interrupt_streams_once_after_it_is_stored() {
    let mut inner = graph();
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        let a = ctx.interrupt(json!("inner?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("answer={a}")])))
    });
    inner
        .add_edge("__start__", "ask")
        .add_edge("ask", "__end__");
    let mut outer = graph();
    only_subgraph(&mut outer, "sub", inner.compile().expect("valid subgraph"));
    let graph = memory(outer);
    let modes = StreamModes {
        updates: true,
        values: true,
        subgraphs: true,
        ..StreamModes::default()
    };
    // The whole stream: one `Interrupted`, the graph's own.
    let items: Vec<_> = graph
        .stream(
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("t"),
            modes,
        )
        .collect()
        .await;
    let interrupted: Vec<bool> = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamItem::Event(StreamEvent::Interrupted(_))) => Some(false),
            Ok(StreamItem::Subgraph {
                event: StreamEvent::Interrupted(_),
                ..
            }) => Some(true),
            _ => None,
        })
        .collect();
    assert_eq!(interrupted, [false], "{items:?}");
    // A consumer that stops at the first `Interrupted` item, tagged or not.
    let cfg = RunConfig::new("t2");
    {
        let mut s = Box::pin(graph.stream(Update::new().set(&LOG, log(&["in"])), &cfg, modes));
        while let Some(item) = s.next().await {
            if matches!(
                item,
                Ok(StreamItem::Event(StreamEvent::Interrupted(_))
                    | StreamItem::Subgraph {
                        event: StreamEvent::Interrupted(_),
                        ..
                    })
            ) {
                break;
            }
        }
    }
    let head = graph.get_state(&cfg).await.unwrap().expect("a head");
    assert_eq!(head.interrupts().len(), 1, "the interrupt is stored");
}

/// Adds node `node`, which emits `text` as a custom event and logs its name.
fn emitting(g: &mut antler_graph::StateGraph, node: &'static str, text: &'static str) {
    g.add_node(node, move |_s, ctx: Context| async move {
        ctx.emit(json!(text));
        Ok(Update::new().set(&LOG, log(&[node])))
    });
}

/// START → `sub` (the subgraph `sub`) → `top` → END on an in-process checkpointer, where `top`
/// emits "from the parent".
fn then_top(sub: antler_graph::CompiledGraph) -> antler_graph::CompiledGraph {
    let mut outer = graph();
    outer.add_subgraph("sub", sub);
    emitting(&mut outer, "top", "from the parent");
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "top")
        .add_edge("top", "__end__");
    memory(outer)
}

/// A step that changes no state streams no `values` event, as the reference's `after_tick`
/// emits values only when the step's updated channels meet the output keys: here `a` writes
/// nothing and only routes on. Before 2026-12-02 every step streamed one, so `a`'s step sent
/// a copy of the input's values.
#[tokio::test]
async fn a_step_that_changes_no_state_streams_no_values() {
    let mut g = graph();
    g.add_node("a", |_s, _c| async { Ok(Update::new()) });
    g.add_node("b", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["b"])))
    });
    g.add_edge("__start__", "a")
        .add_edge("a", "b")
        .add_edge("b", "__end__");
    let graph = memory(g);
    let modes = StreamModes {
        values: true,
        ..StreamModes::default()
    };
    let values: Vec<usize> = graph
        .stream(
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("t"),
            modes,
        )
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .filter_map(|item| match item {
            Ok(StreamItem::Event(StreamEvent::Values(v))) => Some(v.get(&LOG).map_or(0, Vec::len)),
            _ => None,
        })
        .collect();
    assert_eq!(values, [1, 2], "the input's values, then b's");
}

/// A subgraph task of a dropped run that is still running on another worker (its node blocks
/// the thread, so the abort cannot stop it there) counts as landing on the thread until it has
/// stopped: the next run of the thread waits for it, so the subgraph's node never runs twice at
/// once, and the next run completes. Before, the dropped step's tasks were aborted without
/// anyone waiting for them, and the next run re-ran the subgraph task (same id, same
/// namespace) beside the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_runs_subgraph_task_is_waited_for_by_the_next_run() {
    use antler_graph::Durability;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (runs, active, most) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let started = Arc::new(Notify::new());
        let mut inner = graph();
        let (r, a, m, s) = (runs.clone(), active.clone(), most.clone(), started.clone());
        inner.add_node("slow", move |_s: State, _c| {
            let n = r.fetch_add(1, Ordering::SeqCst) + 1;
            let now = a.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            if n == 1 {
                // Blocks this worker: the dropped run's abort takes effect only afterwards.
                s.notify_one();
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            a.fetch_sub(1, Ordering::SeqCst);
            async move { Ok(Update::new().set(&LOG, log(&[&format!("slow{n}")]))) }
        });
        inner
            .add_edge("__start__", "slow")
            .add_edge("slow", "__end__");
        let mut outer = graph();
        only_subgraph(
            &mut outer,
            "sub",
            inner.compile().expect("valid inner graph"),
        );
        let graph = memory(outer);
        let cfg = RunConfig::new("t").with_durability(durability);
        {
            let mut s = Box::pin(graph.stream(
                Update::new().set(&LOG, log(&["in"])),
                &cfg,
                StreamModes::all(),
            ));
            let poll = async { while s.next().await.is_some() {} };
            tokio::select! {
                biased;
                () = poll => panic!("{durability:?}: the run must not finish before the drop"),
                () = started.notified() => {}
            }
        }
        let out = graph
            .invoke(Input::Continue, &cfg)
            .await
            .unwrap_or_else(|e| panic!("{durability:?}: {e}"));
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "{durability:?}: ran twice at once"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{durability:?}");
        assert!(out.interrupts.is_empty(), "{durability:?}");
    }
}
