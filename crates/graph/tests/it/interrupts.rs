//! Interrupt and resume rules (runtime-spec §2.2, §2.3, §2.7, §8; docs/super-step.md) that the
//! checklist and subgraph tests leave out: later slots of one task, nested subgraphs, errors
//! beside interrupts, static breakpoints beside commands, updates and dynamic interrupts, and
//! subgraph tasks created by `Send` packets.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use antler_graph::{
    ChannelSpec, Command, CompiledGraph, Context, Error, Input, Interrupt, InterruptId,
    MemoryCheckpointer, NodeError, RunConfig, State, StateGraph, TaskKind, TaskStatus, Update,
};
use serde_json::{Value as Json, json};

use crate::common::{ITEM, LOG, add_split, graph, log, memory, only_subgraph, trace};

/// The interrupt `node` raised among `interrupts` (exactly one).
fn of(interrupts: &[Interrupt], node: &str) -> Interrupt {
    let mut found = interrupts.iter().filter(|i| i.node.as_str() == node);
    let i = found
        .next()
        .unwrap_or_else(|| panic!("no interrupt of {node} in {interrupts:?}"));
    assert!(found.next().is_none(), "two interrupts of {node}");
    i.clone()
}

/// A resume map of the given answers.
fn answers<const N: usize>(entries: [(&Interrupt, Json); N]) -> HashMap<InterruptId, Json> {
    entries
        .into_iter()
        .map(|(i, v)| (i.id.clone(), v))
        .collect()
}

/// `(node, status)` of each task of the next step, in task order.
fn statuses(snap: &antler_graph::StateSnapshot) -> Vec<(String, TaskStatus)> {
    snap.tasks
        .iter()
        .map(|t| (t.node.as_str().to_owned(), t.status))
        .collect()
}

/// A node that counts its runs and logs `name` (after `runs` is bumped).
fn counted(
    name: &'static str,
    runs: &Arc<AtomicUsize>,
) -> impl Fn(State, Context) -> std::future::Ready<Result<Update, NodeError>> + use<> {
    let runs = runs.clone();
    move |_s, _c| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(Update::new().set(&LOG, log(&[name]))))
    }
}

/// A node that asks `"first?"`, then `"second?"`, and logs `ask=<first>,<second>`.
async fn asks_twice(_s: State, ctx: Context) -> Result<Update, NodeError> {
    let first = ctx.interrupt(json!("first?"))?;
    let second = ctx.interrupt(json!("second?"))?;
    Ok(Update::new().set(&LOG, log(&[&format!("ask={first},{second}")])))
}

/// A node that asks `"q?"` and logs `q=<answer>`.
async fn asks_once(_s: State, ctx: Context) -> Result<Update, NodeError> {
    let a = ctx.interrupt(json!("q?"))?;
    Ok(Update::new().set(&LOG, log(&[&format!("q={a}")])))
}

/// `sub` as the only node `name` of a parent that declares `log` as a last value, so the
/// subgraph's final list replaces the parent's (no double append through the nesting).
fn last_value_wrapper(name: &str, sub: CompiledGraph) -> StateGraph {
    let mut outer = StateGraph::new();
    outer
        .channel(&LOG, ChannelSpec::last_value())
        .expect("declared once");
    only_subgraph(&mut outer, name, sub);
    outer
}

/// `inner` two subgraphs deep (`mid` → `inner`), each level a [`last_value_wrapper`], over an
/// in-process checkpointer.
fn two_deep(inner: StateGraph) -> CompiledGraph {
    let mid = last_value_wrapper("inner", inner.compile().expect("valid inner graph"));
    let outer = last_value_wrapper("mid", mid.compile().expect("valid middle graph"));
    outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
}

