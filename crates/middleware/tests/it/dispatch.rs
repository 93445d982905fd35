//! Dispatch order (kernel-spec R48–R49): the actual hook call sequence of a
//! five-middleware chain across two model calls and one parallel tool step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use antler_graph::{BoxError, Context, NodeError, RunConfig, State, Update};
use antler_middleware::{
    AgentGraph, ChainBuilder, ChatModel, HookUpdate, JumpTo, MESSAGES, Middleware, MiddlewareKind,
    ModelNext, ModelRequest, ModelResponse, NodeHook, NodeHooks, Tool, ToolNext, ToolOutcome,
    ToolRequest,
};
use antler_state_reducers::{Message, MessageType, ToolCall};
use async_trait::async_trait;
use serde_json::{Map, Value, json};

type Log = Arc<Mutex<Vec<String>>>;

fn log(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

struct Recorder {
    name: &'static str,
    log: Log,
}

#[async_trait]
impl Middleware for Recorder {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new(self.name)
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::ALL
    }
    async fn before_agent(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        log(&self.log, format!("{}.before_agent", self.name));
        Ok(None)
    }
    async fn before_model(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        log(&self.log, format!("{}.before_model", self.name));
        Ok(None)
    }
    async fn after_model(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        log(&self.log, format!("{}.after_model", self.name));
        Ok(None)
    }
    async fn after_agent(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        log(&self.log, format!("{}.after_agent", self.name));
        Ok(None)
    }
    async fn wrap_model_call(
        &self,
        req: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, NodeError> {
        log(&self.log, format!("{}.wrap_model>", self.name));
        let out = next.run(req).await;
        log(&self.log, format!("{}.wrap_model<", self.name));
        out
    }
    async fn wrap_tool_call(
        &self,
        req: ToolRequest,
        next: ToolNext<'_>,
    ) -> Result<ToolOutcome, NodeError> {
        let call = req.call.name.clone();
        log(&self.log, format!("{}.wrap_tool>{call}", self.name));
        let out = next.run(req).await;
        log(&self.log, format!("{}.wrap_tool<{call}", self.name));
        out
    }
}

/// Answers from a script, one message per call.
struct Scripted {
    answers: Mutex<Vec<Message>>,
    log: Log,
}

#[async_trait]
impl ChatModel for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn invoke(&self, req: &ModelRequest) -> Result<Message, BoxError> {
        log(&self.log, format!("model({} messages)", req.messages.len()));
        let mut answers = self.answers.lock().unwrap();
        if answers.is_empty() {
            return Err("script exhausted".into());
        }
        Ok(answers.remove(0))
    }
}

struct Echo {
    name: &'static str,
    log: Log,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "echoes"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, req: ToolRequest, _: &Context) -> Result<ToolOutcome, NodeError> {
        log(&self.log, format!("tool:{}", self.name));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Yield so a sibling call can start before this one finishes.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let id = req.call.id.clone().unwrap_or_default();
        Ok(Message::tool(format!("{} done", self.name), id)
            .with_id(format!("t-{}", self.name))
            .into())
    }
}

fn ai_calling(tools: &[&str]) -> Message {
    let mut m = Message::ai("calling").with_id("ai-1");
    for (i, t) in tools.iter().enumerate() {
        m = m.with_tool_call(ToolCall::new(*t, Map::new(), format!("call-{i}")));
    }
    m
}

#[tokio::test(flavor = "current_thread")]
async fn r49_hook_sequence_of_five_middlewares_two_model_calls_one_parallel_tool_step() {
    let log: Log = Arc::default();
    let mut chain = ChainBuilder::new();
    for name in ["m0", "m1", "m2", "m3", "m4"] {
        chain.push(Arc::new(Recorder {
            name,
            log: log.clone(),
        }));
    }
    let chain = chain.build().unwrap();
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![
            ai_calling(&["a", "b"]),
            Message::ai("final").with_id("ai-2"),
        ]),
        log: log.clone(),
    });
    let (in_flight, max_in_flight) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools: Vec<Arc<dyn Tool>> = ["a", "b"]
        .into_iter()
        .map(|name| -> Arc<dyn Tool> {
            Arc::new(Echo {
                name,
                log: log.clone(),
                in_flight: in_flight.clone(),
                max_in_flight: max_in_flight.clone(),
            })
        })
        .collect();
    let graph = AgentGraph::new(chain, model)
        .with_tools(tools)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let input = Update::new().set(&MESSAGES, vec![Message::human("go").with_id("h")]);
    let out = graph
        .invoke(input, &RunConfig::new("thread-1"))
        .await
        .unwrap();

    let ids: Vec<_> = out
        .values
        .get(&MESSAGES)
        .unwrap()
        .iter()
        .map(|m| m.id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["h", "ai-1", "t-a", "t-b", "ai-2"]);
    assert_eq!(
        max_in_flight.load(Ordering::SeqCst),
        2,
        "the two tool calls overlapped"
    );

    let seq = log.lock().unwrap().clone();
    let fwd = |hook: &str| (0..5).map(|i| format!("m{i}.{hook}")).collect::<Vec<_>>();
    let rev = |hook: &str| {
        (0..5)
            .rev()
            .map(|i| format!("m{i}.{hook}"))
            .collect::<Vec<_>>()
    };
    let model_call = |n: usize| {
        let mut v = fwd("wrap_model>");
        v.push(format!("model({n} messages)"));
        v.extend(rev("wrap_model<"));
        v
    };
    // The tool step: each call passes the onion m0 → m4 → tool → m4 → m0;
    // the two calls interleave, so compare each call's own subsequence.
    let tool_start = 5 + 5 + 11 + 5;
    let tool_len = 2 * 11;
    let mut expected_prefix = fwd("before_agent");
    expected_prefix.extend(fwd("before_model"));
    expected_prefix.extend(model_call(1));
    expected_prefix.extend(rev("after_model"));
    assert_eq!(&seq[..tool_start], &expected_prefix[..]);
    for call in ["a", "b"] {
        let own: Vec<_> = seq[tool_start..tool_start + tool_len]
            .iter()
            .filter(|s| {
                s.ends_with(&format!(">{call}"))
                    || s.ends_with(&format!("<{call}"))
                    || **s == format!("tool:{call}")
            })
            .cloned()
            .collect();
        let mut want: Vec<_> = (0..5).map(|i| format!("m{i}.wrap_tool>{call}")).collect();
        want.push(format!("tool:{call}"));
        want.extend((0..5).rev().map(|i| format!("m{i}.wrap_tool<{call}")));
        assert_eq!(own, want, "onion of call {call}");
    }
    let mut expected_suffix = fwd("before_model");
    expected_suffix.extend(model_call(4));
    expected_suffix.extend(rev("after_model"));
    expected_suffix.extend(rev("after_agent"));
    assert_eq!(&seq[tool_start + tool_len..], &expected_suffix[..]);
}

