//! Reference-trace runner (issue 6): builds every `graph-program/1` program with the public API,
//! runs its script on one thread and compares each operation's trace record with the one
//! LangGraph 1.2.22 produced (`shared/fixtures/graph-programs/README.md`).
//!
//! `ANTLER_GRAPH_PROGRAMS=<file>` replays another file in the same format; `ANTLER_SHARED_DIR`
//! names the `shared/` folder when it is not beside the repository.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use antler_graph::{
    ChannelSpec, Checkpointer, Command, CompiledGraph, Context, Durability, Error, Goto, Input,
    Key, MemoryCheckpointer, NodeError, NodeId, NodeOptions, RunConfig, SaverCheckpointer, Send,
    State, StateGraph, StreamEvent, StreamItem, StreamModes, TaskKind, TaskStatus, Update,
};
use antler_state_reducers::{Message, MessageWrite, merge_message_writes};
use futures::StreamExt;
use serde_json::{Value as Json, json};

/// The injected failure of `fail_once`.
#[derive(Debug)]
struct InjectedError(String);

impl std::fmt::Display for InjectedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for InjectedError {}

fn programs_path() -> PathBuf {
    if let Ok(p) = std::env::var("ANTLER_GRAPH_PROGRAMS") {
        return PathBuf::from(p);
    }
    // `<repo>/crates/graph` → `<repo>/../shared/...` (the layout of the workspace and of CI's
    // clone), or the `shared/` folder `ANTLER_SHARED_DIR` names, as the other fixture tests.
    let shared = std::env::var_os("ANTLER_SHARED_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    );
    shared.join("fixtures/graph-programs/sample.jsonl")
}

fn s<'a>(j: &'a Json, k: &str) -> &'a str {
    j.get(k).and_then(Json::as_str).unwrap_or_default()
}

fn int_of(input: &State, key: &str) -> i64 {
    input
        .get(&Key::<Json>::new(key))
        .and_then(Json::as_i64)
        .unwrap_or(0)
}

fn text_of(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Number(n) => n.to_string(),
        Json::Bool(b) => if *b { "true" } else { "false" }.to_owned(),
        Json::Null => "None".to_owned(),
        other => other.to_string(),
    }
}

