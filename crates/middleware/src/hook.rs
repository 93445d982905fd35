//! The [`Middleware`] trait and the onion of wrap hooks.

use std::fmt;
use std::sync::Arc;

use antler_graph::{BuildError, ChannelSpec, Context, Key, NodeError, State, StateGraph, Update};
use async_trait::async_trait;

use crate::kind::{Anchors, MiddlewareId, MiddlewareKind};
use crate::model::{ChatModel, ModelRequest, ModelResponse};
use crate::tool::{Tool, ToolOutcome, ToolRequest};

/// A node hook: runs as its own graph step, reads the state and may return
/// an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeHook {
    /// Once per invocation, before anything else; first to last.
    BeforeAgent,
    /// Before every model call; first to last.
    BeforeModel,
    /// After every model call; last to first.
    AfterModel,
    /// Once per invocation, at the end; last to first.
    AfterAgent,
}

impl NodeHook {
    /// The hook's name, as used in node names (`<middleware>.<hook>`).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeHook::BeforeAgent => "before_agent",
            NodeHook::BeforeModel => "before_model",
            NodeHook::AfterModel => "after_model",
            NodeHook::AfterAgent => "after_agent",
        }
    }
}

/// Which node hooks a middleware implements.
///
/// The agent graph creates one node per implemented hook and none for the
/// others, because every node is a super-step with a checkpoint: a no-op
/// hook would cost a step. Declaring a hook that the middleware does not
/// override is harmless (the default does nothing); overriding one that is
/// not declared means it never runs, so declare exactly what you override.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeHooks {
    /// Implements [`Middleware::before_agent`].
    pub before_agent: bool,
    /// Implements [`Middleware::before_model`].
    pub before_model: bool,
    /// Implements [`Middleware::after_model`].
    pub after_model: bool,
    /// Implements [`Middleware::after_agent`].
    pub after_agent: bool,
}

impl NodeHooks {
    /// No node hooks (wrap hooks, tools or state fields only).
    pub const NONE: NodeHooks = NodeHooks {
        before_agent: false,
        before_model: false,
        after_model: false,
        after_agent: false,
    };

    /// All four node hooks.
    pub const ALL: NodeHooks = NodeHooks {
        before_agent: true,
        before_model: true,
        after_model: true,
        after_agent: true,
    };

    /// Whether `hook` is declared.
    pub fn has(self, hook: NodeHook) -> bool {
        match hook {
            NodeHook::BeforeAgent => self.before_agent,
            NodeHook::BeforeModel => self.before_model,
            NodeHook::AfterModel => self.after_model,
            NodeHook::AfterAgent => self.after_agent,
        }
    }
}

/// Where a node hook may jump instead of continuing in order (R49).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JumpTo {
    /// Re-enter the model: the first `before_model` hook, or the model.
    Model,
    /// Run the tools of the last AI message.
    Tools,
    /// Finish: the first `after_agent` hook, or the end.
    End,
}

impl JumpTo {
    /// The reference's name for the target.
    pub fn as_str(self) -> &'static str {
        match self {
            JumpTo::Model => "model",
            JumpTo::Tools => "tools",
            JumpTo::End => "end",
        }
    }
}

/// What a node hook returns: a state update, and optionally a jump.
#[derive(Clone, Debug, Default)]
pub struct HookUpdate {
    /// Writes applied through the reducers as this hook's own step.
    pub update: Update,
    /// Where to continue instead of the next hook; must be declared in
    /// [`Middleware::can_jump_to`].
    pub jump_to: Option<JumpTo>,
}

impl From<Update> for HookUpdate {
    fn from(update: Update) -> Self {
        HookUpdate {
            update,
            jump_to: None,
        }
    }
}

/// A state field a middleware contributes to the agent's schema.
///
/// The declaration is kept as a constructor so that the agent graph can be
/// compiled any number of times from the same middleware instances.
#[derive(Clone)]
pub struct StateField {
    name: String,
    register: Arc<RegisterFn>,
}

/// Declares one field in a graph under construction.
type RegisterFn = dyn Fn(&mut StateGraph) -> Result<(), BuildError> + Send + Sync;

