//! Subgraphs as nodes, with their own checkpoint namespace; interrupts inside them bubble up and resume.

use std::sync::Arc;

use antler_graph::{
    ChannelSpec, Command, Context, Key, MemoryCheckpointer, RunConfig, State, StateGraph, Update,
};
use serde_json::json;

use crate::common::{LOG, graph, log, only_subgraph};

#[tokio::test]
async fn subgraph_runs_in_its_own_namespace_and_interrupts_bubble_up() {
    const ASKED: Key<bool> = Key::from_static("asked");
    let mut inner = graph();
    inner
        .channel(&ASKED, ChannelSpec::last_value())
        .expect("declared once");
    inner.add_node("first", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["inner.first"])))
    });
    inner.add_node("ask", |s: State, ctx: Context| async move {
        if s.get(&ASKED) == Some(&true) {
            return Ok(Update::new());
        }
        let a = ctx.interrupt(json!("inner?"))?;
        Ok(Update::new()
            .set(&ASKED, true)
            .set(&LOG, log(&[&format!("inner.answer={a}")])))
    });
    inner
        .add_edge("__start__", "first")
        .add_edge("first", "ask")
        .add_edge("ask", "__end__");
    let inner = inner.compile().expect("valid inner graph");

    // The parent declares `log` only as a last value of the whole list: the subgraph's final `log`
    // replaces it (no double append).
    let mut outer = StateGraph::new();
    outer
        .channel(&LOG, ChannelSpec::last_value())
        .expect("declared once");
    outer.add_node("before", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["before"])))
    });
    outer.add_subgraph("sub", inner);
    outer.add_node("after", |s: State, _c| async move {
        let mut l = s.get(&LOG).cloned().unwrap_or_default();
        l.push("after".to_owned());
        Ok(Update::new().set(&LOG, l))
    });
    outer
        .add_edge("__start__", "before")
        .add_edge("before", "sub")
        .add_edge("sub", "after")
        .add_edge("after", "__end__");
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(store);
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1);
    assert_eq!(out.interrupts[0].value, json!("inner?"));
    assert_eq!(out.interrupts[0].node.as_str(), "ask");
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.next, vec!["sub".into()]);
    let task = head.tasks[0].id.clone();
    assert_eq!(head.tasks[0].subgraph_ns, Some(format!("sub:{task}")));

    // The subgraph's checkpoints live in `sub:<task id>`, not in the root namespace; the
    // parent hands a read of that namespace to the subgraph.
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = format!("sub:{task}");
    let sub_head = graph
        .get_state(&sub_cfg)
        .await
        .unwrap()
        .expect("subgraph checkpoints in its namespace");
    assert_eq!(sub_head.next, vec!["ask".into()]);
    assert_eq!(
        sub_head.values.get(&LOG).unwrap(),
        &log(&["before", "inner.first"])
    );
    let root = graph.get_state_history(&cfg).await.unwrap();
    assert!(root.iter().all(|s| {
        s.values
            .get(&LOG)
            .is_none_or(|l| !l.contains(&"inner.first".to_owned()))
    }));

    let out = graph
        .invoke(Command::resume(json!("yes")), &cfg)
        .await
        .unwrap();
    assert!(out.interrupts.is_empty());
    assert_eq!(
        out.values.get(&LOG).unwrap(),
        &log(&["before", "inner.first", "inner.answer=\"yes\"", "after"]),
        "the subgraph resumed from its own checkpoint (inner.first ran once)"
    );
}

/// `Command::to_parent` inside a subgraph ends the subgraph run; its update applies in the parent.
#[tokio::test]
async fn command_to_parent_from_a_subgraph_applies_in_the_parent() {
    let mut inner = graph();
    inner.add_node("escalate", |_s: State, _c| async {
        Ok(Command::new()
            .update(Update::new().set(&LOG, log(&["from child"])))
            .to_parent())
    });
    inner.add_node("never", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["never"])))
    });
    inner
        .add_edge("__start__", "escalate")
        .add_edge("escalate", "never")
        .add_edge("never", "__end__");
    let graph = last_value_parent("sub", inner.compile().expect("valid inner graph"));
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["from child"]));
    // The hand-off is no failure of the escalating task: its step in the subgraph's namespace
    // stores nothing for it (before, an error write showed it as failed).
    let history = graph.get_state_history(&cfg).await.unwrap();
    let ns = history
        .iter()
        .flat_map(|s| &s.tasks)
        .find_map(|t| t.subgraph_ns.clone())
        .expect("the parent's step that ran the subgraph");
    let mut at_sub = cfg.clone();
    at_sub.checkpoint_ns = ns;
    let sub = graph.get_state(&at_sub).await.unwrap().expect("stored");
    let escalate = sub
        .tasks
        .iter()
        .find(|t| t.node.as_str() == "escalate")
        .expect("escalate is the subgraph's next task");
    assert_eq!(escalate.error, None);
    assert_eq!(escalate.status, antler_graph::TaskStatus::Todo);
}