/// Runtime-spec §2.7 (`interrupt()`: "each call in a task takes the next index from a
/// per-task counter. If the task already has a resume value for that index (from its saved
/// `__resume__` write, or the resume map), return it"; "the n-th answered slot (n>0) hashes
/// `<ns>|<n>` so several interrupts in one task get distinct ids"): a task that asks twice,
/// whose first question a resume map answered, reports its second under a new id; a resume map
/// that answers only that slot-1 id completes the task, which receives both answers in order,
/// while a sibling's interrupt stays pending (and a single value then answers it, §2.2).
#[tokio::test]
async fn a_resume_map_answers_the_second_interrupt_of_a_task_after_its_first() {
    let mut g = graph();
    g.add_node("ask", asks_twice);
    g.add_node("q", asks_once);
    g.add_edge("__start__", "ask").add_edge("__start__", "q");
    let graph = memory(g);
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 2, "{:?}", out.interrupts);
    let first = of(&out.interrupts, "ask");
    let q = of(&out.interrupts, "q");
    assert_eq!(first.value, json!("first?"));

    // Slot 0 answered by the map: `ask` takes it and stops on slot 1, under another id.
    let out = graph
        .invoke(Command::resume_map(answers([(&first, json!("a"))])), &cfg)
        .await
        .unwrap();
    assert!(out.paused);
    assert_eq!(out.interrupts.len(), 2, "{:?}", out.interrupts);
    let second = of(&out.interrupts, "ask");
    assert_eq!(second.value, json!("second?"));
    assert_ne!(second.id, first.id, "slot 1 has its own id");
    assert_eq!(of(&out.interrupts, "q"), q, "q still waits on its question");
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.interrupts(), out.interrupts);

    // Slot 1 answered by the map, by its own id only: `ask` finishes with both answers in
    // order (slot 0's from its stored answers); `q` still waits.
    let out = graph
        .invoke(Command::resume_map(answers([(&second, json!("b"))])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts, vec![q.clone()]);
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "ask=\"a\",\"b\""]),
        "the finished task's result is in the run's output"
    );
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        statuses(&snap),
        [
            ("ask".to_owned(), TaskStatus::Done),
            ("q".to_owned(), TaskStatus::Interrupted)
        ]
    );

    // Only q's interrupt is pending now: a single value answers it.
    let out = graph
        .invoke(Command::resume(json!("c")), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty() && !out.paused);
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "ask=\"a\",\"b\"", "q=\"c\""])
    );

    // Alone in its step, the task's first question answered by a single value: the map that
    // answers slot 1 by its id completes it the same way.
    let mut g = crate::common::graph();
    g.add_node("ask", asks_twice);
    g.add_edge("__start__", "ask");
    let graph = memory(g);
    let cfg = RunConfig::new("alone");
    let out = graph.invoke(Update::new(), &cfg).await.unwrap();
    let first = of(&out.interrupts, "ask");
    let out = graph
        .invoke(Command::resume(json!("a")), &cfg)
        .await
        .unwrap();
    let second = of(&out.interrupts, "ask");
    assert_eq!(second.value, json!("second?"));
    assert_ne!(second.id, first.id);
    let out = graph
        .invoke(Command::resume_map(answers([(&second, json!("b"))])), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty() && !out.paused);
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["ask=\"a\",\"b\""]));
}