/// A hook's update is its own step: the next hook already sees it.
struct Counter {
    name: &'static str,
    seen: Log,
}

const COUNT: antler_graph::Key<Vec<String>> = antler_graph::Key::from_static("trail");

#[async_trait]
impl Middleware for Counter {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new(self.name)
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            before_agent: true,
            ..NodeHooks::NONE
        }
    }
    fn state_fields(&self) -> Vec<antler_middleware::StateField> {
        vec![antler_middleware::StateField::new(COUNT, || {
            antler_graph::ChannelSpec::reducer(
                "concat",
                Vec::new,
                |acc: &Vec<String>, ws: &[Vec<String>]| {
                    let mut out = acc.clone();
                    ws.iter().for_each(|w| out.extend(w.iter().cloned()));
                    Ok(out)
                },
            )
        })]
    }
    async fn before_agent(
        &self,
        state: &State,
        _: &Context,
    ) -> Result<Option<HookUpdate>, NodeError> {
        let trail = state.get(&COUNT).cloned().unwrap_or_default();
        log(&self.seen, format!("{} saw {:?}", self.name, trail));
        Ok(Some(
            Update::new().set(&COUNT, vec![self.name.to_owned()]).into(),
        ))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r49_each_node_hook_update_is_applied_before_the_next_hook() {
    let seen: Log = Arc::default();
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Counter {
        name: "first",
        seen: seen.clone(),
    }));
    chain.push(Arc::new(Counter {
        name: "second",
        seen: seen.clone(),
    }));
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![Message::ai("ok").with_id("a")]),
        log: Arc::default(),
    });
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        ["first saw []", "second saw [\"first\"]"]
    );
}

/// An `after_model` hook that may jump back to the model re-enters it once.
struct Retry {
    jumped: AtomicUsize,
    declare: bool,
}

#[async_trait]
impl Middleware for Retry {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("Retry")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            after_model: true,
            ..NodeHooks::NONE
        }
    }
    fn can_jump_to(&self, hook: NodeHook) -> &'static [JumpTo] {
        if self.declare && hook == NodeHook::AfterModel {
            &[JumpTo::Model]
        } else {
            &[]
        }
    }
    async fn after_model(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        if self.jumped.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(Some(HookUpdate {
                update: Update::new(),
                jump_to: Some(JumpTo::Model),
            }));
        }
        Ok(None)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r49_after_model_jump_to_model_reenters_the_model() {
    let model_log: Log = Arc::default();
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![
            Message::ai("first").with_id("a1"),
            Message::ai("second").with_id("a2"),
        ]),
        log: model_log.clone(),
    });
    // A `before_model` hook too: a jump to the model re-enters through it (R49), so it runs
    // before each model call.
    let hooks: Log = Arc::default();
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Named {
        kind: "Before",
        label: None,
        log: hooks.clone(),
    }));
    chain.push(Arc::new(Retry {
        jumped: AtomicUsize::new(0),
        declare: true,
    }));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let out = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .unwrap();
    assert_eq!(model_log.lock().unwrap().len(), 2);
    assert_eq!(out.values.get(&MESSAGES).unwrap().len(), 3);
    assert_eq!(
        *hooks.lock().unwrap(),
        ["Before", "Before"],
        "the jump re-entered through the before_model hook"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn r49_an_undeclared_jump_fails_the_run() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![Message::ai("a").with_id("a1")]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Retry {
        jumped: AtomicUsize::new(0),
        declare: false,
    }));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let Err(err) = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
    else {
        panic!("an undeclared jump is an error");
    };
    assert!(err.to_string().contains("without declaring it"), "{err}");
}