/// A command on an addressed checkpoint whose next task is a subgraph forks both levels: the
/// subgraph runs again on the branch, in a namespace of its own (the fork's task id differs),
/// and sees the command's update; the branch reads back cold as it ran; the original run's
/// checkpoints, the subgraph's included, read as before. Through a SQLite saver, with a delta
/// message channel on both levels.
#[tokio::test]
async fn a_command_before_a_subgraph_forks_the_subgraph_too() {
    use antler_checkpoint as cp;
    use antler_graph::{SaverCheckpointer, Source};
    use antler_state_reducers::{Message, MessageType};
    const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
    fn msg(kind: MessageType, id: &str, text: &str) -> Message {
        let mut m = Message::new(kind, text);
        m.id = Some(id.to_owned());
        m
    }
    fn inner_graph() -> antler_graph::CompiledGraph {
        let mut inner = StateGraph::new();
        inner
            .channel(&MESSAGES, ChannelSpec::messages_delta(2))
            .unwrap();
        inner.add_node("reply", |s: State, _c| async move {
            let seen: Vec<String> = s
                .get(&MESSAGES)
                .map(|l| l.iter().map(|m| m.content.text()).collect())
                .unwrap_or_default();
            let n = seen.len();
            Ok(Update::new().set(
                &MESSAGES,
                vec![msg(MessageType::Ai, &format!("ai-{n}"), &seen.join("|"))],
            ))
        });
        inner
            .add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        inner.compile().unwrap()
    }
    fn outer_graph(saver: Arc<dyn cp::Saver>) -> antler_graph::CompiledGraph {
        let mut outer = StateGraph::new();
        outer
            .channel(&MESSAGES, ChannelSpec::messages_delta(2))
            .unwrap();
        only_subgraph(&mut outer, "sub", inner_graph());
        outer
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver)))
            .with_hot_cache(false)
    }
    let mode = cp::StoreConfig::delta(cp::SnapshotFrequency::new(2).unwrap());
    let saver: Arc<dyn cp::Saver> = Arc::new(cp::SqliteSaver::open_in_memory(mode).await.unwrap());
    let graph = outer_graph(saver.clone());
    let cfg = RunConfig::new("t");
    let mut ends = Vec::new();
    for i in 0..3 {
        let input = Update::new().set(
            &MESSAGES,
            vec![msg(
                MessageType::Human,
                &format!("h-{i}"),
                &format!("hi {i}"),
            )],
        );
        ends.push(graph.invoke(input, &cfg).await.unwrap());
    }
    // The second turn's input checkpoint: its next task is the subgraph.
    let history = graph.get_state_history(&cfg).await.unwrap();
    let before_sub = history
        .iter()
        .find(|s| s.next == vec!["sub".into()] && s.values.get(&MESSAGES).map(Vec::len) == Some(3))
        .expect("the second turn's input checkpoint");
    let original_task = before_sub.tasks[0].id.clone();
    let at = cfg
        .clone()
        .with_checkpoint(before_sub.checkpoint_id.clone());
    let branch = graph
        .invoke(
            Command::new().update(
                Update::new().set(&MESSAGES, vec![msg(MessageType::Human, "late", "late")]),
            ),
            &at,
        )
        .await
        .unwrap();
    let live = branch.values.get(&MESSAGES).cloned().unwrap();
    let ids: Vec<&str> = live.iter().filter_map(|m| m.id.as_deref()).collect();
    assert_eq!(ids, ["h-0", "ai-1", "h-1", "late", "ai-4"]);
    assert_eq!(
        live[4].content.text(),
        "hi 0|hi 0|hi 1|late",
        "the subgraph saw the update"
    );

    // Cold reads through a fresh adapter and graph.
    let cold = outer_graph(saver.clone());
    let head = cfg
        .clone()
        .with_checkpoint(branch.checkpoint_id.clone().unwrap());
    let got = cold.get_state(&head).await.unwrap().unwrap();
    assert_eq!(got.values.get(&MESSAGES), Some(&live));
    let old_head = cfg
        .clone()
        .with_checkpoint(ends[2].checkpoint_id.clone().unwrap());
    let got = cold.get_state(&old_head).await.unwrap().unwrap();
    assert_eq!(got.values.get(&MESSAGES), ends[2].values.get(&MESSAGES));

    // The branch starts with a fork whose subgraph task has another id, so another namespace;
    // the original task's subgraph checkpoints are untouched.
    let branch_history = cold.get_state_history(&cfg).await.unwrap();
    let fork = branch_history
        .iter()
        .find(|s| s.source == Source::Fork)
        .expect("the branch starts with a fork");
    assert_eq!(fork.next, vec!["sub".into()]);
    let fork_task = fork.tasks[0].id.clone();
    assert_ne!(fork_task, original_task);
    let sub_state = |task: String| {
        let cold = &cold;
        async move {
            let mut c = RunConfig::new("t");
            c.checkpoint_ns = format!("sub:{task}");
            let s = cold
                .get_state(&c)
                .await
                .unwrap()
                .expect("subgraph checkpoints");
            s.values
                .get(&MESSAGES)
                .map(|l| l.iter().filter_map(|m| m.id.clone()).collect::<Vec<_>>())
        }
    };
    assert_eq!(
        sub_state(fork_task.to_string()).await.unwrap(),
        ["h-0", "ai-1", "h-1", "late", "ai-4"]
    );
    assert_eq!(
        sub_state(original_task.to_string()).await.unwrap(),
        ["h-0", "ai-1", "h-1", "ai-3"]
    );
}