/// docs/super-step.md, Subgraphs ("every interrupt the subgraph stopped on is the task's …
/// resuming the parent re-runs the task, which … resumes it with … the entries of a resume map
/// whose ids are the subgraph's interrupts"), runtime-spec §2.2 (a resume map keyed by
/// interrupt id) and §2.7 (the interrupt id hashes the task's checkpoint namespace): an
/// interrupt two subgraphs deep (a subgraph node inside a subgraph node) is reported by the
/// outer run under the innermost task's id, the one each namespace's `get_state` shows; a
/// resume map keyed by that id reaches the innermost node, and the run completes without the
/// nodes before it running again.
#[tokio::test]
async fn a_resume_map_answers_an_interrupt_two_subgraphs_deep() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut inner = graph();
    inner.add_node("first", counted("first", &runs));
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        let a = ctx.interrupt(json!("deep?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("ask={a}")])))
    });
    inner
        .add_edge("__start__", "first")
        .add_edge("first", "ask")
        .add_edge("ask", "__end__");
    let graph = two_deep(inner);
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused);
    assert_eq!(out.interrupts.len(), 1, "{:?}", out.interrupts);
    let asked = out.interrupts[0].clone();
    assert_eq!(asked.node.as_str(), "ask");
    assert_eq!(asked.value, json!("deep?"));

    // Each level shows the same interrupt, under the same id, as its task's.
    let root = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(root.interrupts(), out.interrupts);
    let mut ns_cfg = RunConfig::new("t");
    ns_cfg.checkpoint_ns = root.tasks[0].subgraph_ns.clone().expect("mid's namespace");
    let mid_snap = graph.get_state(&ns_cfg).await.unwrap().unwrap();
    assert_eq!(mid_snap.interrupts(), out.interrupts);
    ns_cfg.checkpoint_ns = mid_snap.tasks[0]
        .subgraph_ns
        .clone()
        .expect("inner's namespace");
    let inner_snap = graph.get_state(&ns_cfg).await.unwrap().unwrap();
    assert_eq!(inner_snap.interrupts(), out.interrupts);
    assert_eq!(inner_snap.next, vec!["ask".into()]);

    let out = graph
        .invoke(
            Command::resume_map(answers([(&asked, json!("deep"))])),
            &cfg,
        )
        .await
        .unwrap();
    assert!(
        out.interrupts.is_empty() && !out.paused,
        "{:?}",
        out.interrupts
    );
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "first", "ask=\"deep\""])
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "first ran once");
}

/// Runtime-spec §2.7 (the n-th slot (n>0) of a task has its own id, and an answer stored for a
/// slot is returned on the re-run) with docs/super-step.md, Subgraphs (a resume map's entries
/// whose ids are the subgraph's interrupts reach it, however deep): two subgraphs down, a node
/// that asks twice beside a sibling that asks once; a map answering the first slot, then a map
/// answering only the second slot by the id the outer run reported, completes the node with
/// both answers in order while the sibling still waits, and a single value then answers the
/// sibling (the only interrupt left pending, §2.2).
#[tokio::test]
async fn a_resume_map_answers_a_later_slot_two_subgraphs_deep() {
    let mut inner = graph();
    inner.add_node("ask", asks_twice);
    inner.add_node("q", asks_once);
    inner
        .add_edge("__start__", "ask")
        .add_edge("__start__", "q");
    let graph = two_deep(inner);
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 2, "{:?}", out.interrupts);
    let first = of(&out.interrupts, "ask");
    let q = of(&out.interrupts, "q");
    let err = graph
        .invoke(Command::resume(json!("same")), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AmbiguousResume { count: 2 }), "{err}");

    let out = graph
        .invoke(Command::resume_map(answers([(&first, json!("a"))])), &cfg)
        .await
        .unwrap();
    let second = of(&out.interrupts, "ask");
    assert_eq!(second.value, json!("second?"));
    assert_ne!(second.id, first.id);
    assert_eq!(of(&out.interrupts, "q"), q);
    assert_eq!(
        graph.get_state(&cfg).await.unwrap().unwrap().interrupts(),
        out.interrupts
    );

    let out = graph
        .invoke(Command::resume_map(answers([(&second, json!("b"))])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts, vec![q]);
    let out = graph
        .invoke(Command::resume(json!("c")), &cfg)
        .await
        .unwrap();
    assert!(
        out.interrupts.is_empty() && !out.paused,
        "{:?}",
        out.interrupts
    );
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "ask=\"a\",\"b\"", "q=\"c\""])
    );
}