impl StateField {
    /// A field for `key` declared with the channel `spec()` builds.
    pub fn new<V, W, F>(key: Key<V, W>, spec: F) -> Self
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
        W: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
        F: Fn() -> ChannelSpec<V, W> + Send + Sync + 'static,
    {
        let name = key.name().to_owned();
        StateField {
            name,
            register: Arc::new(move |graph: &mut StateGraph| {
                graph.channel(&key, spec()).map(|_| ())
            }),
        }
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Declares the field in `graph`; a conflicting earlier declaration is a
    /// [`BuildError`].
    pub fn register(&self, graph: &mut StateGraph) -> Result<(), BuildError> {
        (self.register)(graph)
    }
}

impl fmt::Debug for StateField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StateField({})", self.name)
    }
}

/// A middleware: identity for ordering, hooks around the agent loop, and
/// optional state fields and tools.
///
/// Every hook has a default that does nothing (node hooks) or passes the
/// call on (wrap hooks). See the crate docs for the dispatch order.
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// What this middleware is; anchors refer to kinds.
    fn kind(&self) -> MiddlewareKind;

    /// Which entry of a chain this is. Defaults to the kind alone; chains
    /// holding two middlewares of one kind label them apart.
    fn id(&self) -> MiddlewareId {
        MiddlewareId::of(self.kind())
    }

    /// Broader kinds this middleware also matches when used as an anchor
    /// (the "subclass instances match" rule of R55). Defaults to none.
    fn families(&self) -> Vec<MiddlewareKind> {
        Vec::new()
    }

    /// `@Next` / `@Prev` placement for extras (R52). Defaults to none.
    fn anchors(&self) -> Anchors {
        Anchors::NONE
    }

    /// The node hooks this middleware implements (see [`NodeHooks`]).
    fn node_hooks(&self) -> NodeHooks;

    /// Where `hook` may jump; a jump to anything else fails the run.
    /// Defaults to nowhere.
    fn can_jump_to(&self, hook: NodeHook) -> &'static [JumpTo] {
        let _ = hook;
        &[]
    }

    /// Once per invocation, first to last.
    async fn before_agent(
        &self,
        state: &State,
        ctx: &Context,
    ) -> Result<Option<HookUpdate>, NodeError> {
        let _ = (state, ctx);
        Ok(None)
    }

    /// Before every model call, first to last.
    async fn before_model(
        &self,
        state: &State,
        ctx: &Context,
    ) -> Result<Option<HookUpdate>, NodeError> {
        let _ = (state, ctx);
        Ok(None)
    }

    /// After every model call, last to first.
    async fn after_model(
        &self,
        state: &State,
        ctx: &Context,
    ) -> Result<Option<HookUpdate>, NodeError> {
        let _ = (state, ctx);
        Ok(None)
    }

    /// Once per invocation at the end, last to first.
    async fn after_agent(
        &self,
        state: &State,
        ctx: &Context,
    ) -> Result<Option<HookUpdate>, NodeError> {
        let _ = (state, ctx);
        Ok(None)
    }

    /// Around each model call. Call `next.run(request)` to continue inward,
    /// or return a response without calling it to short-circuit.
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, NodeError> {
        next.run(request).await
    }

    /// Around each tool call. Call `next.run(request)` to continue inward,
    /// or return an outcome without calling it to short-circuit.
    async fn wrap_tool_call(
        &self,
        request: ToolRequest,
        next: ToolNext<'_>,
    ) -> Result<ToolOutcome, NodeError> {
        next.run(request).await
    }

    /// State fields this middleware contributes. Defaults to none.
    fn state_fields(&self) -> Vec<StateField> {
        Vec::new()
    }

    /// Tools this middleware contributes. Defaults to none.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }
}