/// A static breakpoint inside a subgraph pauses the parent (runtime-spec §2.6: only the top
/// level swallows the pause): the parent stops with `sub` next and `after` not run, and
/// resuming the parent continues the subgraph past its breakpoint, then runs `after`:
/// `interrupt_before`, `interrupt_after` and `interrupt_after` on the subgraph's last node
/// (where the subgraph has nothing left to run, and resuming takes its final values instead
/// of running it again).
#[tokio::test]
async fn a_static_breakpoint_inside_a_subgraph_pauses_the_parent() {
    for (before, after_node) in [(true, "first"), (false, "first"), (false, "second")] {
        let mut inner = graph();
        // The inner `log` appends (the common graph's reducer); the parent's is a last value
        // that takes the subgraph's final list.
        for name in ["first", "second"] {
            inner.add_node(name, move |_s: State, _c| async move {
                Ok(Update::new().set(&LOG, log(&[&format!("inner.{name}")])))
            });
        }
        inner
            .add_edge("__start__", "first")
            .add_edge("first", "second")
            .add_edge("second", "__end__");
        if before {
            inner.interrupt_before(["second"]);
        } else {
            inner.interrupt_after([after_node]);
        }
        let mut outer = StateGraph::new();
        outer
            .channel(&LOG, ChannelSpec::last_value())
            .expect("declared once");
        outer.add_subgraph("sub", inner.compile().expect("valid inner graph"));
        outer.add_node("after", |s: State, _c| async move {
            let mut l = s.get(&LOG).cloned().unwrap_or_default();
            l.push("after".to_owned());
            Ok(Update::new().set(&LOG, l))
        });
        outer
            .add_edge("__start__", "sub")
            .add_edge("sub", "after")
            .add_edge("after", "__end__");
        let graph = outer
            .compile()
            .expect("valid outer graph")
            .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
        let cfg = RunConfig::new("t");
        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert!(
            out.interrupts.is_empty(),
            "before: {before}, after {after_node}"
        );
        assert!(out.paused, "before: {before}, after {after_node}");
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in"]),
            "before: {before}, after {after_node}"
        );
        let head = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(
            head.next,
            vec!["sub".into()],
            "before: {before}, after {after_node}"
        );
        let out = graph
            .invoke(antler_graph::Input::Continue, &cfg)
            .await
            .unwrap();
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "inner.first", "inner.second", "after"]),
            "before: {before}, after {after_node}"
        );
    }
}

/// A subgraph task whose interrupt was answered and whose subgraph then failed shows as failed,
/// without the answered interrupt: the failure replaces the task's interrupt write (a
/// subgraph's task stores no answers that would mark the interrupt answered).
#[tokio::test]
async fn a_subgraph_that_fails_after_its_resume_shows_as_failed() {
    let mut inner = graph();
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        ctx.interrupt(json!("go?"))?;
        Err::<Update, _>(antler_graph::NodeError::failed(std::io::Error::other(
            "broke",
        )))
    });
    inner
        .add_edge("__start__", "ask")
        .add_edge("ask", "__end__");
    let graph = last_value_parent("sub", inner.compile().expect("valid inner graph"));
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(out.interrupts.len(), 1);
    assert!(
        graph
            .invoke(Command::resume(json!("yes")), &cfg)
            .await
            .is_err()
    );
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.tasks[0].status, antler_graph::TaskStatus::Error);
    assert!(head.interrupts().is_empty(), "{:?}", head.tasks);
}

/// A subgraph whose two parallel nodes each wait on an interrupt surfaces both through the
/// parent task (the run's outcome, `get_state`), a single resume value is refused as
/// ambiguous before anything runs, and a resume map answers both (before, only the first
/// interrupt surfaced and the second could not be answered from the parent).
#[tokio::test]
async fn every_interrupt_of_a_subgraph_surfaces_and_a_map_answers_them_all() {
    let ask = |name: &'static str| {
        move |_s: State, ctx: Context| async move {
            let a = ctx.interrupt(json!(format!("{name}?")))?;
            Ok(Update::new().set(&LOG, log(&[&format!("{name}={a}")])))
        }
    };
    let mut inner = graph();
    inner.add_node("left", ask("left"));
    inner.add_node("right", ask("right"));
    inner
        .add_edge("__start__", "left")
        .add_edge("__start__", "right")
        .add_edge("left", "__end__")
        .add_edge("right", "__end__");
    let inner = inner.compile().expect("valid inner graph");
    let mut outer = graph();
    only_subgraph(&mut outer, "sub", inner);
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");

    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let mut asked: Vec<_> = out.interrupts.iter().map(|i| i.value.clone()).collect();
    asked.sort_by_key(|v| v.to_string());
    assert_eq!(asked, vec![json!("left?"), json!("right?")]);
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.tasks.len(), 1);
    assert_eq!(head.tasks[0].interrupts.len(), 2, "{:?}", head.tasks[0]);

    let err = graph
        .invoke(Command::resume(json!("same")), &cfg)
        .await
        .unwrap_err();
    assert!(
        matches!(err, antler_graph::Error::AmbiguousResume { count: 2 }),
        "{err}"
    );
    let answers = out
        .interrupts
        .iter()
        .map(|i| {
            let node = i.node.as_str().to_owned();
            (i.id.clone(), json!(format!("{node}-answer")))
        })
        .collect();
    let done = graph
        .invoke(Command::resume_map(answers), &cfg)
        .await
        .unwrap();
    assert!(done.interrupts.is_empty());
    let mut log_out = done.values.get(&LOG).unwrap().clone();
    log_out.sort();
    assert_eq!(
        log_out,
        log(&["in", "in", "left=\"left-answer\"", "right=\"right-answer\""])
    );
}