/// A tool wrapper that short-circuits `ask_clarification` with a command to
/// the end, the way Clarification does (R49, R51).
struct EndOnAsk;

#[async_trait]
impl Middleware for EndOnAsk {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("ClarificationMiddleware")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::NONE
    }
    async fn wrap_tool_call(
        &self,
        req: ToolRequest,
        next: ToolNext<'_>,
    ) -> Result<ToolOutcome, NodeError> {
        if req.call.name != "ask_clarification" {
            return next.run(req).await;
        }
        let answer =
            Message::tool("which one?", req.call.id.clone().unwrap_or_default()).with_id("clar");
        Ok(ToolOutcome::Command(
            antler_graph::Command::new()
                .update(Update::new().set(&MESSAGES, vec![answer]))
                .goto(antler_graph::END),
        ))
    }
}

/// Jumps by writing the `jump_to` channel itself.
struct WritesJump;

#[async_trait]
impl Middleware for WritesJump {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("WritesJump")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            before_model: true,
            ..NodeHooks::NONE
        }
    }
    async fn before_model(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        Ok(Some(
            Update::new()
                .set(&antler_middleware::JUMP_TO, "end".to_owned())
                .into(),
        ))
    }
}

/// A hook jumps through `HookUpdate::jump_to`, where the jump is checked against
/// `can_jump_to`; writing the channel itself is refused with a typed error (before, the jump
/// was taken unchecked).
#[tokio::test(flavor = "current_thread")]
async fn a_hook_that_writes_jump_to_itself_is_refused() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![Message::ai("ok").with_id("a")]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(WritesJump));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let err = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("hi").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("wrote `jump_to`"), "{err}");
}

/// Answers every call with a command that does what the tools step cannot carry out.
#[derive(Clone, Copy)]
enum Beyond {
    /// Goes to the model node.
    Goto,
    /// Writes `jump_to` itself.
    Jump,
    /// Addresses the parent graph.
    Parent,
    /// Ends the run without a tool message answering the call.
    Unanswered,
    /// Ends the run with a tool message answering another call.
    OtherCall,
    /// Ends the run removing every message (no answer needed).
    RemoveAll,
    /// Ends the run writing nothing (no answer needed: LangGraph checks no command without
    /// an update).
    BareEnd,
}

struct GotoModel {
    beyond: Beyond,
}

#[async_trait]
impl Middleware for GotoModel {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("GotoModel")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::NONE
    }
    async fn wrap_tool_call(
        &self,
        req: ToolRequest,
        _next: ToolNext<'_>,
    ) -> Result<ToolOutcome, NodeError> {
        let answer = Message::tool("elsewhere", req.call.id.clone().unwrap_or_default());
        let update = Update::new().set(&MESSAGES, vec![answer]);
        let end = |messages: Vec<Message>| {
            antler_graph::Command::new()
                .update(Update::new().set(&MESSAGES, messages))
                .goto(antler_graph::END)
        };
        Ok(ToolOutcome::Command(match self.beyond {
            Beyond::Unanswered => end(vec![Message::ai("done").with_id("x")]),
            Beyond::OtherCall => end(vec![Message::tool("hm", "another-call")]),
            Beyond::RemoveAll => end(vec![Message::remove_all()]),
            Beyond::BareEnd => antler_graph::Command::new().goto(antler_graph::END),
            Beyond::Jump => antler_graph::Command::new()
                .update(update.set(&antler_middleware::JUMP_TO, "model".to_owned())),
            Beyond::Goto => antler_graph::Command::new().update(update).goto("model"),
            Beyond::Parent => antler_graph::Command::new().update(update).to_parent(),
        }))
    }
}

/// One turn of an agent whose model calls `search` once, with [`GotoModel`] answering it.
async fn run_beyond(beyond: Beyond) -> antler_graph::Result<antler_graph::RunOutcome> {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![ai_calling(&["search"])]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(GotoModel { beyond }));
    let graph = AgentGraph::new(chain.build().expect("valid chain"), model)
        .with_tools(vec![echo("search", &Arc::default())])
        .build()
        .expect("valid agent")
        .compile()
        .expect("compiles");
    graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("hi").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
}

/// A tool's command may end the run (R49) and nothing else: a goto to another node fails the
/// tool step with an error naming it (before, the goto was dropped without a word).
#[tokio::test(flavor = "current_thread")]
async fn a_tool_command_going_anywhere_but_the_end_is_refused() {
    for (beyond, expected) in [
        (
            Beyond::Goto,
            "only go to the end of the run, not to node 'model'",
        ),
        (Beyond::Jump, "a tool's command wrote `jump_to`"),
        (
            Beyond::Parent,
            "may not resume interrupts or address the parent graph",
        ),
        // Not answering the call (before 2026-12-02 accepted, leaving the call unanswered).
        (
            Beyond::Unanswered,
            "must answer its call with a tool message: tool 'search' (call 'call-0') returned a command without one (its messages: ai)",
        ),
        (
            Beyond::OtherCall,
            "(its messages: tool (answering 'another-call'))",
        ),
    ] {
        let err = run_beyond(beyond).await.unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
        // Typed: the tools node failed with the middleware's error as its source.
        let source = match &err {
            antler_graph::Error::NodeFailed { source, .. } => {
                source.downcast_ref::<antler_middleware::Error>()
            }
            _ => None,
        };
        assert!(
            matches!(
                source,
                Some(antler_middleware::Error::RefusedToolCommand { detail }) if detail.contains(expected)
            ),
            "{err:?}"
        );
    }
}

