//! Subgraphs as nodes, with their own checkpoint namespace; interrupts inside them bubble up and resume.

use std::sync::Arc;

use antler_graph::{
    ChannelSpec, Command, Context, Key, MemoryCheckpointer, RunConfig, State, StateGraph, Update,
};
use serde_json::json;

use crate::common::{LOG, graph, log};

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
    outer.add_subgraph("sub", inner.clone());
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
        .with_checkpointer(store.clone());
    let inner = inner.with_checkpointer(store);
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

    // The subgraph's checkpoints live in `sub:<task id>`, not in the root namespace.
    let mut sub_cfg = RunConfig::new("t");
    sub_cfg.checkpoint_ns = format!("sub:{task}");
    let sub_head = inner
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
    let mut outer = StateGraph::new();
    outer
        .channel(&LOG, ChannelSpec::last_value())
        .expect("declared once");
    outer.add_subgraph("sub", inner.compile().expect("valid inner graph"));
    outer
        .add_edge("__start__", "sub")
        .add_edge("sub", "__end__");
    let graph = outer
        .compile()
        .expect("valid outer graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let out = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t"))
        .await
        .unwrap();
    assert_eq!(out.values.get(&LOG).unwrap(), &log(&["from child"]));
}