/// Runtime-spec §2.5: a subgraph's checkpoints carry `parents`, the namespace and checkpoint of
/// the enclosing graph's step they ran in; the top level's carry none.
#[tokio::test]
async fn a_subgraphs_checkpoints_name_the_parent_step_they_ran_in() {
    use antler_checkpoint as cp;
    let mut inner = graph();
    inner.add_node("x", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["inner.x"])))
    });
    inner.add_edge("__start__", "x").add_edge("x", "__end__");
    let inner = inner.compile().expect("valid inner graph");
    let mut outer = graph();
    outer.add_node("before", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["before"])))
    });
    outer.add_subgraph("sub", inner);
    outer
        .add_edge("__start__", "before")
        .add_edge("before", "sub")
        .add_edge("sub", "__end__");
    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::full()));
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(antler_graph::SaverCheckpointer::new(
            saver.clone(),
        )));
    let cfg = RunConfig::new("t");
    graph.invoke(Update::new(), &cfg).await.unwrap();
    let ran_in = graph
        .get_state_history(&cfg)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.next == vec![antler_graph::NodeId::from("sub")])
        .expect("the parent checkpoint `sub` ran from");
    assert!(ran_in.parents.is_empty(), "the top level has no parents");
    let all = saver
        .list(&cp::ListQuery {
            checkpoint_ns: None,
            ..cp::ListQuery::thread("t")
        })
        .await
        .unwrap();
    let inner_ones: Vec<_> = all
        .iter()
        .filter(|t| !t.config.checkpoint_ns.is_root())
        .collect();
    assert!(!inner_ones.is_empty());
    for t in inner_ones {
        let parents: Vec<(String, String)> = t
            .metadata
            .parents
            .iter()
            .map(|(ns, id)| (ns.to_string(), id.to_string()))
            .collect();
        assert_eq!(
            parents,
            vec![(String::new(), ran_in.checkpoint_id.to_string())]
        );
    }
    assert!(
        all.iter()
            .filter(|t| t.config.checkpoint_ns.is_root())
            .all(|t| t.metadata.parents.is_empty())
    );
    // An update in the subgraph's namespace keeps the step its checkpoints belong to.
    let ns = all
        .iter()
        .find(|t| !t.config.checkpoint_ns.is_root())
        .map(|t| t.config.checkpoint_ns.to_string())
        .expect("a subgraph namespace");
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = ns.clone();
    graph
        .update_state(
            &sub_cfg,
            Update::new().set(&LOG, log(&["edit"])),
            Some("x".into()),
        )
        .await
        .unwrap();
    let updated = graph.get_state(&sub_cfg).await.unwrap().unwrap();
    assert_eq!(updated.source, antler_graph::Source::Update);
    assert_eq!(
        updated.parents.get(""),
        Some(&ran_in.checkpoint_id),
        "in namespace {ns}"
    );
}

/// A subgraph whose `messages` is a delta channel under a parent whose `messages` is full, or
/// the other way round, or a delta channel with another snapshot frequency, mixes delta and full
/// messages in one program: the parent's compile refuses it. The same declaration on both
/// sides, or a subgraph without `messages`, compiles.
#[test]
fn a_subgraph_mixing_delta_and_full_messages_with_its_parent_does_not_compile() {
    use antler_state_reducers::Message;
    const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
    let compiled = |spec: Option<ChannelSpec<Vec<Message>>>| {
        let mut g = StateGraph::new();
        if let Some(spec) = spec {
            g.channel(&MESSAGES, spec).expect("declared once");
        }
        g.add_node("n", |_s: State, _c| async { Ok(Update::new()) });
        g.add_edge("__start__", "n").add_edge("n", "__end__");
        g.compile().expect("valid on its own")
    };
    let outcome = |parent: ChannelSpec<Vec<Message>>, sub: Option<ChannelSpec<Vec<Message>>>| {
        let mut outer = StateGraph::new();
        outer.channel(&MESSAGES, parent).expect("declared once");
        only_subgraph(&mut outer, "sub", compiled(sub));
        outer.compile().err()
    };
    for (parent, sub) in [
        (ChannelSpec::messages_delta(10), ChannelSpec::messages()),
        (ChannelSpec::messages(), ChannelSpec::messages_delta(10)),
        (
            ChannelSpec::messages_delta(10),
            ChannelSpec::messages_delta(50),
        ),
    ] {
        let err = outcome(parent, Some(sub));
        assert!(
            matches!(&err, Some(antler_graph::BuildError::ChannelConflict { channel, second, .. })
                if channel == "messages" && second.contains("in subgraph sub")),
            "{err:?}"
        );
    }
    assert!(
        outcome(
            ChannelSpec::messages_delta(10),
            Some(ChannelSpec::messages_delta(10))
        )
        .is_none()
    );
    assert!(outcome(ChannelSpec::messages(), Some(ChannelSpec::messages())).is_none());
    assert!(outcome(ChannelSpec::messages_delta(10), None).is_none());
}

/// A key the parent and a subgraph share passes values both ways (the subgraph takes the
/// parent's value as a write and returns its own), so a key whose value and write types differ
/// (a reducer that appends one item) does not compile: before, it compiled and every run of
/// the subgraph failed with a write-type error.
#[test]
fn a_shared_key_whose_values_cannot_cross_does_not_compile() {
    const PUSHED: Key<Vec<String>, String> = Key::from_static("pushed");
    let push = || {
        ChannelSpec::reducer("push", Vec::new, |acc: &Vec<String>, ws: &[String]| {
            Ok(acc.iter().chain(ws).cloned().collect())
        })
    };
    let mut inner = StateGraph::new();
    inner.channel(&PUSHED, push()).expect("declared once");
    inner.add_node("s", |_s: State, _c| async {
        Ok(Update::new().set(&PUSHED, "s".to_owned()))
    });
    inner.add_edge("__start__", "s").add_edge("s", "__end__");
    let mut outer = StateGraph::new();
    outer.channel(&PUSHED, push()).expect("declared once");
    only_subgraph(
        &mut outer,
        "sub",
        inner.compile().expect("valid inner graph"),
    );
    assert!(matches!(
        outer.compile().err(),
        Some(antler_graph::BuildError::ChannelConflict { ref channel, .. }) if channel == "pushed"
    ));
}