fn render(t: &str, node: &str, i: Option<usize>, input: &State) -> String {
    let mut out = String::new();
    let mut rest = t;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let ph = &rest[start + 1..start + end];
        match ph {
            "node" => out.push_str(node),
            "i" => out.push_str(&i.map(|i| i.to_string()).unwrap_or_default()),
            _ if ph.starts_with("ch:") => match input.get(&Key::<Json>::new(&ph[3..])) {
                Some(v) => out.push_str(&text_of(v)),
                None => out.push('-'),
            },
            _ if ph.starts_with("len:") => {
                let n = input
                    .get(&Key::<Json>::new(&ph[4..]))
                    .and_then(Json::as_array)
                    .map_or(0, Vec::len);
                out.push_str(&n.to_string());
            }
            _ => {
                out.push('{');
                out.push_str(ph);
                out.push('}');
            }
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}

fn count_of(c: &Json, input: &State) -> usize {
    if let Some(k) = c.get("const").and_then(Json::as_i64) {
        return usize::try_from(k).unwrap_or(0);
    }
    let x = int_of(input, s(c, "from"));
    let plus = c.get("plus").and_then(Json::as_i64).unwrap_or(0);
    let max = c.get("max").and_then(Json::as_i64).unwrap_or(i64::MAX);
    usize::try_from(max.min((x + plus).max(0))).unwrap_or(0)
}

fn packets(target: &str, count: usize, payload: &Json, node: &str, input: &State) -> Vec<Send> {
    (0..count)
        .map(|i| {
            let mut send = Send::new(target);
            if let Some(m) = payload.as_object() {
                for (k, t) in m {
                    send = send.with(
                        &Key::<Json>::new(k),
                        Json::String(render(t.as_str().unwrap_or_default(), node, Some(i), input)),
                    );
                }
            }
            send
        })
        .collect()
}

type Fired = Arc<Mutex<HashSet<(String, usize)>>>;

fn run_actions(
    node: &str,
    def: &Json,
    input: &State,
    ctx: &Context,
    fired: &Fired,
) -> Result<Command, NodeError> {
    let mut update = Update::new();
    let mut gotos: Vec<Goto> = Vec::new();
    let actions = def
        .get("actions")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    for (ai, a) in actions.iter().enumerate() {
        let chan = Key::<Json>::new(s(a, "chan"));
        match s(a, "op") {
            "append" => {
                let items: Vec<Json> = a["items"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .map(|t| {
                                Json::String(render(
                                    t.as_str().unwrap_or_default(),
                                    node,
                                    None,
                                    input,
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                update.push(&chan, Json::Array(items));
            }
            "add" => update.push(&chan, a["value"].clone()),
            "set" => {
                let v = &a["value"];
                let w = match v.get("str") {
                    Some(t) => {
                        Json::String(render(t.as_str().unwrap_or_default(), node, None, input))
                    }
                    None => v.get("bool").cloned().unwrap_or(Json::Null),
                };
                update.push(&chan, w);
            }
            "bump" => {
                let by = a["by"].as_i64().unwrap_or(0);
                update.push(&chan, json!(int_of(input, s(a, "from")) + by));
            }
            "message" => update.push(
                &chan,
                json!({"type": s(a, "role"), "id": render(s(a, "id"), node, None, input),
                       "content": render(s(a, "content"), node, None, input)}),
            ),
            "remove" => update.push(
                &chan,
                json!({"type": "remove", "id": render(s(a, "id"), node, None, input)}),
            ),
            "send" => {
                let n = count_of(&a["count"], input);
                gotos.extend(
                    packets(s(a, "target"), n, &a["payload"], node, input)
                        .into_iter()
                        .map(Goto::Send),
                );
            }
            "goto" => {
                for t in a["to"].as_array().into_iter().flatten() {
                    gotos.push(Goto::Node(NodeId::from(t.as_str().unwrap_or_default())));
                }
            }
            "interrupt" => {
                let flag = Key::<Json>::new(s(a, "flag"));
                if input.get(&flag) != Some(&Json::Bool(true)) {
                    let answer =
                        ctx.interrupt(Json::String(render(s(a, "value"), node, None, input)))?;
                    update.push(&flag, Json::Bool(true));
                    update.push(
                        &Key::<Json>::new(s(a, "record")),
                        json!([format!("{node}<-{}", text_of(&answer))]),
                    );
                }
            }
            "fail_once" => {
                let flag = Key::<Json>::new(s(a, "flag"));
                if input.get(&flag) == Some(&Json::Bool(true)) {
                    let mut f = fired
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if f.insert((node.to_owned(), ai)) {
                        return Err(NodeError::failed(InjectedError(format!(
                            "injected failure in {node}"
                        ))));
                    }
                }
            }
            other => return Err(NodeError::failed(format!("unknown action {other}"))),
        }
    }
    let mut cmd = Command::new().update(update);
    for g in gotos {
        cmd = cmd.goto(g);
    }
    Ok(cmd)
}

/// The format's removal `{"type": "remove", "id": ID}` stands for LangChain's `RemoveMessage(id=ID)`.
fn to_message(j: Json) -> Result<Message, antler_state_reducers::Error> {
    if j.get("type").and_then(Json::as_str) == Some("remove") {
        return Ok(Message::remove(
            j.get("id").and_then(Json::as_str).unwrap_or_default(),
        ));
    }
    Message::from_json(j)
}

fn to_write(j: Json) -> Result<MessageWrite, antler_state_reducers::Error> {
    match j {
        Json::Array(items) => items
            .into_iter()
            .map(to_message)
            .collect::<Result<Vec<_>, _>>()
            .map(MessageWrite::Messages),
        other => to_message(other).map(|m| MessageWrite::Messages(vec![m])),
    }
}

fn messages_reduce(acc: &Json, writes: &[Json]) -> Result<Json, antler_graph::BoxError> {
    let state: Vec<Message> = acc
        .as_array()
        .into_iter()
        .flatten()
        .cloned()
        .map(Message::from_json)
        .collect::<Result<_, _>>()?;
    let ws: Vec<MessageWrite> = writes
        .iter()
        .cloned()
        .map(to_write)
        .collect::<Result<_, _>>()?;
    let out = merge_message_writes(&state, &ws)?;
    Ok(Json::Array(out.iter().map(Message::to_json).collect()))
}

fn append_list(acc: &Json, ws: &[Json]) -> Result<Json, antler_graph::BoxError> {
    let mut out = acc.as_array().cloned().unwrap_or_default();
    for w in ws {
        out.extend(
            w.as_array()
                .cloned()
                .ok_or("append_list write is not a list")?,
        );
    }
    Ok(Json::Array(out))
}

fn sum(acc: &Json, ws: &[Json]) -> Result<Json, antler_graph::BoxError> {
    let mut n = acc.as_i64().unwrap_or(0);
    for w in ws {
        n += w.as_i64().ok_or("sum write is not an int")?;
    }
    Ok(json!(n))
}

type Reduce = fn(&Json, &[Json]) -> Result<Json, antler_graph::BoxError>;

/// The reducer channels as plain reducers, or as delta channels with snapshot frequency `F`.
fn reducer_or_delta(
    id: &str,
    init: fn() -> Json,
    reduce: Reduce,
    delta: Option<u32>,
) -> ChannelSpec<Json> {
    match delta {
        Some(f) => ChannelSpec::delta(id, init, reduce, f),
        None => ChannelSpec::reducer(id, init, reduce),
    }
}

/// Builds the program's graph through the public API only.
fn build(
    program: &Json,
    fired: &Fired,
    cp: Arc<dyn Checkpointer>,
    delta: Option<u32>,
) -> Result<CompiledGraph, String> {
    let mut g = StateGraph::new();
    let mut names = HashSet::new();
    for c in program["channels"].as_array().into_iter().flatten() {
        let key = Key::<Json>::new(s(c, "name"));
        names.insert(s(c, "name").to_owned());
        let spec = match s(c, "kind") {
            "last_value" => ChannelSpec::last_value(),
            "append_list" => reducer_or_delta("append_list", || json!([]), append_list, delta),
            "sum" => reducer_or_delta("sum", || json!(0), sum, delta),
            "messages" => reducer_or_delta("messages", || json!([]), messages_reduce, delta),
            other => return Err(format!("unknown channel kind {other}")),
        };
        g.channel(&key, spec).map_err(|e| e.to_string())?;
    }
    let mut payload_keys = HashSet::new();
    let mut collect = |p: &Json| {
        for k in p.as_object().into_iter().flat_map(|m| m.keys()) {
            payload_keys.insert(k.clone());
        }
    };
    for n in program["nodes"].as_array().into_iter().flatten() {
        for a in n["actions"].as_array().into_iter().flatten() {
            if s(a, "op") == "send" {
                collect(&a["payload"]);
            }
        }
    }
    for e in program["edges"].as_array().into_iter().flatten() {
        if s(e, "kind") == "router" && s(&e["router"], "type") == "fanout" {
            collect(&e["router"]["payload"]);
        }
    }
    for k in payload_keys {
        if !names.contains(&k) {
            g.channel(&Key::<Json>::new(k), ChannelSpec::packet_only())
                .map_err(|e| e.to_string())?;
        }
    }
    for n in program["nodes"].as_array().into_iter().flatten() {
        let name = s(n, "name").to_owned();
        let mut dests = Vec::new();
        for a in n["actions"].as_array().into_iter().flatten() {
            match s(a, "op") {
                "send" => dests.push(NodeId::from(s(a, "target"))),
                "goto" => dests.extend(
                    a["to"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| NodeId::from(t.as_str().unwrap_or_default())),
                ),
                _ => {}
            }
        }
        let def = n.clone();
        let fired = fired.clone();
        let node_name = name.clone();
        let node = FnNode(move |input: State, ctx: Context| {
            run_actions(&node_name, &def, &input, &ctx, &fired)
        });
        g.add_node_with(
            name,
            Arc::new(node),
            NodeOptions {
                destinations: dests,
                ..NodeOptions::default()
            },
        );
    }
    for e in program["edges"].as_array().into_iter().flatten() {
        match s(e, "kind") {
            "edge" => {
                g.add_edge(s(e, "from"), s(e, "to"));
            }
            "join" => {
                let from: Vec<NodeId> = e["from"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| NodeId::from(x.as_str().unwrap_or_default()))
                    .collect();
                g.add_join(from, s(e, "to"));
            }
            "router" => {
                let r = e["router"].clone();
                let src = s(e, "from").to_owned();
                match s(&r, "type") {
                    "threshold" => {
                        let list = |k: &str| -> Vec<NodeId> {
                            r[k].as_array()
                                .into_iter()
                                .flatten()
                                .map(|x| NodeId::from(x.as_str().unwrap_or_default()))
                                .collect()
                        };
                        let (then, els) = (list("then"), list("else"));
                        let targets: Vec<NodeId> = then.iter().chain(&els).cloned().collect();
                        let chan = s(&r, "chan").to_owned();
                        let lt = r["lt"].as_i64().unwrap_or(0);
                        g.add_router(src, Some(targets), move |view: &State| {
                            let pick = if int_of(view, &chan) < lt {
                                &then
                            } else {
                                &els
                            };
                            pick.iter().cloned().map(Goto::Node).collect()
                        });
                    }
                    "fanout" => {
                        let target = s(&r, "target").to_owned();
                        let source = src.clone();
                        g.add_router(
                            src,
                            Some(vec![NodeId::from(target.as_str())]),
                            move |view: &State| {
                                let n = count_of(&r["count"], view);
                                packets(&target, n, &r["payload"], &source, view)
                                    .into_iter()
                                    .map(Goto::Send)
                                    .collect()
                            },
                        );
                    }
                    other => return Err(format!("unknown router {other}")),
                }
            }
            other => return Err(format!("unknown edge kind {other}")),
        }
    }
    // With delta channels the hot cache is off, so every operation rebuilds them by the history walk.
    Ok(g.compile()
        .map_err(|e| e.to_string())?
        .with_checkpointer(cp)
        .with_hot_cache(delta.is_none()))
}

/// A node from a synchronous closure (the program's actions are synchronous).
struct FnNode<F>(F);

#[async_trait::async_trait]
impl<F> antler_graph::Node for FnNode<F>
where
    F: Fn(State, Context) -> Result<Command, NodeError> + std::marker::Send + Sync + 'static,
{
    async fn run(&self, input: State, ctx: Context) -> Result<Command, NodeError> {
        (self.0)(input, ctx)
    }
}

fn update_of(values: &Json) -> Update {
    let mut u = Update::new();
    for (k, v) in values.as_object().into_iter().flatten() {
        u.push(&Key::<Json>::new(k), v.clone());
    }
    u
}

fn project_values(state: &State) -> Json {
    let mut m = state.to_json().unwrap_or_default();
    for v in m.values_mut() {
        if let Json::Array(items) = v {
            for it in items.iter_mut() {
                if let Json::Object(msg) = it
                    && msg.contains_key("additional_kwargs")
                {
                    *it = json!({"type": msg.get("type"), "id": msg.get("id"), "content": msg.get("content")});
                }
            }
        }
    }
    Json::Object(m)
}

fn error_record(e: &Error) -> (&'static str, Json) {
    use std::error::Error as _;
    match e {
        Error::InvalidConcurrentUpdate { .. } => (
            "invalid_update",
            json!({"type": "InvalidUpdateError", "message": e.to_string()}),
        ),
        Error::RecursionLimit { .. } => (
            "recursion_limit",
            json!({"type": "GraphRecursionError", "message": e.to_string()}),
        ),
        Error::NodeFailed { source, .. } if source.downcast_ref::<InjectedError>().is_some() => (
            "error",
            json!({"type": "InjectedError", "message": source.to_string()}),
        ),
        Error::Reducer { source, .. } => (
            "error",
            json!({"type": "ValueError", "message": source.to_string()}),
        ),
        other => (
            "error",
            json!({"type": "AntlerError", "message": other.to_string(), "source": other.source().map(ToString::to_string)}),
        ),
    }
}

async fn record_op(graph: &CompiledGraph, thread: &str, rl: usize, op: &Json) -> Json {
    let cfg = RunConfig::new(thread)
        .with_recursion_limit(rl)
        .with_durability(Durability::Sync);
    let before: Vec<antler_graph::StateSnapshot> =
        graph.get_state_history(&cfg).await.unwrap_or_default();
    let before_ids: HashSet<String> = before.iter().map(|s| s.checkpoint_id.to_string()).collect();
    let mut events = Vec::new();
    let result: Result<Vec<antler_graph::Interrupt>, Error> = match s(op, "op") {
        "update_state" => graph
            .update_state(
                &cfg,
                update_of(&op["values"]),
                Some(NodeId::from(s(op, "as_node"))),
            )
            .await
            .map(|_| Vec::new()),
        kind => {
            let (input, cfg): (Input, RunConfig) = match kind {
                "invoke" => (Input::Values(update_of(&op["input"])), cfg.clone()),
                "retry" => (Input::Continue, cfg.clone()),
                "resume" => {
                    let head = graph.get_state(&cfg).await.ok().flatten();
                    let ints = head.map(|h| h.interrupts()).unwrap_or_default();
                    let v = op["value"].clone();
                    if ints.len() > 1 {
                        (
                            Command::resume_map(
                                ints.into_iter().map(|i| (i.id, v.clone())).collect(),
                            )
                            .into(),
                            cfg.clone(),
                        )
                    } else {
                        (Command::resume(v).into(), cfg.clone())
                    }
                }
                "fork" => {
                    let mut ids: Vec<String> = before_ids.iter().cloned().collect();
                    ids.sort();
                    let at = usize::try_from(op["at"].as_u64().unwrap_or(0)).unwrap_or(0);
                    let id = ids.get(at).cloned().unwrap_or_default();
                    let input = if op["input"].is_null() {
                        Input::Continue
                    } else {
                        Input::Values(update_of(&op["input"]))
                    };
                    (
                        input,
                        cfg.clone()
                            .with_checkpoint(antler_graph::CheckpointId::new(id)),
                    )
                }
                other => panic!("unknown script op {other}"),
            };
            // The fixtures record the `__start__` task too.
            let modes = StreamModes {
                debug: true,
                hidden: true,
                ..StreamModes::default()
            };
            let mut stream = Box::pin(graph.stream(input, &cfg, modes));
            let mut out = None;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(StreamItem::Event(StreamEvent::Task(t))) => events.push(t),
                    Ok(StreamItem::Done(o)) => out = Some(Ok(o.interrupts)),
                    Err(e) => out = Some(Err(e)),
                    Ok(_) => {}
                }
            }
            out.unwrap_or(Err(Error::NoCheckpointer))
        }
    };
    // Steps, grouped by step number in order.
    let mut steps: Vec<Json> = Vec::new();
    for t in &events {
        if steps.last().and_then(|s| s["step"].as_i64()) != Some(t.step) {
            steps.push(json!({"step": t.step, "tasks": [], "writes": {}}));
        }
        let Some(cur) = steps.last_mut() else {
            continue;
        };
        let writes: Vec<Json> = t.writes.iter().map(|(c, v)| json!([c, v])).collect();
        let sends: Vec<Json> = t
            .sends
            .iter()
            .map(|(n, p)| json!([n.as_str(), p]))
            .collect();
        let kind = if t.kind == TaskKind::Pull {
            "pull"
        } else {
            "push"
        };
        if let Some(a) = cur["tasks"].as_array_mut() {
            a.push(
                json!({"node": t.node.as_str(), "kind": kind, "writes": writes, "sends": sends}),
            );
        }
        if let Some(m) = cur["writes"].as_object_mut() {
            for (c, v) in &t.writes {
                if let Some(a) = m
                    .entry(c.clone())
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    a.push(v.clone());
                }
            }
        }
    }
    let (outcome, error, interrupts) = match &result {
        Ok(ints) if !ints.is_empty() => (
            "interrupted",
            Json::Null,
            ints.iter()
                .map(|i| json!({"node": i.node.as_str(), "value": i.value}))
                .collect::<Vec<_>>(),
        ),
        Ok(_) => ("completed", Json::Null, Vec::new()),
        Err(e) => {
            let (o, rec) = error_record(e);
            (o, rec, Vec::new())
        }
    };
    let after = graph.get_state_history(&cfg).await.unwrap_or_default();
    let mut order: Vec<&antler_graph::StateSnapshot> = after.iter().collect();
    order.sort_by(|a, b| a.checkpoint_id.cmp(&b.checkpoint_id));
    let index_of =
        |id: &antler_graph::CheckpointId| order.iter().position(|s| &s.checkpoint_id == id);
    let checkpoints: Vec<Json> = order
        .iter()
        .enumerate()
        .filter(|(_, s)| !before_ids.contains(s.checkpoint_id.as_str()))
        .map(|(i, s)| {
            json!({"index": i, "parent": s.parent_id.as_ref().and_then(index_of), "source": s.source.as_str(), "step": s.step})
        })
        .collect();
    let head = order.last();
    let (pending, next, values) = match head {
        Some(h) => {
            let tasks: Vec<Json> = h
                .tasks
                .iter()
                .map(|t| {
                    let status = match t.status {
                        TaskStatus::Todo => "todo",
                        TaskStatus::Done => "done",
                        TaskStatus::Error => "error",
                        TaskStatus::Interrupted => "interrupted",
                    };
                    json!({"node": t.node.as_str(), "kind": if t.kind == TaskKind::Pull { "pull" } else { "push" }, "status": status})
                })
                .collect();
            let pending = if tasks.is_empty() {
                Json::Null
            } else {
                json!({"step": h.step + 1, "tasks": tasks})
            };
            (
                pending,
                h.next.iter().map(|n| json!(n.as_str())).collect::<Vec<_>>(),
                project_values(&h.values),
            )
        }
        None => (Json::Null, Vec::new(), json!({})),
    };
    json!({
        "outcome": outcome, "error": error, "interrupts": interrupts, "steps": steps,
        "checkpoints": checkpoints, "pending": pending, "next": next, "history_len": after.len(), "values": values,
    })
}

/// First differing path between `got` and `want` (a `null` status in `pending` matches anything).
fn diff(got: &Json, want: &Json, path: &str) -> Option<String> {
    if want.is_null() && path.ends_with("/status") && path.contains("/pending/") {
        return None;
    }
    match (got, want) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, vb) in b {
                let p = format!("{path}/{k}");
                match a.get(k) {
                    Some(va) => {
                        if let Some(d) = diff(va, vb, &p) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{p}: missing, want {vb}")),
                }
            }
            a.keys()
                .find(|k| !b.contains_key(*k))
                .map(|k| format!("{path}/{k}: unexpected {}", a[k]))
        }
        (Json::Array(a), Json::Array(b)) => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                if let Some(d) = diff(va, vb, &format!("{path}/{i}")) {
                    return Some(d);
                }
            }
            (a.len() != b.len()).then(|| format!("{path}: length {} vs want {}", a.len(), b.len()))
        }
        _ => (got != want).then(|| format!("{path}: got {got} want {want}")),
    }
}

