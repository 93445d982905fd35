//! The agent loop as a graph: every node hook is its own super-step, in the
//! order of kernel-spec R49.
//!
//! ```text
//! START → before_agent* → ( before_model* → model → after_model* → tools )* → after_agent* → END
//!           m0 … mN            m0 … mN                 mN … m0                   mN … m0
//! ```
//!
//! The loop leaves `tools` back to the first `before_model` hook and ends
//! when the last AI message calls no tool, or a hook jumps, or a tool's
//! command goes to the end. Each hook's update is applied through the
//! reducers at its step's barrier, so later hooks see earlier updates.
//!
//! One `tools` task runs all calls of an AI message concurrently, each
//! through the `wrap_tool_call` onion; their messages are written in call
//! order, never completion order.

use std::sync::Arc;

use antler_graph::{
    ChannelSpec, Command, Context, END, Goto, Key, NodeError, NodeId, START, State, StateGraph,
    Update, node_fn,
};
use antler_state_reducers::{Message, MessageType};

use crate::chain::Chain;
use crate::error::Error;
use crate::hook::{JumpTo, Middleware, ModelNext, NodeHook, ToolNext};
use crate::model::{ChatModel, ModelRequest, ModelSettings};
use crate::tool::{Tool, ToolOutcome, ToolRequest};

/// The conversation channel of an agent.
pub const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");

/// The channel a hook's jump travels in: untracked, so never persisted (neither stored in a
/// checkpoint nor kept in a stored write) and never part of a run's output (kernel-spec R1).
pub const JUMP_TO: Key<String> = Key::from_static("jump_to");

/// The model node's name.
pub const MODEL_NODE: &str = "model";
/// The tools node's name.
pub const TOOLS_NODE: &str = "tools";

type MessagesSpec = Arc<dyn Fn() -> ChannelSpec<Vec<Message>, Vec<Message>> + Send + Sync>;

/// Builds the graph of an agent: a resolved [`Chain`], a [`ChatModel`] and tools.
pub struct AgentGraph {
    chain: Chain,
    model: Arc<dyn ChatModel>,
    tools: Vec<Arc<dyn Tool>>,
    system_message: Option<Message>,
    settings: ModelSettings,
    messages: MessagesSpec,
}

impl AgentGraph {
    /// An agent with `chain` around `model`, no tools, no system prompt,
    /// default settings and a full-mode `messages` channel.
    pub fn new(chain: Chain, model: Arc<dyn ChatModel>) -> Self {
        AgentGraph {
            chain,
            model,
            tools: Vec::new(),
            system_message: None,
            settings: ModelSettings::default(),
            messages: Arc::new(ChannelSpec::messages),
        }
    }