/// An `update_state` of a subgraph's namespace while the thread's run executes that subgraph
/// is refused with `ThreadBusy`, as one of the root namespace is: it would fork the
/// subgraph's checkpoints under the run. Before 2026-12-01 only the root namespace was
/// guarded, and the update went through.
#[tokio::test]
async fn updating_a_subgraph_namespace_during_the_run_is_refused() {
    use antler_graph::ErrorKind;
    use std::sync::Mutex;
    use tokio::sync::Notify;
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let ns = Arc::new(Mutex::new(String::new()));
    let mut inner = graph();
    let (e, r, n) = (entered.clone(), release.clone(), ns.clone());
    inner.add_node("wait", move |_s: State, ctx: Context| {
        let (e, r, n) = (e.clone(), r.clone(), n.clone());
        async move {
            // The subgraph's namespace: the task's own, without its last part.
            let task_ns = ctx.checkpoint_ns().to_owned();
            let sub_ns = task_ns
                .rsplit_once('|')
                .map_or(task_ns.clone(), |(sub, _)| sub.to_owned());
            *n.lock().expect("not poisoned") = sub_ns;
            e.notify_one();
            r.notified().await;
            Ok(Update::new().set(&LOG, log(&["inner"])))
        }
    });
    inner
        .add_edge("__start__", "wait")
        .add_edge("wait", "__end__");
    let inner = inner.compile().expect("valid inner graph");
    let mut outer = graph();
    only_subgraph(&mut outer, "sub", inner);
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(store);
    let run = tokio::spawn({
        let graph = graph.clone();
        async move {
            graph
                .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
                .await
        }
    });
    entered.notified().await;
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = ns.lock().expect("not poisoned").clone();
    assert!(
        sub_cfg.checkpoint_ns.starts_with("sub:"),
        "{}",
        sub_cfg.checkpoint_ns
    );
    let err = graph
        .update_state(&sub_cfg, Update::new().set(&LOG, log(&["meddled"])), None)
        .await
        .expect_err("refused while the run goes");
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    release.notify_one();
    let out = run.await.expect("joined").expect("the run finishes");
    let logged = out.values.get(&LOG).cloned().unwrap_or_default();
    assert_eq!(
        logged.last().map(String::as_str),
        Some("inner"),
        "{logged:?}"
    );
    // Once the run has ended, the namespace can be updated.
    graph
        .update_state(&sub_cfg, Update::new().set(&LOG, log(&["later"])), None)
        .await
        .expect("updated after the run");
}

/// A state call on a subgraph's namespace is handed to that subgraph, however deep, as the
/// reference hands it (`get_state`, `get_state_history` and `update_state` through the root
/// graph, with the subgraph's schema and nodes); each subgraph task names its namespace in the
/// snapshot, and a path that leads to no subgraph node is refused. Before 2026-12-02 the root
/// graph read the subgraph's checkpoints with its own schema and nodes, and refused the
/// subgraph's nodes as `as_node`.
#[tokio::test]
async fn a_namespaced_state_call_is_handed_to_the_subgraph() {
    use antler_graph::{Error, ErrorKind};
    let mut inner = graph();
    inner.add_node("first", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["inner.first"])))
    });
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        let a = ctx.interrupt(json!("inner?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("inner.answer={a}")])))
    });
    inner
        .add_edge("__start__", "first")
        .add_edge("first", "ask")
        .add_edge("ask", "__end__");
    let mut mid = graph();
    only_subgraph(
        &mut mid,
        "inner",
        inner.compile().expect("valid inner graph"),
    );
    // The root's `log` is a last value: reading the inner checkpoints with it would still
    // work, but the root has neither `first` nor `ask` to update as.
    let graph = last_value_parent("mid", mid.compile().expect("valid middle graph"));
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .expect("runs to the interrupt");
    assert_eq!(out.interrupts.len(), 1);

    // Root → mid → inner, each step by the namespace the task names.
    let head = graph.get_state(&cfg).await.unwrap().expect("a head");
    let mid_ns = head.tasks[0]
        .subgraph_ns
        .clone()
        .expect("mid is a subgraph");
    assert_eq!(mid_ns, format!("mid:{}", head.tasks[0].id));
    let mut mid_cfg = RunConfig::new("t");
    mid_cfg.checkpoint_ns = mid_ns.clone();
    let mid_head = graph
        .get_state(&mid_cfg)
        .await
        .unwrap()
        .expect("mid's head");
    assert_eq!(mid_head.next, vec!["inner".into()]);
    let inner_ns = mid_head.tasks[0].subgraph_ns.clone().expect("inner is one");
    assert_eq!(inner_ns, format!("{mid_ns}|inner:{}", mid_head.tasks[0].id));
    let mut inner_cfg = RunConfig::new("t");
    inner_cfg.checkpoint_ns = inner_ns.clone();
    let inner_head = graph
        .get_state(&inner_cfg)
        .await
        .unwrap()
        .expect("inner's head");
    assert_eq!(inner_head.next, vec!["ask".into()]);
    assert_eq!(inner_head.tasks[0].subgraph_ns, None, "ask is a plain node");
    assert_eq!(
        inner_head.values.get(&LOG),
        Some(&log(&["in", "inner.first"]))
    );
    let history = graph.get_state_history(&inner_cfg).await.unwrap();
    assert!(
        history
            .iter()
            .any(|s| s.next == vec![antler_graph::NodeId::from("first")]),
        "the inner history, with the inner nodes next"
    );

    // An update as an inner node, through the root.
    graph
        .update_state(
            &inner_cfg,
            Update::new().set(&LOG, log(&["edited"])),
            Some("first".into()),
        )
        .await
        .expect("updated as the inner node");
    let edited = graph.get_state(&inner_cfg).await.unwrap().expect("edited");
    assert_eq!(
        edited.values.get(&LOG),
        Some(&log(&["in", "inner.first", "edited"])),
        "the inner reducer appended"
    );
    assert_eq!(edited.next, vec!["ask".into()]);

    // Paths that lead nowhere.
    for ns in [
        "nope:1".to_owned(),
        format!("{mid_ns}|nope:2"),
        format!("{inner_ns}|ask:3"),
    ] {
        let mut bad = RunConfig::new("t");
        bad.checkpoint_ns = ns.clone();
        let err = graph.get_state(&bad).await.expect_err("no such subgraph");
        assert!(matches!(err, Error::SubgraphNotFound { .. }), "{ns}: {err}");
        assert_eq!(err.kind(), ErrorKind::Input);
        let err = graph
            .update_state(&bad, Update::new(), None)
            .await
            .expect_err("no such subgraph");
        assert!(matches!(err, Error::SubgraphNotFound { .. }), "{ns}: {err}");
        let err = graph
            .get_state_history(&bad)
            .await
            .expect_err("no such subgraph");
        assert!(matches!(err, Error::SubgraphNotFound { .. }), "{ns}: {err}");
    }
}