/// A tool's command that answers its call passes, and the answer takes the call's tool name,
/// as LangGraph's tool node names it; a command that removes every message needs no answer.
#[tokio::test(flavor = "current_thread")]
async fn a_tool_command_answering_its_call_passes_and_names_the_answer() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![ai_calling(&["ask_clarification"])]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(EndOnAsk));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let out = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .expect("the run succeeds");
    let answer = out
        .values
        .get(&MESSAGES)
        .and_then(|ms| ms.iter().find(|m| m.kind == MessageType::Tool))
        .expect("the answer is stored");
    assert_eq!(answer.name.as_deref(), Some("ask_clarification"));
    // Removing every message needs no answer.
    let out = run_beyond(Beyond::RemoveAll)
        .await
        .expect("a command removing every message passes");
    assert_eq!(out.values.get(&MESSAGES).map(Vec::len), Some(0));
    // Nor does a bare goto to the end (docs/middleware.md's way to end a run from a tool
    // wrapper; before 2026-12-02 refused as unanswered): the run ends after the model's call.
    let out = run_beyond(Beyond::BareEnd)
        .await
        .expect("a bare goto to the end passes");
    let kinds: Vec<MessageType> = out
        .values
        .get(&MESSAGES)
        .map(|ms| ms.iter().map(|m| m.kind).collect())
        .unwrap_or_default();
    assert_eq!(kinds, [MessageType::Human, MessageType::Ai]);
}

#[tokio::test(flavor = "current_thread")]
async fn r49_a_tool_wrapper_may_short_circuit_and_end_the_run() {
    let model_log: Log = Arc::default();
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![ai_calling(&["ask_clarification"])]),
        log: model_log.clone(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(EndOnAsk));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let ids = ids_after_one_question(&graph).await;
    // The model ran once; the run ended after the short-circuited tool call.
    assert_eq!(model_log.lock().unwrap().len(), 1);
    assert_eq!(ids, ["h", "ai-1", "clar"]);
}

/// Kernel-spec R1: `jump_to` is never persisted and never part of the output. A run whose
/// tool wrapper ends it (a jump to the end, the value still set when the run ends) returns no
/// `jump_to`, and no checkpoint of the thread holds it, as a value or as a stored write.
/// Before 2026-12-01 the channel was an ordinary ephemeral one: the run's outcome showed
/// `jump_to = "end"` and the checkpoints stored it.
#[tokio::test]
async fn r1_jump_to_is_never_persisted_nor_output() {
    use antler_graph::{Checkpointer, MemoryCheckpointer};
    use antler_middleware::JUMP_TO;
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![ai_calling(&["ask_clarification"])]),
        log: Log::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(EndOnAsk));
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let out = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &cfg,
        )
        .await
        .unwrap();
    assert_eq!(out.values.get(&JUMP_TO), None);
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.values.get(&JUMP_TO), None);
    let scope = cfg.scope();
    let stored = store.list(&scope).await.unwrap();
    assert!(stored.len() > 2, "the run stored its steps");
    for t in stored {
        let full = store
            .get_tuple(&scope, Some(&t.checkpoint.id))
            .await
            .unwrap()
            .unwrap();
        let record = format!("{:?}", full.checkpoint.values);
        assert!(!record.contains("jump_to"), "{record}");
        for w in &full.pending_writes {
            assert_ne!(w.channel, JUMP_TO.name(), "{w:?}");
        }
    }
}

/// Contributes `messages` with a reducer that would duplicate every write,
/// and a `trail` field.
struct Contributor {
    name: &'static str,
    trail_reducer: &'static str,
}

#[async_trait]
impl Middleware for Contributor {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new(self.name)
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::NONE
    }
    fn state_fields(&self) -> Vec<antler_middleware::StateField> {
        let reducer = self.trail_reducer;
        vec![
            antler_middleware::StateField::new(MESSAGES, || {
                antler_graph::ChannelSpec::reducer(
                    "duplicate",
                    Vec::new,
                    |acc: &Vec<Message>, ws: &[Vec<Message>]| {
                        let mut out = acc.clone();
                        for w in ws {
                            out.extend(w.iter().cloned());
                            out.extend(w.iter().cloned());
                        }
                        Ok(out)
                    },
                )
            }),
            antler_middleware::StateField::new(COUNT, move || {
                antler_graph::ChannelSpec::reducer(
                    reducer,
                    Vec::new,
                    |acc: &Vec<String>, _: &[Vec<String>]| Ok(acc.clone()),
                )
            }),
        ]
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r40_a_contributed_messages_field_never_changes_the_base_channel() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![
            Message::ai("ok").with_id("a"),
            Message::ai("ok").with_id("b"),
        ]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Contributor {
        name: "C",
        trail_reducer: "keep",
    }));
    let agent = AgentGraph::new(chain.build().unwrap(), model);
    // Compiling twice from the same middleware instances gives the same channel: the base
    // message reducer each time (the contributed one would duplicate every message).
    for (thread, answer) in [("t1", "a"), ("t2", "b")] {
        let graph = agent.build().unwrap().compile().unwrap();
        let out = graph
            .invoke(
                Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
                &RunConfig::new(thread),
            )
            .await;
        let ids: Vec<_> = out
            .unwrap()
            .values
            .get(&MESSAGES)
            .unwrap()
            .iter()
            .map(|m| m.id.clone().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["h", answer],
            "the base message reducer is in force ({thread})"
        );
    }
}