    /// Adds tools (default: none besides the middlewares' own).
    #[must_use]
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Sets the static system prompt (default: none), sent as a system message.
    #[must_use]
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_message = Some(Message::system(prompt.into()));
        self
    }

    /// Sets the static system message itself (default: none), for a prompt that carries an
    /// id, `additional_kwargs` or content blocks.
    #[must_use]
    pub fn with_system_message(mut self, message: Message) -> Self {
        self.system_message = Some(message);
        self
    }

    /// Sets the model settings (default: provider defaults).
    #[must_use]
    pub fn with_settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Declares `messages` with another channel (default: the full-mode
    /// message reducer). Whatever a middleware declares for `messages` is
    /// ignored in favour of this one, so a contributed schema can never put
    /// `messages` in a different channel mode (kernel-spec R40).
    #[must_use]
    pub fn with_messages_channel<F>(mut self, spec: F) -> Self
    where
        F: Fn() -> ChannelSpec<Vec<Message>, Vec<Message>> + Send + Sync + 'static,
    {
        self.messages = Arc::new(spec);
        self
    }

    /// The tools the model sees: the given ones, then each middleware's in
    /// chain order; the first tool of a name wins.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        let contributed = self.chain.entries().iter().flat_map(|m| m.tools());
        for tool in self.tools.iter().cloned().chain(contributed) {
            if !out.iter().any(|t| t.name() == tool.name()) {
                out.push(tool);
            }
        }
        out
    }

    /// The graph, ready to compile (callers may add a checkpointer and
    /// interrupts before compiling).
    pub fn build(&self) -> Result<StateGraph, Error> {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, (self.messages)())
            .map_err(Error::Graph)?;
        // Untracked (R1): the jump lives only in the run that made it; every node that does not
        // jump clears the jump it inherited (`clear_inherited_jump`), so it lasts one step.
        g.channel(&JUMP_TO, ChannelSpec::untracked())
            .map_err(Error::Graph)?;
        for m in self.chain.entries() {
            for field in m.state_fields() {
                // R40: the base declaration of `messages` always wins.
                if field.name() == MESSAGES.name() {
                    continue;
                }
                field.register(&mut g).map_err(Error::Graph)?;
            }
        }

        let entries = self.chain.entries();
        let with = |hook: NodeHook, reverse: bool| -> Vec<Arc<dyn Middleware>> {
            let mut v: Vec<_> = entries
                .iter()
                .filter(|m| m.node_hooks().has(hook))
                .cloned()
                .collect();
            if reverse {
                v.reverse();
            }
            v
        };
        let before_agent = with(NodeHook::BeforeAgent, false);
        let before_model = with(NodeHook::BeforeModel, false);
        let after_model = with(NodeHook::AfterModel, true);
        let after_agent = with(NodeHook::AfterAgent, true);

        // Graph-safe, distinct node names per middleware: an id may hold the graph's separators
        // (`:` of `module:Class`, `|`) or start with its reserved `__`, and two ids may render
        // alike (a kind `A#x` and the instance `x` of `A`); the first keeps its id's form.
        let mut safe: std::collections::HashMap<crate::MiddlewareId, String> =
            std::collections::HashMap::new();
        let mut used: std::collections::HashSet<String> = std::collections::HashSet::new();
        for m in entries {
            let id = m.id();
            if safe.contains_key(&id) {
                continue;
            }
            let mut base: String = id
                .to_string()
                .chars()
                .map(|c| if c == ':' || c == '|' { '_' } else { c })
                .collect();
            if base.starts_with("__") {
                base.insert_str(0, "mw");
            }
            let mut unique = base.clone();
            let mut n = 2;
            while !used.insert(unique.clone()) {
                unique = format!("{base}~{n}");
                n += 1;
            }
            safe.insert(id, unique);
        }
        let name = |m: &Arc<dyn Middleware>, hook: NodeHook| -> NodeId {
            let id = m.id();
            let base = safe.get(&id).cloned().unwrap_or_else(|| id.to_string());
            NodeId::from(format!("{base}.{}", hook.as_str()).as_str())
        };
        let model_entry: NodeId = before_model.first().map_or_else(
            || NodeId::from(MODEL_NODE),
            |m| name(m, NodeHook::BeforeModel),
        );
        let end_entry: NodeId = after_agent
            .first()
            .map_or_else(|| NodeId::from(END), |m| name(m, NodeHook::AfterAgent));
        let tools_node = NodeId::from(TOOLS_NODE);
        let targets = Targets {
            model: model_entry.clone(),
            tools: tools_node.clone(),
            end: end_entry.clone(),
        };

        // Hook sequences: each node continues to the next of its sequence,
        // or to `after`, unless it jumped.
        // An after-agent hook that jumps to the end ends the run: the end of the other
        // sequences is the first after-agent hook, which would run it again (and again).
        let after_agent_targets = Targets {
            end: NodeId::from(END),
            ..targets.clone()
        };
        let add_sequence =
            |g: &mut StateGraph, seq: &[Arc<dyn Middleware>], hook: NodeHook, after: Next| {
                let targets = if hook == NodeHook::AfterAgent {
                    &after_agent_targets
                } else {
                    &targets
                };
                for (i, m) in seq.iter().enumerate() {
                    let node = name(m, hook);
                    let next = match seq.get(i + 1) {
                        Some(n) => Next::Node(name(n, hook)),
                        None => after.clone(),
                    };
                    g.add_node_with(node.clone(), hook_node(m.clone(), hook), Default::default());
                    add_route(g, node, next, targets, m.can_jump_to(hook));
                }
            };
        add_sequence(
            &mut g,
            &before_agent,
            NodeHook::BeforeAgent,
            Next::Node(model_entry.clone()),
        );
        add_sequence(
            &mut g,
            &before_model,
            NodeHook::BeforeModel,
            Next::Node(MODEL_NODE.into()),
        );
        add_sequence(&mut g, &after_model, NodeHook::AfterModel, Next::ToolsOrEnd);
        add_sequence(
            &mut g,
            &after_agent,
            NodeHook::AfterAgent,
            Next::Node(END.into()),
        );

        let start = before_agent
            .first()
            .map_or_else(|| model_entry.clone(), |m| name(m, NodeHook::BeforeAgent));
        g.add_edge(START, start);

        let tools = self.tools();
        let model_node = ModelNode {
            chain: self.chain.clone(),
            model: self.model.clone(),
            schemas: tools.iter().map(|t| t.schema()).collect(),
            system_message: self.system_message.clone(),
            settings: self.settings.clone(),
        };
        g.add_node_with(
            NodeId::from(MODEL_NODE),
            node_fn(move |state: State, ctx: Context| {
                let node = model_node.clone();
                async move { node.run(state, ctx).await }
            }),
            Default::default(),
        );
        let after_model_entry = after_model.first().map_or(Next::ToolsOrEnd, |m| {
            Next::Node(name(m, NodeHook::AfterModel))
        });
        add_route(
            &mut g,
            NodeId::from(MODEL_NODE),
            after_model_entry,
            &targets,
            &[],
        );

        let tools_node_impl = ToolsNode {
            chain: self.chain.clone(),
            tools,
        };
        g.add_node_with(
            tools_node.clone(),
            node_fn(move |state: State, ctx: Context| {
                let node = tools_node_impl.clone();
                async move { node.run(state, ctx).await }
            }),
            Default::default(),
        );
        add_route(
            &mut g,
            tools_node,
            Next::Node(model_entry),
            &targets,
            &[JumpTo::End],
        );
        Ok(g)
    }
}