/// Runs one program; returns the first mismatch.
async fn replay(line: &Json, cp: Arc<dyn Checkpointer>, delta: Option<u32>) -> Result<(), String> {
    let program = &line["program"];
    let fired: Fired = Arc::new(Mutex::new(HashSet::new()));
    let graph = build(program, &fired, cp, delta)?;
    let rl = usize::try_from(program["recursion_limit"].as_u64().unwrap_or(25)).unwrap_or(25);
    let thread = s(line, "id").to_owned();
    let (script, trace) = (program["script"].as_array(), line["trace"].as_array());
    // A program without operations, or a trace that does not have one record per operation,
    // would compare less than it claims (`zip` stops at the shorter list).
    match (script, trace) {
        (Some(a), Some(b)) if !a.is_empty() && a.len() == b.len() => {}
        _ => {
            return Err(format!(
                "program {thread}: {} operations but {} trace records",
                script.map_or(0, Vec::len),
                trace.map_or(0, Vec::len)
            ));
        }
    }
    for (k, (op, want)) in script
        .into_iter()
        .flatten()
        .zip(trace.into_iter().flatten())
        .enumerate()
    {
        let got = record_op(&graph, &thread, rl, op).await;
        if let Some(d) = diff(&got, want, "") {
            return Err(format!("op {k} ({}): {d}", s(op, "op")));
        }
    }
    Ok(())
}