/// docs/super-step.md, The loop, step 5 ("Barrier: an error aborts the step (first error in
/// task order, no checkpoint); interrupts end the run") and Choices ("After a node error, the
/// other tasks of the step finish and keep their writes"), runtime-spec §8 ("Retrying …
/// recreates the same tasks (same ids), gives finished tasks back their saved writes and
/// re-runs only the others"; "Interrupt: like failure, but … resume with `Command(resume=…)`"):
/// when one task fails and its sibling interrupts in the same step, the run fails with the
/// node's error (neither its outcome nor its stream reports the interrupt, and no checkpoint
/// is saved for the step, though `get_state` shows the sibling's stored interrupt beside the
/// failed task); a later `Command::resume(v)` re-runs both tasks, the failed one again and the
/// interrupted one with `v` as its answer (its interrupt is the only one pending, so the
/// single value is not ambiguous, §2.2), and the run completes. `Input::Continue` instead
/// re-runs both too: the fixed node finishes and the sibling asks again, under the same id.
/// (The reference cancels the sibling rather than storing its interrupt; its re-run then
/// takes `v` as the NULL task's resume value, §2.7, so the resume's outcome is the same.)
#[tokio::test]
async fn an_error_beside_an_interrupt_fails_the_step_and_a_resume_answers_the_interrupt() {
    for resume_at_once in [true, false] {
        let fixed = Arc::new(AtomicBool::new(false));
        let boom_runs = Arc::new(AtomicUsize::new(0));
        let mut g = graph();
        g.add_node("ask", |_s: State, ctx: Context| async move {
            let a = ctx.interrupt(json!("ask?"))?;
            Ok(Update::new().set(&LOG, log(&[&format!("ask={a}")])))
        });
        let (f, r) = (fixed.clone(), boom_runs.clone());
        g.add_node("boom", move |_s: State, _c: Context| {
            r.fetch_add(1, Ordering::SeqCst);
            let fixed = f.load(Ordering::SeqCst);
            async move {
                if !fixed {
                    return Err(NodeError::failed(std::io::Error::other("boom")));
                }
                Ok(Update::new().set(&LOG, log(&["boom"])))
            }
        });
        g.add_edge("__start__", "ask").add_edge("__start__", "boom");
        let graph = memory(g);

        // The stream of such a run ends with the error, with no interrupt event before it.
        let streamed = trace(
            &graph,
            Update::new().set(&LOG, log(&["in"])),
            &RunConfig::new("streamed"),
        )
        .await;
        assert!(
            streamed.ends_with("error node 'boom' failed: boom\n"),
            "{streamed}"
        );
        assert!(!streamed.contains("interrupted"), "{streamed}");

        let cfg = RunConfig::new("t");
        let err = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::NodeFailed { ref node, .. } if node.as_str() == "boom"),
            "the error wins: {err}"
        );
        let snap = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(
            statuses(&snap),
            [
                ("ask".to_owned(), TaskStatus::Interrupted),
                ("boom".to_owned(), TaskStatus::Error)
            ]
        );
        let asked = snap.interrupts();
        assert_eq!(asked.len(), 1, "{:?}", snap.tasks);
        assert_eq!(asked[0].value, json!("ask?"));
        assert_eq!(snap.values.get(&LOG).unwrap(), &log(&["in"]));
        assert_eq!(snap.step, 0, "no checkpoint for the failed step");

        fixed.store(true, Ordering::SeqCst);
        if !resume_at_once {
            let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
            assert_eq!(out.interrupts, asked, "the sibling asks again, same id");
            assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "boom"]));
        }
        let out = graph
            .invoke(Command::resume(json!("v")), &cfg)
            .await
            .unwrap();
        assert!(
            out.interrupts.is_empty() && !out.paused,
            "{:?}",
            out.interrupts
        );
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "ask=\"v\"", "boom"]),
            "resume at once: {resume_at_once}"
        );
        // One failed run on each thread, then one successful re-run on `t`.
        assert_eq!(boom_runs.load(Ordering::SeqCst), 3);
    }
}

