//! Snapshot tests of super-step traces (salsa-style event logs, expect-test).

use antler_graph::{Command, Context, Input, Key, RunConfig, State, Update};
use expect_test::expect;
use serde_json::json;

use crate::common::{LAST, LOG, N, graph, log, memory, trace};

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
