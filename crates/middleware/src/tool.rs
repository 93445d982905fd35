//! The tool interface the tool hooks wrap.

use antler_graph::{Command, Context, NodeError, State};
use antler_state_reducers::{Message, ToolCall};
use async_trait::async_trait;
use serde_json::Value;

use crate::model::ToolSchema;

/// One tool call on its way to a tool.
#[derive(Clone)]
pub struct ToolRequest {
    /// The call the model made.
    pub call: ToolCall,
    /// The agent state at the start of the tool step (read-only).
    pub state: State,
}

/// What a tool returned: a tool message, or a [`Command`] (state updates
/// and control flow, e.g. `goto` the end).
#[derive(Clone, Debug)]
pub enum ToolOutcome {
    /// A tool message answering the call.
    Message(Message),
    /// A command.
    Command(Command),
}

impl From<Message> for ToolOutcome {
    fn from(m: Message) -> Self {
        ToolOutcome::Message(m)
    }
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments.
    fn parameters(&self) -> Value;

    /// The schema the model sees.
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }

    /// Runs the call. `ctx` is the task context of the tool step (custom
    /// stream events, interrupts: propagate [`NodeError`]s from
    /// [`Context::interrupt`] with `?`).
    async fn call(&self, request: ToolRequest, ctx: &Context) -> Result<ToolOutcome, NodeError>;
}