/// Runtime-spec §2.2 ("If resuming" — a `Command` input or `None` — "mark every current
/// channel version as seen by the pseudo-node `__interrupt__` (so static interrupts don't
/// re-fire)"), §2.3.5 (`interrupt_before` fires only when a channel version exceeds what
/// `__interrupt__` has seen) and §2.7 ("Static breakpoints … use `versions_seen["__interrupt__"]`
/// to avoid firing twice on the same versions"): after a run stops before `x`, a command with
/// an update and no resume value runs `x` (the update's new versions do not re-fire the
/// breakpoint), and so does a plain continue after `update_state`; `x` runs once either way.
#[tokio::test]
async fn a_static_breakpoint_does_not_fire_again_after_a_command_update_or_update_state() {
    for via_command in [true, false] {
        let x_runs = Arc::new(AtomicUsize::new(0));
        let mut g = graph();
        g.add_node("a", |_s: State, _c: Context| async {
            Ok(Update::new().set(&LOG, log(&["a"])))
        });
        g.add_node("x", counted("x", &x_runs));
        g.add_edge("__start__", "a")
            .add_edge("a", "x")
            .add_edge("x", "__end__");
        g.interrupt_before(["x"]);
        let graph = memory(g);
        let cfg = RunConfig::new("t");

        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert!(out.paused && out.interrupts.is_empty());
        assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
        assert_eq!(
            graph.get_state(&cfg).await.unwrap().unwrap().next,
            vec!["x".into()]
        );

        let out = if via_command {
            graph
                .invoke(
                    Command::new().update(Update::new().set(&LOG, log(&["fix"]))),
                    &cfg,
                )
                .await
                .unwrap()
        } else {
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
                vec!["x".into()],
                "the update as a leaves x next"
            );
            graph.invoke(Input::Continue, &cfg).await.unwrap()
        };
        assert!(
            !out.paused,
            "via command: {via_command}: the breakpoint fired again"
        );
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "a", "fix", "x"]),
            "via command: {via_command}"
        );
        assert_eq!(
            x_runs.load(Ordering::SeqCst),
            1,
            "via command: {via_command}"
        );
        assert!(
            graph
                .get_state(&cfg)
                .await
                .unwrap()
                .unwrap()
                .next
                .is_empty(),
            "via command: {via_command}"
        );
    }
}

/// Runtime-spec §2.3 (`after_tick`, which saves the step's checkpoint and then checks
/// `interrupt_after`, runs "only when every task finished without error/interrupt"), §2.2
/// (resuming marks the loaded versions as seen by `__interrupt__`) and §2.7 (static breakpoints
/// fire once per new versions): `a` has an `interrupt_after` and its sibling `b` interrupts in
/// the same step. The run reports `b`'s interrupt only (the step did not finish, so the
/// after-breakpoint has not fired), with `a`'s result in its output and `a` done in
/// `get_state`. Resuming answers `b`, `a` is not re-run, the step finishes and the
/// after-breakpoint pauses the run (no interrupt value, `c` next); continuing runs `c`
/// without pausing again.
#[tokio::test]
async fn interrupt_after_beside_a_dynamic_interrupt_fires_once_after_the_resume() {
    let a_runs = Arc::new(AtomicUsize::new(0));
    let c_runs = Arc::new(AtomicUsize::new(0));
    let mut g = graph();
    g.add_node("a", counted("a", &a_runs));
    g.add_node("b", |_s: State, ctx: Context| async move {
        let v = ctx.interrupt(json!("b?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("b={v}")])))
    });
    g.add_node("c", counted("c", &c_runs));
    g.add_edge("__start__", "a")
        .add_edge("__start__", "b")
        .add_edge("a", "c")
        .add_edge("b", "c")
        .add_edge("c", "__end__");
    g.interrupt_after(["a"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused);
    assert_eq!(out.interrupts.len(), 1, "{:?}", out.interrupts);
    assert_eq!(out.interrupts[0].node.as_str(), "b");
    assert_eq!(out.interrupts[0].value, json!("b?"));
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "a"]));
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        statuses(&snap),
        [
            ("a".to_owned(), TaskStatus::Done),
            ("b".to_owned(), TaskStatus::Interrupted)
        ]
    );
    assert_eq!(snap.next, vec!["b".into()]);
    assert_eq!(snap.interrupts(), out.interrupts);

    let out = graph
        .invoke(Command::resume(json!("yes")), &cfg)
        .await
        .unwrap();
    assert!(
        out.paused && out.interrupts.is_empty(),
        "the after-breakpoint pauses: {:?}",
        out.interrupts
    );
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b=\"yes\""])
    );
    assert_eq!(a_runs.load(Ordering::SeqCst), 1, "a kept its saved writes");
    assert_eq!(c_runs.load(Ordering::SeqCst), 0);
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.next, vec!["c".into()]);
    assert!(snap.interrupts().is_empty());

    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert!(!out.paused && out.interrupts.is_empty());
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["in", "a", "b=\"yes\"", "c"])
    );
    assert_eq!(a_runs.load(Ordering::SeqCst), 1);
    assert_eq!(c_runs.load(Ordering::SeqCst), 1);
}

