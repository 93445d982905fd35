//! Snapshot tests of super-step traces (salsa-style event logs, expect-test).

use antler_graph::{Command, Context, Input, Key, RunConfig, State, Update};
use expect_test::expect;
use serde_json::json;

use crate::common::{LAST, LOG, N, graph, log, memory, trace, trace_with_checkpoints};

#[tokio::test]
async fn trace_of_parallel_branches_join_and_router() {
    let mut g = graph();
    g.add_node("b", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["b"])).set(&N, 1))
    });
    g.add_node("a", |_s, ctx: Context| async move {
        ctx.emit(json!({"progress": 1}));
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_node("c", |s: State, _c| async move {
        Ok(Update::new().set(
            &LAST,
            format!("c after {}", s.get(&LOG).map_or(0, Vec::len)),
        ))
    });
    g.add_edge("__start__", "b").add_edge("__start__", "a");
    g.add_join(["a", "b"], "c");
    g.add_router("c", None, |s: &State| {
        vec![if s.get(&N) < Some(&3) {
            "b".into()
        } else {
            "__end__".into()
        }]
    });
    let graph = memory(g);
    let got = trace(
        &graph,
        Update::new().set(&LOG, log(&["in"])),
        &RunConfig::new("t"),
    )
    .await;
    expect![[r#"
        checkpoint input step -1
        step 0 Pull __start__: writes [log=["in"]]
        checkpoint loop step 0
        custom a: {"progress":1}
        step 1 Pull a: writes [log=["a"]]
        step 1 Pull b: writes [log=["b"], n=1]
        checkpoint loop step 1
        step 2 Pull c: writes [last="c after 3"]
        checkpoint loop step 2
        step 3 Pull b: writes [log=["b"], n=1]
        checkpoint loop step 3
        done State({"log":["in","a","b","b"],"last":"c after 3","n":2})
    "#]]
    .assert_eq(&got);
}

#[tokio::test]
async fn trace_of_interrupt_and_resume() {
    const OK: Key<bool> = Key::from_static("ok");
    let mut g = graph();
    g.channel(&OK, antler_graph::ChannelSpec::last_value())
        .unwrap();
    g.add_node("ask", |s: State, ctx: Context| async move {
        if s.get(&OK).is_some() {
            return Ok(Command::new().goto("__end__"));
        }
        let a = ctx.interrupt(json!("continue?"))?;
        Ok(Command::new().update(
            Update::new()
                .set(&OK, true)
                .set(&LOG, log(&[&format!("answer={a}")])),
        ))
    });
    g.add_node("side", |_s, _c| async { Ok(Update::new().set(&N, 5)) });
    g.add_edge("__start__", "ask").add_edge("__start__", "side");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let first = trace(&graph, Update::new().set(&LOG, log(&["in"])), &cfg).await;
    let second = trace(&graph, Command::resume(json!("yes")), &cfg).await;
    let third = trace(&graph, Input::Continue, &cfg).await;
    expect![[r#"
        checkpoint input step -1
        step 0 Pull __start__: writes [log=["in"]]
        checkpoint loop step 0
        interrupted ["ask:\"continue?\""]
        done State({"log":["in"],"n":5})
        --
        step 1 Pull ask: writes [ok=true, log=["answer=\"yes\""]]
        step 1 Pull side: writes [n=5]
        checkpoint loop step 1
        done State({"log":["in","answer=\"yes\""],"n":5,"ok":true})
        --
        done State({"log":["in","answer=\"yes\""],"n":5,"ok":true})
    "#]]
    .assert_eq(&format!("{first}--\n{second}--\n{third}"));
}

/// A `Send` fan-out of three packets and a join: the split's checkpoint stores three PUSH
/// tasks as the next step, each run with its packet, then the join.
#[tokio::test]
async fn trace_of_send_fan_out_and_join_with_what_each_checkpoint_stores() {
    use crate::common::{ITEM, add_split};
    let mut g = graph();
    add_split(&mut g, 3);
    g.add_node("work", |s: State, _c| async move {
        let item = s.get(&ITEM).cloned().unwrap_or_default();
        Ok(Update::new()
            .set(&LOG, log(&[&format!("w:{item}")]))
            .set(&N, 1))
    });
    g.add_node("join", |s: State, _c| async move {
        Ok(Update::new().set(&LAST, format!("joined {}", s.get(&N).copied().unwrap_or(0))))
    });
    g.add_edge("__start__", "split");
    g.add_join(["work"], "join");
    g.add_edge("join", "__end__");
    let graph = memory(g);
    let got = trace_with_checkpoints(&graph, Update::new(), &RunConfig::new("t")).await;
    expect![[r#"
        checkpoint input step -1
        step 0 Pull __start__: writes []
        checkpoint loop step 0
        step 1 Pull split: writes [] sends [work<-{"item":"x0"}, work<-{"item":"x1"}, work<-{"item":"x2"}]
        checkpoint loop step 1
        step 2 Push work: writes [log=["w:x0"], n=1]
        step 2 Push work: writes [log=["w:x1"], n=1]
        step 2 Push work: writes [log=["w:x2"], n=1]
        checkpoint loop step 2
        step 3 Pull join: writes [last="joined 3"]
        checkpoint loop step 3
        done State({"log":["w:x0","w:x1","w:x2"],"last":"joined 3","n":3})
        = input step -1: next [__start__:Pull:Done] values State({"log":[],"n":0})
        = loop step 0: next [split:Pull:Done] values State({"log":[],"n":0})
        = loop step 1: next [work:Push:Done, work:Push:Done, work:Push:Done] values State({"log":[],"n":0})
        = loop step 2: next [join:Pull:Done] values State({"log":["w:x0","w:x1","w:x2"],"n":3})
        = loop step 3: next [] values State({"log":["w:x0","w:x1","w:x2"],"last":"joined 3","n":3})
    "#]].assert_eq(&got);
}

/// One of two parallel tasks fails: the step's finished task keeps its writes, the checkpoint
/// still names both tasks as next (one done), and continuing the thread re-runs only the one
/// that failed.
#[tokio::test]
async fn trace_of_a_failed_task_and_the_run_that_retries_only_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let failed_once = std::sync::Arc::new(AtomicBool::new(false));
    // How often `ok` ran: its writes were stored when its step failed, so once.
    let ok_runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut g = graph();
    let runs = ok_runs.clone();
    g.add_node("ok", move |_s, _c| {
        runs.fetch_add(1, Ordering::SeqCst);
        async { Ok(Update::new().set(&LOG, log(&["ok"]))) }
    });
    let f = failed_once.clone();
    g.add_node("flaky", move |_s, _c| {
        let f = f.clone();
        async move {
            if !f.swap(true, Ordering::SeqCst) {
                return Err(antler_graph::NodeError::failed("first attempt fails"));
            }
            Ok(Update::new().set(&LOG, log(&["flaky"])))
        }
    });
    g.add_edge("__start__", "ok").add_edge("__start__", "flaky");
    g.add_edge("ok", "__end__").add_edge("flaky", "__end__");
    let graph = memory(g);
    let cfg = RunConfig::new("t");
    let first = trace_with_checkpoints(&graph, Update::new().set(&LOG, log(&["in"])), &cfg).await;
    let second = trace_with_checkpoints(&graph, Input::Continue, &cfg).await;
    expect![[r#"
        checkpoint input step -1
        step 0 Pull __start__: writes [log=["in"]]
        checkpoint loop step 0
        error node 'flaky' failed: first attempt fails
        = input step -1: next [__start__:Pull:Done] values State({"log":[],"n":0})
        = loop step 0: next [flaky:Pull:Error, ok:Pull:Done] values State({"log":["in"],"n":0})
        --
        step 1 Pull flaky: writes [log=["flaky"]]
        step 1 Pull ok: writes [log=["ok"]]
        checkpoint loop step 1
        done State({"log":["in","flaky","ok"],"n":0})
        = loop step 1: next [] values State({"log":["in","flaky","ok"],"n":0})
    "#]]
    .assert_eq(&format!("{first}--\n{second}"));
    // The trace lists the step's tasks with their writes; `ok`'s came from the store.
    assert_eq!(ok_runs.load(Ordering::SeqCst), 1);
}