/// Where a hook node continues when it does not jump.
#[derive(Clone)]
enum Next {
    Node(NodeId),
    /// After the model's last `after_model` hook: tools when the last AI
    /// message calls any, else the end.
    ToolsOrEnd,
}

#[derive(Clone)]
struct Targets {
    model: NodeId,
    tools: NodeId,
    end: NodeId,
}

impl Targets {
    fn of(&self, jump: JumpTo) -> NodeId {
        match jump {
            JumpTo::Model => self.model.clone(),
            JumpTo::Tools => self.tools.clone(),
            JumpTo::End => self.end.clone(),
        }
    }
}

fn parse_jump(s: &str) -> Option<JumpTo> {
    match s {
        "model" => Some(JumpTo::Model),
        "tools" => Some(JumpTo::Tools),
        "end" => Some(JumpTo::End),
        _ => None,
    }
}

/// Where the loop goes after the model and its after-model hooks (R49, and the reference's
/// model-to-tools edge): to the tools while the last AI message has calls no tool message
/// answers; back to the model when it has calls and something (a hook) answered all of them,
/// so the model sees the answers; to the end when it has none.
fn after_model_route(state: &State, targets: &Targets) -> NodeId {
    if !pending_tool_calls(state).is_empty() {
        return targets.tools.clone();
    }
    let called = state
        .get(&MESSAGES)
        .and_then(|ms| ms.iter().rev().find(|m| m.kind == MessageType::Ai))
        .is_some_and(|m| !m.tool_calls().is_empty());
    if called {
        targets.model.clone()
    } else {
        targets.end.clone()
    }
}

/// The tool calls of the last AI message that no tool message after it answers (R49: the loop
/// ends when the last AI message has no tool calls). Messages after the AI message, such as a
/// reminder an after-model hook appended, do not hide its calls, and a call already answered
/// is not run again.
/// Checks that a tool's command answers its call, as LangGraph's tool node does: its update
/// carries a tool message for the call's id (which then gets the call's tool name), unless
/// the update only removes every message, or the command writes nothing at all (LangGraph
/// checks no command without an update: a bare goto to the end, R49). Otherwise the model
/// would next see a call without an answer, which providers refuse; the error says what the
/// command wrote instead.
fn answer_call(update: &mut Update, id: Option<&str>, name: &str) -> Result<(), String> {
    if update.channels().next().is_none() {
        return Ok(());
    }
    let mut written: Vec<&mut Vec<Message>> = update.writes_mut(&MESSAGES).collect();
    let all: Vec<&Message> = written.iter().flat_map(|w| w.iter()).collect();
    if let [only] = all.as_slice()
        && only.is_remove_all()
    {
        return Ok(());
    }
    let seen: Vec<String> = all
        .iter()
        .map(|m| match (m.kind, m.tool_call_id()) {
            (MessageType::Tool, Some(answers)) => format!("tool (answering '{answers}')"),
            (kind, _) => kind.as_str().to_owned(),
        })
        .collect();
    let mut answered = false;
    for m in written.iter_mut().flat_map(|w| w.iter_mut()) {
        if m.kind == MessageType::Tool && id.is_some() && m.tool_call_id() == id {
            m.name = Some(name.to_owned());
            answered = true;
        }
    }
    if answered {
        return Ok(());
    }
    Err(format!(
        "a tool's command must answer its call with a tool message: tool '{name}' (call '{}') returned a command without one (its messages: {})",
        id.unwrap_or("without an id"),
        if seen.is_empty() {
            "none".to_owned()
        } else {
            seen.join(", ")
        }
    ))
}