/// A parent whose `split` sends `n` packets (`x0`, `x1`, …) to `work`, a subgraph whose node
/// `ask` asks `"<item>?"` and logs `"<item>=<answer>"`.
fn send_to_asking_subgraph(n: usize) -> CompiledGraph {
    let mut inner = graph();
    inner
        .channel(&ITEM, ChannelSpec::last_value())
        .expect("declared once");
    inner.add_node("ask", |s: State, ctx: Context| async move {
        let item = s.get(&ITEM).cloned().unwrap_or_default();
        let a = ctx.interrupt(json!(format!("{item}?")))?;
        Ok(Update::new().set(&LOG, log(&[&format!("{item}={a}")])))
    });
    inner
        .add_edge("__start__", "ask")
        .add_edge("ask", "__end__");
    let mut g = graph();
    add_split(&mut g, n);
    g.add_subgraph("work", inner.compile().expect("valid inner graph"));
    g.add_edge("__start__", "split").add_edge("work", "__end__");
    memory(g)
}

/// Runtime-spec §2.7 (a `Send` creates a PUSH task whose input is the packet) and §2.2 (a
/// single resume value is an error only while more than one interrupt is pending; a map
/// answers by interrupt id), with docs/super-step.md, Subgraphs (the subgraph's interrupts
/// are its task's, and resuming the parent resumes the subgraph): a subgraph task created by
/// one `Send` packet that interrupts is a PUSH task waiting on its interrupt and a single value
/// resumes it; with two packets both interrupt, a single value is `AmbiguousResume`, and a map
/// keyed by the reported ids gives each packet's subgraph its own answer; a map answering one
/// of them leaves the other pending, which a single value then answers.
#[tokio::test]
async fn a_subgraph_task_created_by_a_send_interrupts_and_resumes() {
    // One packet: resumed by value.
    let graph = send_to_asking_subgraph(1);
    let cfg = RunConfig::new("one");
    let out = graph.invoke(Update::new(), &cfg).await.unwrap();
    assert!(out.paused);
    assert_eq!(out.interrupts.len(), 1, "{:?}", out.interrupts);
    assert_eq!(out.interrupts[0].value, json!("x0?"));
    assert_eq!(out.interrupts[0].node.as_str(), "ask");
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(snap.tasks.len(), 1);
    let task = &snap.tasks[0];
    assert_eq!(
        (task.node.as_str(), task.kind, task.status),
        ("work", TaskKind::Push, TaskStatus::Interrupted)
    );
    assert_eq!(task.interrupts, out.interrupts);
    assert!(task.subgraph_ns.is_some());
    let out = graph
        .invoke(Command::resume(json!("yes")), &cfg)
        .await
        .unwrap();
    assert!(
        out.interrupts.is_empty() && !out.paused,
        "{:?}",
        out.interrupts
    );
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["x0=\"yes\""]));

    // Two packets: a single value is ambiguous, a map answers each.
    let graph = send_to_asking_subgraph(2);
    let cfg = RunConfig::new("two");
    let out = graph.invoke(Update::new(), &cfg).await.unwrap();
    let mut asked: Vec<_> = out.interrupts.iter().map(|i| i.value.clone()).collect();
    asked.sort_by_key(Json::to_string);
    assert_eq!(asked, vec![json!("x0?"), json!("x1?")]);
    assert_ne!(out.interrupts[0].id, out.interrupts[1].id);
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        snap.tasks
            .iter()
            .map(|t| (t.node.as_str(), t.kind, t.status))
            .collect::<Vec<_>>(),
        [
            ("work", TaskKind::Push, TaskStatus::Interrupted),
            ("work", TaskKind::Push, TaskStatus::Interrupted)
        ]
    );
    let err = graph
        .invoke(Command::resume(json!("same")), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AmbiguousResume { count: 2 }), "{err}");
    let map = out
        .interrupts
        .iter()
        .map(|i| {
            let item = i.value.as_str().unwrap().trim_end_matches('?').to_owned();
            (i.id.clone(), json!(format!("{item}-answer")))
        })
        .collect();
    let out = graph.invoke(Command::resume_map(map), &cfg).await.unwrap();
    assert!(
        out.interrupts.is_empty() && !out.paused,
        "{:?}",
        out.interrupts
    );
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["x0=\"x0-answer\"", "x1=\"x1-answer\""]),
        "each packet's subgraph got its own answer, in task-path order"
    );

    // Two packets, a map answering one: the other packet's subgraph still waits, and being
    // the only pending interrupt, a single value answers it.
    let cfg = RunConfig::new("partial");
    let out = graph.invoke(Update::new(), &cfg).await.unwrap();
    let x0 = out
        .interrupts
        .iter()
        .find(|i| i.value == json!("x0?"))
        .expect("x0 asks")
        .clone();
    let out = graph
        .invoke(Command::resume_map(answers([(&x0, json!("A"))])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1, "{:?}", out.interrupts);
    assert_eq!(out.interrupts[0].value, json!("x1?"));
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["x0=\"A\""]));
    let out = graph
        .invoke(Command::resume(json!("B")), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty() && !out.paused);
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["x0=\"A\"", "x1=\"B\""])
    );
}