#[test]
fn conflicting_contributed_fields_are_a_typed_build_error() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Contributor {
        name: "A",
        trail_reducer: "keep",
    }));
    chain.push(Arc::new(Contributor {
        name: "B",
        trail_reducer: "other",
    }));
    let err = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .err()
        .expect("conflict");
    assert!(matches!(err, antler_middleware::Error::Graph(_)), "{err}");
    // Not an ordering error: the order is fine, the contributed fields clash.
    assert_eq!(err.kind(), antler_middleware::ErrorKind::Graph);
    assert!(err.to_string().contains("trail"), "{err}");
}

#[test]
fn public_futures_are_send() {
    fn is_send<T: std::marker::Send>(_: &T) {}
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![]),
        log: Arc::default(),
    });
    let graph = AgentGraph::new(ChainBuilder::new().build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let config = RunConfig::new("t");
    // An agent run (every hook, wrapper, model and tool future inside it)
    // can move between threads.
    let fut = graph.invoke(Update::new(), &config);
    is_send(&fut);
}

/// Streams three tokens, then the message.
struct Streaming;

#[async_trait]
impl ChatModel for Streaming {
    fn name(&self) -> &str {
        "streaming"
    }
    async fn invoke(&self, _: &ModelRequest) -> Result<Message, BoxError> {
        Ok(Message::ai("Hello world!").with_id("a"))
    }
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> futures::stream::BoxStream<'a, Result<antler_middleware::ModelChunk, BoxError>> {
        use antler_middleware::ModelChunk;
        use futures::StreamExt;
        let tokens = ["Hello", " world", "!"].map(|t| Ok(ModelChunk::Token(t.to_owned())));
        let last =
            futures::stream::once(
                async move { self.invoke(request).await.map(ModelChunk::Message) },
            );
        futures::stream::iter(tokens).chain(last).boxed()
    }
}

/// One turn streamed with the custom mode: every item, and the model node's token events as
/// (text, model call) pairs.
async fn streamed_turn(
    graph: &antler_graph::CompiledGraph,
) -> (
    Vec<antler_graph::Result<antler_graph::StreamItem>>,
    Vec<(String, u64)>,
) {
    use antler_graph::{StreamEvent, StreamItem, StreamModes};
    use futures::StreamExt;
    let modes = StreamModes {
        custom: true,
        ..StreamModes::default()
    };
    let items: Vec<_> = graph
        .stream(
            Update::new().set(&MESSAGES, vec![Message::human("hi").with_id("h")]),
            &RunConfig::new("t"),
            modes,
        )
        .collect()
        .await;
    let tokens = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamItem::Event(StreamEvent::Custom { node, value }))
                if node.as_str() == "model" && value["event"] == "token" =>
            {
                Some((
                    value["text"].as_str()?.to_owned(),
                    value["call"].as_u64().unwrap_or_default(),
                ))
            }
            _ => None,
        })
        .collect();
    (items, tokens)
}

#[tokio::test(flavor = "current_thread")]
async fn model_tokens_reach_the_custom_stream_in_order() {
    use antler_graph::StreamItem;
    let graph = AgentGraph::new(ChainBuilder::new().build().unwrap(), Arc::new(Streaming))
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let (items, tokens) = streamed_turn(&graph).await;
    let texts: Vec<&str> = tokens.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["Hello", " world", "!"]);
    let Some(Ok(StreamItem::Done(out))) = items.last() else {
        panic!("the stream ends with the outcome")
    };
    assert_eq!(
        out.values.get(&MESSAGES).unwrap()[1].content.text(),
        "Hello world!"
    );
}

fn echo(name: &'static str, log: &Log) -> Arc<dyn Tool> {
    Arc::new(Echo {
        name,
        log: log.clone(),
        in_flight: Arc::default(),
        max_in_flight: Arc::default(),
    })
}

/// R49: tool results are written in call order, a command's messages included (before, plain
/// results were written first and every command's update after them, so a clarification
/// called first landed after a later call's result).
#[tokio::test(flavor = "current_thread")]
async fn r49_a_command_result_keeps_its_place_among_the_call_results() {
    let log: Log = Arc::default();
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![ai_calling(&["ask_clarification", "search"])]),
        log: log.clone(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(EndOnAsk));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .with_tools(vec![echo("search", &log)])
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let ids = ids_after_one_question(&graph).await;
    assert_eq!(ids, ["h", "ai-1", "clar", "t-search"]);
}