fn pending_tool_calls(state: &State) -> Vec<antler_state_reducers::ToolCall> {
    let Some(ms) = state.get(&MESSAGES) else {
        return Vec::new();
    };
    let Some(at) = ms.iter().rposition(|m| m.kind == MessageType::Ai) else {
        return Vec::new();
    };
    let answered: std::collections::HashSet<&str> = ms[at + 1..]
        .iter()
        .filter(|m| m.kind == MessageType::Tool)
        .filter_map(|m| m.tool_call_id())
        .collect();
    ms[at]
        .tool_calls()
        .iter()
        .filter(|c| c.id.as_deref().is_none_or(|id| !answered.contains(id)))
        .cloned()
        .collect()
}

/// A jump lives in an untracked channel, which nothing clears by itself
/// (and an ephemeral one would be cleared only at the end of the following
/// step, while that step's router already runs); so every node that does not
/// jump clears a jump it inherited, and routers only ever see the jump of the
/// node they route.
fn clear_inherited_jump(state: &State, update: &mut Update) {
    if state.get(&JUMP_TO).is_some_and(|j| !j.is_empty()) {
        update.push(&JUMP_TO, String::new());
    }
}

fn add_route(g: &mut StateGraph, from: NodeId, next: Next, targets: &Targets, jumps: &[JumpTo]) {
    let mut possible: Vec<NodeId> = jumps.iter().map(|j| targets.of(*j)).collect();
    match &next {
        Next::Node(n) => possible.push(n.clone()),
        Next::ToolsOrEnd => {
            possible.push(targets.tools.clone());
            possible.push(targets.model.clone());
            possible.push(targets.end.clone());
        }
    }
    let mut seen = std::collections::HashSet::new();
    possible.retain(|n| seen.insert(n.clone()));
    let targets = targets.clone();
    g.add_router(from, Some(possible), move |state: &State| {
        if let Some(jump) = state.get(&JUMP_TO).and_then(|j| parse_jump(j)) {
            return vec![Goto::Node(targets.of(jump))];
        }
        let to = match &next {
            Next::Node(n) => n.clone(),
            Next::ToolsOrEnd => after_model_route(state, &targets),
        };
        vec![Goto::Node(to)]
    });
}

fn hook_node(m: Arc<dyn Middleware>, hook: NodeHook) -> Arc<dyn antler_graph::Node> {
    node_fn(move |state: State, ctx: Context| {
        let m = m.clone();
        async move {
            let out = match hook {
                NodeHook::BeforeAgent => m.before_agent(&state, &ctx).await?,
                NodeHook::BeforeModel => m.before_model(&state, &ctx).await?,
                NodeHook::AfterModel => m.after_model(&state, &ctx).await?,
                NodeHook::AfterAgent => m.after_agent(&state, &ctx).await?,
            };
            let Some(out) = out else {
                let mut update = Update::new();
                clear_inherited_jump(&state, &mut update);
                return Ok(update);
            };
            let mut update = out.update;
            // A jump written as a plain channel write would skip the `can_jump_to` check (and
            // collide with the clearing write of an inherited jump): refused.
            if update.channels().any(|c| c == JUMP_TO.name()) {
                return Err(NodeError::failed(Error::JumpWrittenDirectly {
                    middleware: m.id().to_string(),
                    hook: hook.as_str(),
                }));
            }
            if out.jump_to.is_none() {
                clear_inherited_jump(&state, &mut update);
            }
            if let Some(jump) = out.jump_to {
                if !m.can_jump_to(hook).contains(&jump) {
                    return Err(NodeError::failed(Error::UndeclaredJump {
                        middleware: m.id().to_string(),
                        hook: hook.as_str(),
                        target: jump.as_str(),
                    }));
                }
                update.push(&JUMP_TO, jump.as_str().to_owned());
            }
            Ok(update)
        }
    })
}