/// An update of a subgraph task's namespace before the subgraph stored anything there is
/// refused (`SubgraphNotStarted`): the subgraph's first checkpoint is its parent task's to
/// make, and one made by the update would make the task take the subgraph as already run,
/// skipping the parent's input. Reading the namespace finds nothing.
#[tokio::test]
async fn updating_a_subgraph_namespace_before_the_subgraph_ran_is_refused() {
    use antler_graph::{Error, ErrorKind};
    let mut inner = graph();
    inner.add_node("x", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["inner.x"])))
    });
    inner.add_edge("__start__", "x").add_edge("x", "__end__");
    let mut outer = graph();
    only_subgraph(
        &mut outer,
        "sub",
        inner.compile().expect("valid inner graph"),
    );
    outer.interrupt_before(["sub"]);
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert!(out.paused, "stopped before `sub`");
    let head = graph.get_state(&cfg).await.unwrap().expect("a head");
    let ns = head.tasks[0]
        .subgraph_ns
        .clone()
        .expect("sub is a subgraph");
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = ns.clone();
    assert!(graph.get_state(&sub_cfg).await.unwrap().is_none());
    let err = graph
        .update_state(&sub_cfg, Update::new().set(&LOG, log(&["early"])), None)
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::SubgraphNotStarted { namespace } if *namespace == ns),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // The parent's task then runs the subgraph on the parent's input (whose whole final
    // `log` the parent's appending reducer receives back).
    let out = graph.invoke(None::<Update>, &cfg).await.unwrap();
    assert_eq!(out.values.get(&LOG), Some(&log(&["in", "in", "inner.x"])));
}

/// A parent whose only step is the subgraph `sub` at node `name`, declaring `log` as a last
/// value (so the subgraph's final `log` replaces the parent's), on an in-process checkpointer.
fn last_value_parent(name: &str, sub: antler_graph::CompiledGraph) -> antler_graph::CompiledGraph {
    let mut outer = StateGraph::new();
    outer
        .channel(&LOG, ChannelSpec::last_value())
        .expect("declared once");
    only_subgraph(&mut outer, name, sub);
    outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
}

/// A subgraph node that interrupts for the first time after the parent resumed takes the
/// parent's resume value, as a top-level node does (runtime-spec §2.7: `interrupt()` uses the
/// NULL task's resume value; the reference's subgraph falls back to its parent's): here the
/// subgraph paused before `approve` at a static breakpoint, so nothing in it was waiting for
/// an answer when the parent was resumed with one. Nested one and two subgraphs deep, and at
/// the top level for comparison. Before, the value stayed with the parent and `approve` asked
/// again.
#[tokio::test]
async fn a_parents_resume_value_answers_a_subgraphs_first_interrupt() {
    fn approving() -> StateGraph {
        let mut g = graph();
        g.add_node("plan", |_s: State, _c| async {
            Ok(Update::new().set(&LOG, log(&["plan"])))
        });
        g.add_node("approve", |_s: State, ctx: Context| async move {
            let a = ctx.interrupt(json!("approve?"))?;
            Ok(Update::new().set(&LOG, log(&[&format!("approve={a}")])))
        });
        g.add_edge("__start__", "plan")
            .add_edge("plan", "approve")
            .add_edge("approve", "__end__");
        g.interrupt_before(["approve"]);
        g
    }
    /// `inner` as the only node of a parent whose `log` takes the subgraph's final list.
    fn wrapped(inner: antler_graph::CompiledGraph) -> StateGraph {
        let mut outer = StateGraph::new();
        outer
            .channel(&LOG, ChannelSpec::last_value())
            .expect("declared once");
        outer.add_subgraph("sub", inner);
        outer
            .add_edge("__start__", "sub")
            .add_edge("sub", "__end__");
        outer
    }
    for depth in 0..3 {
        let mut g = approving();
        for _ in 0..depth {
            g = wrapped(g.compile().expect("valid graph"));
        }
        let graph = g
            .compile()
            .expect("valid graph")
            .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
        let cfg = RunConfig::new("t");
        let out = graph
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert!(out.paused && out.interrupts.is_empty(), "depth {depth}");
        let out = graph
            .invoke(Command::resume(json!("yes")), &cfg)
            .await
            .unwrap();
        assert!(
            out.interrupts.is_empty(),
            "depth {depth}: {:?}",
            out.interrupts
        );
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "plan", "approve=\"yes\""]),
            "depth {depth}"
        );
    }
}