/// The values of the interrupts a run stopped on, in order.
fn asked(out: &antler_graph::RunOutcome) -> Vec<Json> {
    out.interrupts.iter().map(|i| i.value.clone()).collect()
}

/// A node that asks for an account, fails once after the answer (a fetch that fails), then
/// asks for a confirmation; it logs both answers.
fn fetch_then_confirm(
    fails: usize,
) -> impl Fn(State, Context) -> std::future::Ready<Result<Update, NodeError>> + use<> {
    let runs_after_answer = Arc::new(AtomicUsize::new(0));
    move |_s, ctx| {
        let step = || -> Result<Update, NodeError> {
            let account = ctx.interrupt(json!("account?"))?;
            if runs_after_answer.fetch_add(1, Ordering::SeqCst) < fails {
                return Err(NodeError::failed(std::io::Error::other("fetch failed")));
            }
            let ok = ctx.interrupt(json!("confirm?"))?;
            let text = |v: &Json| v.as_str().unwrap_or_default().to_owned();
            Ok(Update::new().set(&LOG, log(&[&format!("{},{}", text(&account), text(&ok))])))
        };
        std::future::ready(step())
    }
}

/// A single resume value answers the interrupt it was given for and no later one: after the
/// resumed step did not finish (the task failed after taking the answer, or stopped on its
/// next question), a run on the same checkpoint asks the next question instead of answering
/// it with that value (before 2026-12-02 the value stayed stored as the NULL task's, as in the
/// reference, and `Continue` answered "confirm?" with the account). In-process and through a
/// saver, whose cold reads see what was stored.
#[tokio::test]
async fn a_single_resume_value_answers_only_the_question_it_was_given_for() {
    for fails in [1, 0] {
        for stored in [false, true] {
            let mut g = graph();
            g.add_node("approve", fetch_then_confirm(fails));
            g.add_edge("__start__", "approve")
                .add_edge("approve", "__end__");
            let compiled = g.compile().unwrap();
            let graph = if stored {
                let saver =
                    antler_checkpoint::MemorySaver::new(antler_checkpoint::StoreConfig::full());
                compiled.with_checkpointer(Arc::new(antler_graph::SaverCheckpointer::new(
                    Arc::new(saver),
                )))
            } else {
                compiled.with_checkpointer(Arc::new(MemoryCheckpointer::new()))
            };
            let cfg = RunConfig::new("t");
            let out = graph
                .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
                .await
                .unwrap();
            assert_eq!(asked(&out), [json!("account?")]);
            let resumed = graph
                .invoke(Input::Command(Command::resume(json!("acct-1"))), &cfg)
                .await;
            if fails == 1 {
                let err = resumed.unwrap_err();
                assert!(err.to_string().contains("fetch failed"), "{err}");
            } else {
                assert_eq!(asked(&resumed.unwrap()), [json!("confirm?")]);
            }
            let again = graph.invoke(Input::Continue, &cfg).await.unwrap();
            assert_eq!(
                asked(&again),
                [json!("confirm?")],
                "fails {fails}, stored {stored}"
            );
            let done = graph
                .invoke(Input::Command(Command::resume(json!("yes"))), &cfg)
                .await
                .unwrap();
            assert!(done.interrupts.is_empty());
            assert_eq!(
                done.values.get(&LOG),
                Some(&log(&["in", "acct-1,yes"])),
                "fails {fails}, stored {stored}"
            );
        }
    }
}