#[derive(Clone)]
struct ModelNode {
    chain: Chain,
    model: Arc<dyn ChatModel>,
    schemas: Vec<crate::model::ToolSchema>,
    system_message: Option<Message>,
    settings: ModelSettings,
}

impl ModelNode {
    async fn run(&self, state: State, ctx: Context) -> Result<Update, NodeError> {
        let mut update = Update::new();
        clear_inherited_jump(&state, &mut update);
        let request = ModelRequest {
            system_message: self.system_message.clone(),
            messages: state.get(&MESSAGES).cloned().unwrap_or_default(),
            tools: self.schemas.clone(),
            settings: self.settings.clone(),
            state,
        };
        let response = ModelNext::new(self.chain.entries(), self.model.as_ref(), &ctx)
            .run(request)
            .await?;
        update.push(&MESSAGES, response.messages);
        Ok(update)
    }
}

#[derive(Clone)]
struct ToolsNode {
    chain: Chain,
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolsNode {
    async fn run(&self, state: State, ctx: Context) -> Result<Command, NodeError> {
        let calls = pending_tool_calls(&state);
        // Each outcome's call, in call order (the outcomes come back in that order).
        let answering: Vec<(Option<String>, String)> = calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        let names: Arc<[String]> = self.tools.iter().map(|t| t.name().to_owned()).collect();
        let runs = calls.into_iter().map(|call| {
            let tool = self.tools.iter().find(|t| t.name() == call.name).cloned();
            let names = names.clone();
            let request = ToolRequest {
                call,
                state: state.clone(),
            };
            let chain = self.chain.clone();
            let ctx = ctx.clone();
            async move {
                ToolNext::new(chain.entries(), tool.as_deref(), &ctx)
                    .with_tool_names(&names)
                    .run(request)
                    .await
            }
        });
        // Calls run concurrently; results are collected in call order.
        let outcomes = futures::future::join_all(runs).await;
        // In call order, a command's update included: plain messages in a row go in one write,
        // and a command's writes go between the messages of the calls before and after it.
        let mut out = Update::new();
        let mut messages = Vec::new();
        let mut to_end = false;
        for (outcome, (call_id, call_name)) in outcomes.into_iter().zip(&answering) {
            match outcome? {
                ToolOutcome::Message(m) => messages.push(m),
                ToolOutcome::Command(c) => {
                    if !messages.is_empty() {
                        out.push(&MESSAGES, std::mem::take(&mut messages));
                    }
                    // What the tools step cannot carry out is refused, not dropped: a resume
                    // or a parent address belongs to a graph input or a subgraph's result, and
                    // a `jump_to` write would skip the tools node's declared jumps.
                    let refused = |detail: String| {
                        NodeError::failed(crate::Error::RefusedToolCommand { detail })
                    };
                    if c.has_resume() || c.is_to_parent() {
                        return Err(refused(
                            "a tool's command may not resume interrupts or address the parent graph"
                                .to_owned(),
                        ));
                    }
                    if c.updates().channels().any(|ch| ch == JUMP_TO.name()) {
                        return Err(refused(
                            "a tool's command wrote `jump_to`; a tool ends the run with a goto to the end"
                                .to_owned(),
                        ));
                    }
                    let (mut u, gotos) = c.into_update_and_gotos();
                    answer_call(&mut u, call_id.as_deref(), call_name).map_err(refused)?;
                    out.extend(u);
                    // R49 lets a tool end the run; any other destination has no place in the
                    // loop (the tools step always returns to the model), so it is refused
                    // rather than dropped.
                    for g in &gotos {
                        match g {
                            Goto::Node(n) if n.as_str() == END => to_end = true,
                            Goto::Node(n) => {
                                return Err(refused(format!(
                                    "a tool's command may only go to the end of the run, not to node '{}'",
                                    n.as_str()
                                )));
                            }
                            other => {
                                return Err(refused(format!(
                                    "a tool's command may only go to the end of the run, not {other:?}"
                                )));
                            }
                        }
                    }
                }
            }
        }
        if !messages.is_empty() {
            out.push(&MESSAGES, messages);
        }
        if to_end {
            out.push(&JUMP_TO, JumpTo::End.as_str().to_owned());
        } else {
            clear_inherited_jump(&state, &mut out);
        }
        Ok(Command::new().update(out))
    }
}