/// One of the runtime's errors inside a subgraph keeps its kind through the subgraph's node
/// (the reference re-raises the subgraph's own exception): a subgraph that loops past the
/// recursion limit fails the parent's run with kind `RecursionLimit`, one or two subgraphs
/// deep, while a subgraph node's own failure stays kind `Node`. Before, both were `Node`.
#[tokio::test]
async fn a_runtime_error_inside_a_subgraph_keeps_its_kind() {
    use antler_graph::ErrorKind;
    for (looping, kind) in [(true, ErrorKind::RecursionLimit), (false, ErrorKind::Node)] {
        for depth in 1..3 {
            let mut g = graph();
            g.add_node("work", move |_s: State, _c| async move {
                if looping {
                    Ok(Update::new().set(&LOG, log(&["again"])))
                } else {
                    Err(antler_graph::NodeError::failed(std::io::Error::other(
                        "the node's own failure",
                    )))
                }
            });
            g.add_edge("__start__", "work");
            g.add_router("work", None, |_s: &State| vec!["work".into()]);
            let mut sub = g.compile().expect("valid graph");
            for _ in 0..depth {
                sub = last_value_parent("sub", sub);
            }
            let err = sub
                .invoke(
                    Update::new().set(&LOG, log(&["in"])),
                    &RunConfig::new("t").with_recursion_limit(4),
                )
                .await
                .unwrap_err();
            assert_eq!(err.kind(), kind, "looping {looping}, depth {depth}: {err}");
        }
    }
}

/// A node reads the run's thread and run id from its context (kernel-spec R136, which
/// middlewares scope their state by), a subgraph's node its parent's.
#[tokio::test]
async fn nodes_see_the_runs_thread_and_run_id() {
    fn recording(g: &mut StateGraph) {
        g.add_node("who", |_s: State, ctx: Context| async move {
            let seen = format!("{}/{}", ctx.thread_id(), ctx.run_id().unwrap_or("none"));
            Ok(Update::new().set(&LOG, log(&[&seen])))
        });
        g.add_edge("__start__", "who").add_edge("who", "__end__");
    }
    let mut top = graph();
    recording(&mut top);
    let mut inner = graph();
    recording(&mut inner);
    let nested = last_value_parent("sub", inner.compile().expect("valid graph"));
    let top = top
        .compile()
        .expect("valid graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    for g in [&top, &nested] {
        let mut cfg = RunConfig::new("thread-7");
        cfg.run_id = Some("run-3".into());
        let out = g
            .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
            .await
            .unwrap();
        assert_eq!(
            out.values.get(&LOG).unwrap(),
            &log(&["in", "thread-7/run-3"])
        );
        let out = g
            .invoke(
                Update::new().set(&LOG, log(&["in"])),
                &RunConfig::new("other"),
            )
            .await
            .unwrap();
        assert_eq!(out.values.get(&LOG).unwrap(), &log(&["in", "other/none"]));
    }
}

/// A replay of the newest checkpoint when it came from an update (which re-runs its tasks
/// under the same ids when nothing else forces a fork) saves a fork when a task is a subgraph:
/// in place, the subgraph's namespace (named by its task id) still holds its earlier run,
/// which the task would return, or continue, instead of running the subgraph again. Before
/// 2026-12-02 the replay returned the earlier run's values without running the subgraph.
#[tokio::test]
async fn a_replay_in_place_runs_a_subgraph_task_again() {
    use antler_graph::{Input, NodeError, NodeId};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let agent_runs = Arc::new(AtomicUsize::new(0));
    let checker_runs = Arc::new(AtomicUsize::new(0));
    let mut inner = graph();
    let runs = agent_runs.clone();
    inner.add_node("agent", move |_s: State, _c| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(Update::new().set(&LOG, log(&[&format!("agent-{n}")]))) }
    });
    inner
        .add_edge("__start__", "agent")
        .add_edge("agent", "__end__");
    let mut outer = StateGraph::new();
    outer.channel(&LOG, ChannelSpec::last_value()).unwrap();
    outer.add_subgraph("sub", inner.compile().unwrap());
    let runs = checker_runs.clone();
    outer.add_node("checker", move |_s: State, _c| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                return Err(NodeError::failed(std::io::Error::other(
                    "checker fails once",
                )));
            }
            Ok(Update::new())
        }
    });
    outer
        .add_edge("__start__", "sub")
        .add_edge("__start__", "checker")
        .add_edge("sub", "__end__")
        .add_edge("checker", "__end__");
    let graph = outer
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");
    // U: an update that leaves `sub` and `checker` next.
    let u = graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["seed"])),
            Some(NodeId::new("__start__")),
        )
        .await
        .unwrap();
    // The subgraph finishes (its result stored on U), the checker fails: U stays the newest.
    assert!(graph.invoke(Input::Continue, &cfg).await.is_err());
    assert_eq!(agent_runs.load(Ordering::SeqCst), 1);
    let out = graph
        .invoke(Input::Continue, &cfg.clone().with_checkpoint(u))
        .await
        .unwrap();
    assert_eq!(
        agent_runs.load(Ordering::SeqCst),
        2,
        "the subgraph ran again"
    );
    assert_eq!(out.values.get(&LOG), Some(&log(&["seed", "agent-1"])));
}

/// Adds `inner` as node `sub`, retried once (1 ms apart) on failure.
fn add_retried_subgraph(outer: &mut StateGraph, inner: antler_graph::CompiledGraph) {
    use antler_graph::{NodeOptions, RetryPolicy};
    outer.add_subgraph_with(
        "sub",
        inner,
        NodeOptions {
            retry: Some(RetryPolicy {
                max_attempts: 2,
                initial_interval: std::time::Duration::from_millis(1),
                jitter: false,
                ..RetryPolicy::default()
            }),
            ..NodeOptions::default()
        },
    );
}