/// The inner layers of a model call: the remaining wrappers, then the model.
///
/// A wrapper may call [`run`](Self::run) more than once (a retry of a failed call) or not at
/// all (a short circuit); cloning it is cheap (references and a shared call counter).
#[derive(Clone)]
pub struct ModelNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) model: &'a dyn ChatModel,
    pub(crate) ctx: &'a Context,
    /// How many model calls the step's onion made so far (a wrap hook may call the inner
    /// layers more than once): each call's token events carry its number.
    pub(crate) calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl<'a> ModelNext<'a> {
    /// The start of the onion: `chain` wraps `model`, first entry outermost.
    pub fn new(
        chain: &'a [Arc<dyn Middleware>],
        model: &'a dyn ChatModel,
        ctx: &'a Context,
    ) -> Self {
        ModelNext {
            rest: chain,
            model,
            ctx,
            calls: Arc::default(),
        }
    }

    /// The task context of the model step.
    pub fn context(&self) -> &Context {
        self.ctx
    }

    /// Passes `request` to the next layer inward.
    pub async fn run(&self, request: ModelRequest) -> Result<ModelResponse, NodeError> {
        match self.rest.split_first() {
            Some((outer, rest)) => {
                let next = ModelNext {
                    rest,
                    model: self.model,
                    ctx: self.ctx,
                    calls: self.calls.clone(),
                };
                outer.wrap_model_call(request, next).await
            }
            None => {
                // The innermost layer streams, so tokens reach the graph's
                // custom stream while the model is still answering. Each token names its
                // model call (1, then 2… when a wrap hook calls again, say after a failure),
                // so a consumer can drop the tokens of a call that was not the last.
                use futures::StreamExt;
                let call = self
                    .calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                let mut stream = self.model.stream(&request);
                let mut last = None;
                while let Some(chunk) = stream.next().await {
                    match chunk.map_err(NodeError::failed)? {
                        crate::model::ModelChunk::Token(text) => self.ctx.emit(
                            serde_json::json!({"event": "token", "text": text, "call": call}),
                        ),
                        crate::model::ModelChunk::Message(m) => last = Some(m),
                    }
                }
                let message = last.ok_or_else(|| {
                    NodeError::failed(crate::Error::Model(
                        format!(
                            "model {} ended its stream without a message",
                            self.model.name()
                        )
                        .into(),
                    ))
                })?;
                Ok(ModelResponse::from(message))
            }
        }
    }
}

/// The inner layers of a tool call: the remaining wrappers, then the tool.
///
/// A wrapper may call [`run`](Self::run) more than once or not at all, as with
/// [`ModelNext`].
#[derive(Clone, Copy)]
pub struct ToolNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) tool: Option<&'a dyn Tool>,
    pub(crate) ctx: &'a Context,
    /// The names of the step's tools, which the answer to a call of an unknown one lists.
    pub(crate) names: &'a [String],
}

impl<'a> ToolNext<'a> {
    /// The start of the onion: `chain` wraps `tool` (`None` for a call to a
    /// tool that does not exist, which the innermost layer answers with an
    /// error tool message).
    pub fn new(
        chain: &'a [Arc<dyn Middleware>],
        tool: Option<&'a dyn Tool>,
        ctx: &'a Context,
    ) -> Self {
        ToolNext {
            rest: chain,
            tool,
            ctx,
            names: &[],
        }
    }

    /// Sets the names of the tools the step has, in order: the answer to a call of a tool
    /// that does not exist lists them, as LangGraph's tool node does, so that the model can
    /// pick one (default none).
    #[must_use]
    pub fn with_tool_names(mut self, names: &'a [String]) -> Self {
        self.names = names;
        self
    }

    /// The task context of the tool step.
    pub fn context(&self) -> &Context {
        self.ctx
    }

    /// Passes `request` to the next layer inward.
    pub async fn run(&self, request: ToolRequest) -> Result<ToolOutcome, NodeError> {
        match self.rest.split_first() {
            Some((outer, rest)) => {
                let next = ToolNext {
                    rest,
                    tool: self.tool,
                    ctx: self.ctx,
                    names: self.names,
                };
                outer.wrap_tool_call(request, next).await
            }
            None => match self.tool {
                Some(tool) => tool.call(request, self.ctx).await,
                None => Ok(ToolOutcome::Message(unknown_tool_message(
                    &request, self.names,
                ))),
            },
        }
    }
}

/// The error answer to a call of a tool that does not exist, so the model can correct
/// itself instead of the run failing: LangGraph's tool node's text, which lists the tools.
fn unknown_tool_message(request: &ToolRequest, names: &[String]) -> antler_state_reducers::Message {
    let mut m = antler_state_reducers::Message::tool(
        format!(
            "Error: {} is not a valid tool, try one of [{}].",
            request.call.name,
            names.join(", ")
        ),
        request.call.id.clone().unwrap_or_default(),
    );
    m.name = Some(request.call.name.clone());
    m.set_status(Some("error".to_owned()));
    m
}