/// A NULL-task resume value stored on the checkpoint (given while no interrupt waited: after a
/// static breakpoint) is replaced by the next single value, not kept beside it: a node that
/// took the first value for its first question and the second for its second asks its third
/// (a value for a task's own interrupt is stored as that task's answer only when no NULL-task
/// value is stored there; otherwise it replaces that value, as before).
#[tokio::test]
async fn a_stored_null_resume_value_is_replaced_by_the_next_one() {
    let mut g = graph();
    g.add_node("ask", |_s: State, ctx: Context| async move {
        let text = |v: Json| v.as_str().unwrap_or_default().to_owned();
        let a = text(ctx.interrupt(json!("first?"))?);
        let b = text(ctx.interrupt(json!("second?"))?);
        let c = text(ctx.interrupt(json!("third?"))?);
        Ok(Update::new().set(&LOG, log(&[&format!("{a},{b},{c}")])))
    });
    g.add_edge("__start__", "ask").add_edge("ask", "__end__");
    g.interrupt_before(["ask"]);
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused && out.interrupts.is_empty());
    let out = graph
        .invoke(Input::Command(Command::resume(json!("a"))), &cfg)
        .await
        .unwrap();
    assert_eq!(asked(&out), [json!("second?")]);
    let out = graph
        .invoke(Input::Command(Command::resume(json!("b"))), &cfg)
        .await
        .unwrap();
    assert_eq!(asked(&out), [json!("third?")]);
    let out = graph
        .invoke(Input::Command(Command::resume(json!("c"))), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty());
    assert_eq!(out.values.get(&LOG), Some(&log(&["in", "a,b,c"])));
}
