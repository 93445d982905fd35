//! The chat-model interface the model hooks wrap.

use antler_graph::{BoxError, State};
use antler_state_reducers::Message;
use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Map, Value};

/// A tool as the model sees it: name, description and JSON-schema parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSchema {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: Value,
}

/// Sampling and reasoning settings of one model call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelSettings {
    /// Sampling temperature (provider default when `None`).
    pub temperature: Option<f64>,
    /// Output token cap (provider default when `None`).
    pub max_tokens: Option<u32>,
    /// Extended thinking on or off (provider default when `None`).
    pub thinking_enabled: Option<bool>,
    /// Reasoning effort label, passed through unchanged.
    pub reasoning_effort: Option<String>,
    /// Provider-specific settings.
    pub extra: Map<String, Value>,
}

/// One model call: what the wrap hooks may rewrite before the model sees it.
#[derive(Clone)]
pub struct ModelRequest {
    /// The system message sent ahead of `messages` (LangChain's `ModelRequest.system_message`):
    /// the agent's static prompt, which a wrap hook may replace, for instance with the
    /// coalesced system messages of kernel-spec R70, keeping the first one's id and merged
    /// `additional_kwargs`, which a bare string could not carry. Per-turn context rides in
    /// `messages`.
    pub system_message: Option<Message>,
    /// The conversation sent to the model.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSchema>,
    /// Sampling and reasoning settings.
    pub settings: ModelSettings,
    /// The agent state at the start of this step (read-only).
    pub state: State,
}

impl ModelRequest {
    /// The text of the system message, if any.
    pub fn system_prompt(&self) -> Option<String> {
        self.system_message.as_ref().map(|m| m.content.text())
    }
}

/// What a model call produced; wrap hooks may rewrite it on the way out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelResponse {
    /// Messages to append, normally one AI message.
    pub messages: Vec<Message>,
}

impl From<Message> for ModelResponse {
    fn from(m: Message) -> Self {
        ModelResponse { messages: vec![m] }
    }
}

/// A piece of a streamed model answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChunk {
    /// A text token.
    Token(String),
    /// The complete AI message (the last chunk of a stream).
    Message(Message),
}

/// A chat model: messages, tool schemas and settings in, an AI message with
/// tool calls, usage and finish metadata out.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// A name for logs and diagnostics.
    fn name(&self) -> &str;

    /// One complete call.
    async fn invoke(&self, request: &ModelRequest) -> Result<Message, BoxError>;

    /// A streamed call: tokens, then the complete message. The default
    /// streams the result of [`invoke`](Self::invoke) as one message chunk.
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxStream<'a, Result<ModelChunk, BoxError>> {
        stream::once(async move { self.invoke(request).await.map(ModelChunk::Message) }).boxed()
    }
}