/// Appends a reminder after every model answer.
struct Remind;

#[async_trait]
impl Middleware for Remind {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("Remind")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            after_model: true,
            ..NodeHooks::NONE
        }
    }
    async fn after_model(&self, s: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        let n = s.get(&MESSAGES).map_or(0, Vec::len);
        Ok(Some(
            Update::new()
                .set(
                    &MESSAGES,
                    vec![Message::human("reminder").with_id(format!("r-{n}"))],
                )
                .into(),
        ))
    }
}

/// R49: the loop goes on while the last AI message has tool calls no tool message answers,
/// even when an after-model hook appended a message after it (before, the run ended there and
/// left the calls unanswered).
#[tokio::test(flavor = "current_thread")]
async fn r49_a_message_appended_after_the_model_answer_does_not_hide_its_tool_calls() {
    let ids = ids_of_a_search_then_done(Arc::new(Remind)).await;
    assert_eq!(ids, ["h", "ai-1", "r-2", "t-search", "ai-2", "r-5"]);
}

/// The message ids after one question to an agent with `middleware` and a `search` tool,
/// whose model first calls `search`, then answers "done".
async fn ids_of_a_search_then_done(middleware: Arc<dyn Middleware>) -> Vec<String> {
    let log: Log = Arc::default();
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![
            ai_calling(&["search"]),
            Message::ai("done").with_id("ai-2"),
        ]),
        log: log.clone(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(middleware);
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .with_tools(vec![echo("search", &log)])
        .build()
        .unwrap()
        .compile()
        .unwrap();
    ids_after_one_question(&graph).await
}

/// Answers every tool call of the model's answer itself (a policy that refuses them).
struct Refuse;

#[async_trait]
impl Middleware for Refuse {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("Refuse")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            after_model: true,
            ..NodeHooks::NONE
        }
    }
    async fn after_model(&self, s: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        let Some(last) = s.get(&MESSAGES).and_then(|ms| ms.last()) else {
            return Ok(None);
        };
        let refusals: Vec<Message> = last
            .tool_calls()
            .iter()
            .filter_map(|c| c.id.clone())
            .map(|id| Message::tool("refused", id.clone()).with_id(format!("no-{id}")))
            .collect();
        Ok(Some(Update::new().set(&MESSAGES, refusals).into()))
    }
}

/// R49 with the reference's model-to-tools edge: when a hook answered every tool call of the
/// model's answer, the model runs again and sees the answers (before, the run ended with the
/// model never shown them).
#[tokio::test(flavor = "current_thread")]
async fn r49_tool_calls_all_answered_by_a_hook_go_back_to_the_model() {
    let ids = ids_of_a_search_then_done(Arc::new(Refuse)).await;
    assert_eq!(ids, ["h", "ai-1", "no-call-0", "ai-2"]);
}

/// Ends the run from `after_agent`, counting its calls.
struct Finish {
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Middleware for Finish {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("Finish")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            after_agent: true,
            ..NodeHooks::NONE
        }
    }
    fn can_jump_to(&self, hook: NodeHook) -> &'static [JumpTo] {
        if hook == NodeHook::AfterAgent {
            &[JumpTo::End]
        } else {
            &[]
        }
    }
    async fn after_agent(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(Some(HookUpdate {
            update: Update::new(),
            jump_to: Some(JumpTo::End),
        }))
    }
}

/// An `after_agent` hook that jumps to the end ends the run (before, the end of the agent was
/// the first after-agent hook, so the hook ran again until the recursion limit).
#[tokio::test(flavor = "current_thread")]
async fn r49_an_after_agent_jump_to_end_ends_the_run() {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![Message::ai("ok").with_id("a")]),
        log: Arc::default(),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Finish {
        calls: calls.clone(),
    }));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t").with_recursion_limit(20),
        )
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Asks the agent one question on a new thread and returns the ids of the thread's messages.
async fn ids_after_one_question(graph: &antler_graph::CompiledGraph) -> Vec<String> {
    let out = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .expect("the run succeeds");
    out.values
        .get(&MESSAGES)
        .expect("messages are set")
        .iter()
        .map(|m| m.id.clone().unwrap_or_default())
        .collect()
}

/// A middleware with a `before_model` hook under any id.
struct Named {
    kind: &'static str,
    label: Option<&'static str>,
    log: Log,
}

#[async_trait]
impl Middleware for Named {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new(self.kind)
    }
    fn id(&self) -> antler_middleware::MiddlewareId {
        match self.label {
            Some(l) => antler_middleware::MiddlewareId::instance(self.kind(), l),
            None => antler_middleware::MiddlewareId::of(self.kind()),
        }
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks {
            before_model: true,
            ..NodeHooks::NONE
        }
    }
    async fn before_model(&self, _: &State, _: &Context) -> Result<Option<HookUpdate>, NodeError> {
        log(&self.log, self.id().to_string());
        Ok(None)
    }
}