type MakeStore = Box<dyn Fn() -> Arc<dyn Checkpointer>>;

fn memory_saver() -> Arc<dyn Checkpointer> {
    let saver = antler_checkpoint::MemorySaver::new(antler_checkpoint::StoreConfig::full());
    Arc::new(SaverCheckpointer::new(Arc::new(saver)))
}

fn sqlite_saver() -> Arc<dyn Checkpointer> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let saver = rt
        .block_on(antler_checkpoint::SqliteSaver::open_in_memory(
            antler_checkpoint::StoreConfig::full(),
        ))
        .expect("in-memory SQLite opens");
    Arc::new(SaverCheckpointer::new(Arc::new(saver)))
}

/// The checkpoint stores every program is replayed on; a program matches when it matches on all.
fn backends() -> Vec<(&'static str, MakeStore, Option<u32>)> {
    let graph_memory: fn() -> Arc<dyn Checkpointer> = || Arc::new(MemoryCheckpointer::new());
    vec![
        ("graph-memory", Box::new(graph_memory), None),
        ("checkpoint-memory-saver", Box::new(memory_saver), None),
        ("checkpoint-sqlite-saver", Box::new(sqlite_saver), None),
        // Every reducer channel as a delta channel (snapshot every 2 updates), no hot cache:
        // each operation rebuilds state by the history walk; traces must not change.
        ("graph-memory+delta(F=2)", Box::new(graph_memory), Some(2)),
        (
            "checkpoint-sqlite-saver+delta(F=2)",
            Box::new(sqlite_saver),
            Some(2),
        ),
    ]
}

#[test]
fn reference_traces_match_langgraph() {
    let path = programs_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let lines: Vec<Json> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect();
    let total = lines.len();
    assert!(total > 0, "{} holds no program", path.display());
    let mut failed: HashSet<String> = HashSet::new();
    for (name, make, delta) in backends() {
        let mut ok = 0;
        for v in &lines {
            match rt.block_on(replay(v, make(), delta)) {
                Ok(()) => ok += 1,
                Err(e) => {
                    println!("MISMATCH [{name}] {}: {e}", s(v, "id"));
                    failed.insert(s(v, "id").to_owned());
                }
            }
        }
        println!("graph-programs [{name}]: {ok}/{total} programs match");
    }
    let matching = total - failed.len();
    println!("graph-programs: {matching}/{total} programs match");
    assert!(
        failed.is_empty(),
        "{} of {total} programs do not match",
        failed.len()
    );
}