/// A subgraph task that failed on a store error after it took the parent's resume value, and is
/// retried, gets the value again: its retry answers the interrupt the value was meant for.
/// Before 2026-12-02 the first attempt's take emptied the parent's slot, and the retry asked
/// again as if the answer had been ignored.
#[tokio::test]
async fn a_retried_subgraph_task_keeps_the_parents_resume_value() {
    use antler_graph::Input;
    let mut inner = graph();
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        let a = ctx.interrupt(json!("q?"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("answer={a}")])))
    });
    inner
        .add_edge("__start__", "ask")
        .add_edge("ask", "__end__");
    let mut outer = graph();
    add_retried_subgraph(&mut outer, inner.compile().unwrap());
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    // Fails the first `put_writes` to a subgraph namespace once armed.
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = armed.clone();
    let store = Arc::new(crate::common::Failing::new(move |scope, write| {
        write == crate::common::StoreWrite::Writes
            && scope.ns.starts_with("sub:")
            && flag.swap(false, std::sync::atomic::Ordering::SeqCst)
    }));
    let graph = outer.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let first = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    assert_eq!(first.interrupts.len(), 1);
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = graph
        .invoke(Input::Command(Command::resume(json!("yes"))), &cfg)
        .await
        .unwrap();
    assert!(
        !armed.load(std::sync::atomic::Ordering::SeqCst),
        "a subgraph write failed"
    );
    assert!(out.interrupts.is_empty(), "{:?}", out.interrupts);
    assert!(
        out.values
            .get(&LOG)
            .is_some_and(|l| l.iter().any(|e| e == "answer=\"yes\"")),
        "{:?}",
        out.values.get(&LOG)
    );
}

/// The value goes back only while the interrupts it was taken for are all unanswered: a
/// subgraph whose node took the answer, and whose next node then failed, does not get it again
/// on the retry, where it would answer that node's new question. Its retry stops on the new
/// question.
#[tokio::test]
async fn a_resume_value_a_failed_subgraph_used_does_not_answer_a_later_question() {
    use antler_graph::{Input, NodeError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let after_runs = Arc::new(AtomicUsize::new(0));
    let mut inner = graph();
    inner.add_node("ask", |_s: State, ctx: Context| async move {
        let a = ctx.interrupt(json!("q1"))?;
        Ok(Update::new().set(&LOG, log(&[&format!("q1={a}")])))
    });
    let runs = after_runs.clone();
    inner.add_node("after", move |_s: State, ctx: Context| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                return Err(NodeError::failed(std::io::Error::other("after fails once")));
            }
            let a = ctx.interrupt(json!("q2"))?;
            Ok(Update::new().set(&LOG, log(&[&format!("q2={a}")])))
        }
    });
    inner
        .add_edge("__start__", "ask")
        .add_edge("ask", "after")
        .add_edge("after", "__end__");
    let mut outer = graph();
    add_retried_subgraph(&mut outer, inner.compile().unwrap());
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    let graph = outer
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");
    graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &cfg)
        .await
        .unwrap();
    let out = graph
        .invoke(Input::Command(Command::resume(json!("yes"))), &cfg)
        .await
        .unwrap();
    assert_eq!(after_runs.load(Ordering::SeqCst), 2);
    let asked: Vec<_> = out.interrupts.iter().map(|i| i.value.clone()).collect();
    assert_eq!(asked, [json!("q2")]);
}

/// A replay of an update checkpoint whose subgraph task never ran runs in place, as any such
/// replay does (no fork: the namespace `get_state` showed for the task is where it runs).
#[tokio::test]
async fn a_replay_in_place_of_a_subgraph_that_never_ran_saves_no_fork() {
    use antler_graph::{Input, NodeId, Source};
    let mut inner = graph();
    inner.add_node("agent", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["agent"])))
    });
    inner
        .add_edge("__start__", "agent")
        .add_edge("agent", "__end__");
    let mut outer = StateGraph::new();
    outer.channel(&LOG, ChannelSpec::last_value()).unwrap();
    outer.add_subgraph("sub", inner.compile().unwrap());
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    let graph = outer
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");
    let u = graph
        .update_state(
            &cfg,
            Update::new().set(&LOG, log(&["seed"])),
            Some(NodeId::new("__start__")),
        )
        .await
        .unwrap();
    let shown = graph
        .get_state(&cfg.clone().with_checkpoint(u.clone()))
        .await
        .unwrap()
        .unwrap();
    let out = graph
        .invoke(Input::Continue, &cfg.clone().with_checkpoint(u))
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG), Some(&log(&["seed", "agent"])));
    let history = graph.get_state_history(&cfg).await.unwrap();
    assert!(history.iter().all(|s| s.source != Source::Fork));
    // The subgraph ran in the namespace its task was shown with.
    let mut at = RunConfig::new("t");
    at.checkpoint_ns = format!("sub:{}", shown.tasks[0].id);
    assert!(graph.get_state(&at).await.unwrap().is_some());
}

/// A store error of a subgraph's own run keeps the checkpoint crate's kind through the parent
/// node's failure: `checkpoint_kind` looks through `NodeFailed` as `kind` does (before
/// 2026-12-02 it answered `None`, so a caller's retry-on-`Conflict` never saw work done in
/// subgraphs).
#[tokio::test]
async fn a_subgraphs_store_error_keeps_its_checkpoint_kind() {
    let mut inner = graph();
    inner.add_node("agent", |_s: State, _c| async {
        Ok(Update::new().set(&LOG, log(&["agent"])))
    });
    inner
        .add_edge("__start__", "agent")
        .add_edge("agent", "__end__");
    let mut outer = graph();
    outer.add_subgraph("sub", inner.compile().unwrap());
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    let store = Arc::new(crate::common::Failing::conflicting(|scope, write| {
        write == crate::common::StoreWrite::Put && scope.ns.starts_with("sub:")
    }));
    let err = outer
        .compile()
        .unwrap()
        .with_checkpointer(store)
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, antler_graph::Error::NodeFailed { .. }),
        "{err}"
    );
    assert_eq!(err.kind(), antler_graph::ErrorKind::Storage, "{err}");
    assert_eq!(
        err.checkpoint_kind(),
        Some(antler_checkpoint::ErrorKind::Conflict),
        "{err}"
    );
}