/// Hook nodes get graph-safe, distinct names whatever the middleware ids: an extension's
/// `module:Class` kind, a kind starting with `__`, and two instances of one kind build,
/// compile and run in chain order (before, compiling failed on a reserved name or a
/// duplicate node). A kind `A#x`, which would print like the instance `x` of `A`, is refused
/// at build since 2026-12-02 (`kind_names_with_a_hash_are_refused` in `order.rs`).
#[tokio::test(flavor = "current_thread")]
async fn hook_node_names_are_graph_safe_and_distinct() {
    let log: Log = Arc::default();
    let mut chain = ChainBuilder::new();
    for (kind, label) in [
        ("acme.ext:Audit", None),
        ("__Hidden", None),
        ("A", Some("y")),
        ("A", Some("x")),
        ("A", None),
    ] {
        chain.push(Arc::new(Named {
            kind,
            label,
            log: log.clone(),
        }));
    }
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![Message::ai("done").with_id("ai-1")]),
        log: Arc::default(),
    });
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("hi").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["acme.ext:Audit", "__Hidden", "A#y", "A#x", "A"]
    );
}

/// A transient model failure, which [`RetryOnce`] retries.
#[derive(Debug)]
struct Transient;

impl std::fmt::Display for Transient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("transient")
    }
}

impl std::error::Error for Transient {}

/// Fails with `failures` in turn, then answers `ok`.
struct Flaky {
    failures: Mutex<Vec<BoxError>>,
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    async fn invoke(&self, _: &ModelRequest) -> Result<Message, BoxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut failures = self.failures.lock().unwrap();
        if failures.is_empty() {
            return Ok(Message::ai("ok").with_id("ok"));
        }
        Err(failures.remove(0))
    }
}

/// Calls the inner layers again once when they failed with [`Transient`] (the shape of the
/// model-error handling middleware of kernel-spec R118 item 8).
struct RetryOnce;

#[async_trait]
impl Middleware for RetryOnce {
    fn kind(&self) -> MiddlewareKind {
        MiddlewareKind::new("RetryOnce")
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::NONE
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, NodeError> {
        match next.run(request.clone()).await {
            Err(e) if e.failure().is_some_and(|f| f.is::<Transient>()) => next.run(request).await,
            other => other,
        }
    }
}

/// Streams a token, then fails with [`Transient`], on its first call; streams two tokens and
/// its answer on the next.
struct StreamsThenFails {
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for StreamsThenFails {
    fn name(&self) -> &str {
        "streams-then-fails"
    }
    async fn invoke(&self, _: &ModelRequest) -> Result<Message, BoxError> {
        Ok(Message::ai("ok").with_id("ok"))
    }
    fn stream<'a>(
        &'a self,
        _: &'a ModelRequest,
    ) -> futures::stream::BoxStream<'a, Result<antler_middleware::ModelChunk, BoxError>> {
        use antler_middleware::ModelChunk;
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        let chunks: Vec<Result<ModelChunk, BoxError>> = if first {
            vec![
                Ok(ModelChunk::Token("partial".into())),
                Err(Box::new(Transient)),
            ]
        } else {
            vec![
                Ok(ModelChunk::Token("o".into())),
                Ok(ModelChunk::Token("k".into())),
                Ok(ModelChunk::Message(Message::ai("ok").with_id("ok"))),
            ]
        };
        Box::pin(futures::stream::iter(chunks))
    }
}

/// Every streamed token names its model call within the step, so a consumer can drop the
/// partial tokens of a call a wrap hook retried. Before 2026-12-02 the retried call's tokens
/// and the failed call's came alike.
#[tokio::test]
async fn streamed_tokens_name_their_model_call() {
    let model = Arc::new(StreamsThenFails {
        calls: AtomicUsize::new(0),
    });
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(RetryOnce));
    let graph = AgentGraph::new(chain.build().unwrap(), model)
        .build()
        .unwrap()
        .compile()
        .unwrap();
    let (items, tokens) = streamed_turn(&graph).await;
    assert_eq!(
        tokens,
        [
            ("partial".to_owned(), 1),
            ("o".to_owned(), 2),
            ("k".to_owned(), 2)
        ]
    );
    assert!(matches!(
        items.last(),
        Some(Ok(antler_graph::StreamItem::Done(_)))
    ));
}

/// A wrap hook may call the inner handler more than once and decide on the failure it got:
/// the wrapper retries a transient model failure once, and passes any other failure on with
/// its text. Before 2026-12-01 `ModelNext::run` consumed the handler, and a failure offered
/// nothing but its `Debug` form.
#[tokio::test]
async fn a_wrap_hook_may_call_the_inner_handler_again_and_inspect_its_failure() {
    let run = |failures: Vec<BoxError>| async move {
        let model = Arc::new(Flaky {
            failures: Mutex::new(failures),
            calls: AtomicUsize::new(0),
        });
        let mut chain = ChainBuilder::new();
        chain.push(Arc::new(RetryOnce));
        let graph = AgentGraph::new(chain.build().unwrap(), model.clone())
            .build()
            .unwrap()
            .compile()
            .unwrap();
        let out = graph
            .invoke(
                Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
                &RunConfig::new("t"),
            )
            .await;
        (out, model.calls.load(Ordering::SeqCst))
    };
    let (out, calls) = run(vec![Box::new(Transient)]).await;
    assert_eq!(calls, 2, "retried once");
    let ids: Vec<_> = out
        .unwrap()
        .values
        .get(&MESSAGES)
        .unwrap()
        .iter()
        .map(|m| m.id.clone().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["h", "ok"]);
    let (out, calls) = run(vec!["permanent".into()]).await;
    assert_eq!(calls, 1, "not retried");
    let err = out.unwrap_err();
    assert!(err.to_string().contains("permanent"), "{err}");
    let failure = NodeError::failed(Transient);
    assert_eq!(failure.to_string(), "transient");
    assert!(failure.failure().is_some_and(|f| f.is::<Transient>()));
}

/// A call of a tool the agent lacks is answered, not failed, with LangGraph's tool node's
/// text, which lists the agent's tools in order so that the model can pick one, and the
/// error status; the model then runs again. Before 2026-12-02 the text named no tool.
#[tokio::test(flavor = "current_thread")]
async fn a_call_of_an_unknown_tool_is_answered_with_the_tools_there_are() {
    let model = Arc::new(Scripted {
        answers: Mutex::new(vec![
            ai_calling(&["nosuch"]),
            Message::ai("done").with_id("ai-2"),
        ]),
        log: Arc::default(),
    });
    let log: Log = Arc::default();
    let graph = AgentGraph::new(ChainBuilder::new().build().expect("valid chain"), model)
        .with_tools(vec![echo("search", &log), echo("fetch", &log)])
        .build()
        .expect("valid agent")
        .compile()
        .expect("compiles");
    let out = graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("hi").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .expect("the run succeeds");
    let messages = out.values.get(&MESSAGES).expect("messages");
    let answer = messages
        .iter()
        .find(|m| m.kind == MessageType::Tool)
        .expect("the call is answered");
    assert_eq!(
        answer.content.text(),
        "Error: nosuch is not a valid tool, try one of [search, fetch]."
    );
    assert_eq!(answer.tool_call_id(), Some("call-0"));
    assert_eq!(answer.name.as_deref(), Some("nosuch"));
    assert_eq!(answer.status(), Some("error"));
    assert_eq!(messages.last().and_then(|m| m.id.as_deref()), Some("ai-2"));
}

/// The model request carries the system prompt as a system message (LangChain's
/// `ModelRequest.system_message`), which a wrap hook may replace with one that keeps an id
/// and `additional_kwargs`, as kernel-spec R70's coalescing returns it; the model sees the
/// replacement whole. Before 2026-12-02 the request held a bare string, which could not carry
/// either.
#[tokio::test(flavor = "current_thread")]
async fn a_wrap_hook_may_replace_the_system_message_with_id_and_kwargs() {
    struct Sees(Arc<Mutex<Option<Message>>>);
    #[async_trait]
    impl ChatModel for Sees {
        fn name(&self) -> &str {
            "sees"
        }
        async fn invoke(&self, req: &ModelRequest) -> Result<Message, BoxError> {
            *self.0.lock().unwrap() = req.system_message.clone();
            Ok(Message::ai("ok").with_id("ai-1"))
        }
    }
    struct Coalesce;
    #[async_trait]
    impl Middleware for Coalesce {
        fn kind(&self) -> MiddlewareKind {
            MiddlewareKind::new("SystemMessageCoalescing")
        }
        fn node_hooks(&self) -> NodeHooks {
            NodeHooks::NONE
        }
        async fn wrap_model_call(
            &self,
            mut req: ModelRequest,
            next: ModelNext<'_>,
        ) -> Result<ModelResponse, NodeError> {
            let first = req.system_message.take().expect("the agent's prompt");
            assert_eq!(req_text(&first), "be brief");
            let mut merged = Message::system(format!("{}\n\nreminder", req_text(&first)));
            merged.id.clone_from(&first.id);
            merged
                .additional_kwargs_mut()
                .insert("hide_from_ui".into(), json!(true));
            req.system_message = Some(merged);
            next.run(req).await
        }
    }
    fn req_text(m: &Message) -> String {
        m.content.text()
    }
    let seen: Arc<Mutex<Option<Message>>> = Arc::default();
    let mut chain = ChainBuilder::new();
    chain.push(Arc::new(Coalesce));
    let graph = AgentGraph::new(chain.build().unwrap(), Arc::new(Sees(seen.clone())))
        .with_system_message(Message::system("be brief").with_id("sys-prompt"))
        .build()
        .unwrap()
        .compile()
        .unwrap();
    graph
        .invoke(
            Update::new().set(&MESSAGES, vec![Message::human("x").with_id("h")]),
            &RunConfig::new("t"),
        )
        .await
        .expect("the run succeeds");
    let sent = seen
        .lock()
        .unwrap()
        .clone()
        .expect("a system message was sent");
    assert_eq!(sent.kind, MessageType::System);
    assert_eq!(sent.id.as_deref(), Some("sys-prompt"));
    assert_eq!(sent.content.text(), "be brief\n\nreminder");
    assert_eq!(
        sent.additional_kwargs().get("hide_from_ui"),
        Some(&json!(true))
    );
}
