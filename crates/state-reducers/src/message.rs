//! The message model: LangChain's message types, serialised to the same JSON
//! dict shape (`model_dump()`), with unknown keys preserved.
//!
//! A [`Message`] is one struct with a [`MessageType`] rather than one type per
//! role, because the reducers treat all roles alike except `remove`, and the
//! kernel reads role-specific fields (tool calls, tool-call ids) through one
//! interface. Role-specific fields are always serialised for their role (the
//! canonical key set of LangChain's dump) and, for other roles, only when they
//! hold data, so nothing set on a message is ever dropped.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The id of the `RemoveMessage` that clears the whole list (`REMOVE_ALL_MESSAGES`).
pub const REMOVE_ALL_MESSAGES: &str = "__remove_all__";

/// The `type` of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// A user turn (`human`; role aliases `user`).
    Human,
    /// A model turn (`ai`; role alias `assistant`).
    Ai,
    /// A system instruction (`system`; role alias `developer`).
    System,
    /// The result of a tool call (`tool`).
    Tool,
    /// A removal marker (`RemoveMessage`): deletes the message with its id.
    Remove,
    /// A message with an arbitrary role (`chat`, LangChain's `ChatMessage`).
    Chat,
    /// A legacy function result (`function`).
    Function,
}

impl MessageType {
    /// The `type` string of LangChain's dict shape.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Human => "human",
            MessageType::Ai => "ai",
            MessageType::System => "system",
            MessageType::Tool => "tool",
            MessageType::Remove => "remove",
            MessageType::Chat => "chat",
            MessageType::Function => "function",
        }
    }

    /// Resolves a `type` or `role` string, including role aliases and the
    /// streaming chunk class names (kernel-spec R18).
    ///
    /// Returns the type and whether the role was `developer`, which LangChain
    /// records in `additional_kwargs.__openai_role__`.
    pub fn from_role(role: &str) -> Option<(MessageType, bool)> {
        let t = match role {
            "human" | "user" | "HumanMessageChunk" => MessageType::Human,
            "ai" | "assistant" | "AIMessageChunk" => MessageType::Ai,
            "system" | "SystemMessageChunk" => MessageType::System,
            "developer" => return Some((MessageType::System, true)),
            "tool" | "ToolMessageChunk" => MessageType::Tool,
            "remove" => MessageType::Remove,
            "chat" | "ChatMessageChunk" => MessageType::Chat,
            "function" | "FunctionMessageChunk" => MessageType::Function,
            _ => return None,
        };
        Some((t, false))
    }
}

/// Message content: a string, or a list of content blocks (strings or maps
/// such as `{type: "text", text}` / `{type: "image_url", image_url: {url}}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content blocks, kept verbatim.
    Blocks(Vec<Value>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl Content {
    /// The text of the content: the string itself, or the concatenated text
    /// of string blocks and `{type: "text"}` blocks.
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => {
                let mut out = String::new();
                for b in blocks {
                    match b {
                        Value::String(s) => out.push_str(s),
                        Value::Object(m)
                            if m.get("type").and_then(Value::as_str) == Some("text") =>
                        {
                            if let Some(t) = m.get("text").and_then(Value::as_str) {
                                out.push_str(t);
                            }
                        }
                        _ => {}
                    }
                }
                out
            }
        }
    }

    pub(crate) fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Null => Ok(Content::default()),
            Value::String(s) => Ok(Content::Text(s)),
            Value::Array(items) => {
                if let Some(bad) = items
                    .iter()
                    .find(|b| !matches!(b, Value::String(_) | Value::Object(_)))
                {
                    return Err(Error::malformed(format!(
                        "content blocks must be strings or objects, got {bad}"
                    )));
                }
                Ok(Content::Blocks(items))
            }
            other => Err(Error::malformed(format!(
                "content must be a string or a list of blocks, got {other}"
            ))),
        }
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

/// A tool call requested by an AI message (`{id, name, args, type: "tool_call"}`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ToolCall {
    /// Provider-assigned call id; tool messages answer it via `tool_call_id`.
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// Parsed arguments.
    pub args: Map<String, Value>,
    /// Keys beyond the canonical ones, preserved.
    pub extra: Map<String, Value>,
}

/// A tool call whose arguments could not be parsed
/// (`{id, name, args: string, error, type: "invalid_tool_call"}`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct InvalidToolCall {
    /// Provider-assigned call id.
    pub id: Option<String>,
    /// The tool's name, if the provider sent one.
    pub name: Option<String>,
    /// The raw, unparsed argument text.
    pub args: Option<String>,
    /// Why parsing failed.
    pub error: Option<String>,
    /// Keys beyond the canonical ones, preserved.
    pub extra: Map<String, Value>,
}

/// A LangChain message.
///
/// Fields that belong to one role are documented with that role; they are
/// empty/`None` on other roles unless a caller sets them.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The message type.
    pub kind: MessageType,
    /// The content.
    pub content: Content,
    /// The id; the message reducer assigns one to every message it stores.
    pub id: Option<String>,
    /// Optional participant name.
    pub name: Option<String>,
    /// Provider-specific and kernel marker fields.
    pub additional_kwargs: Map<String, Value>,
    /// Response metadata (`finish_reason`, `model_name`, …).
    pub response_metadata: Map<String, Value>,
    /// AI: parsed tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// AI: tool calls whose arguments did not parse.
    pub invalid_tool_calls: Vec<InvalidToolCall>,
    /// AI: token usage (`{input_tokens, output_tokens, total_tokens, …}`), kept verbatim.
    pub usage_metadata: Option<Value>,
    /// Tool: the id of the call this message answers.
    pub tool_call_id: Option<String>,
    /// Tool: `"success"` (default) or `"error"`.
    pub status: Option<String>,
    /// Tool: a free value not sent to the model (e.g. `{human_input: …}`).
    pub artifact: Option<Value>,
    /// Chat: the free-form role.
    pub role: Option<String>,
    /// Keys beyond the canonical ones, preserved in order.
    pub extra: Map<String, Value>,
}

impl Message {
    /// A message of `kind` with `content` and everything else empty.
    pub fn new(kind: MessageType, content: impl Into<Content>) -> Self {
        Message {
            kind,
            content: content.into(),
            id: None,
            name: None,
            additional_kwargs: Map::new(),
            response_metadata: Map::new(),
            tool_calls: Vec::new(),
            invalid_tool_calls: Vec::new(),
            usage_metadata: None,
            tool_call_id: None,
            status: (kind == MessageType::Tool).then(|| "success".to_owned()),
            artifact: None,
            role: None,
            extra: Map::new(),
        }
    }

    /// A human message.
    pub fn human(content: impl Into<Content>) -> Self {
        Self::new(MessageType::Human, content)
    }

    /// An AI message.
    pub fn ai(content: impl Into<Content>) -> Self {
        Self::new(MessageType::Ai, content)
    }

    /// A system message.
    pub fn system(content: impl Into<Content>) -> Self {
        Self::new(MessageType::System, content)
    }

    /// A tool message answering `tool_call_id`.
    pub fn tool(content: impl Into<Content>, tool_call_id: impl Into<String>) -> Self {
        let mut m = Self::new(MessageType::Tool, content);
        m.tool_call_id = Some(tool_call_id.into());
        m
    }

    /// A `RemoveMessage` deleting the message with `id`
    /// ([`REMOVE_ALL_MESSAGES`] clears the list).
    pub fn remove(id: impl Into<String>) -> Self {
        let mut m = Self::new(MessageType::Remove, "");
        m.id = Some(id.into());
        m
    }

    /// The `RemoveMessage` that clears the whole list.
    pub fn remove_all() -> Self {
        Self::remove(REMOVE_ALL_MESSAGES)
    }

    /// Builder-lite: sets the id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Builder-lite: sets the name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Builder-lite: adds a tool call (AI messages).
    #[must_use]
    pub fn with_tool_call(mut self, call: ToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    /// The id, if any.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Whether this is a `RemoveMessage`.
    pub fn is_remove(&self) -> bool {
        self.kind == MessageType::Remove
    }

    /// Whether this is the remove-all sentinel.
    pub fn is_remove_all(&self) -> bool {
        self.is_remove() && self.id.as_deref() == Some(REMOVE_ALL_MESSAGES)
    }

    /// The LangChain dict form of this message.
    pub fn to_json(&self) -> Value {
        Value::Object(self.to_map())
    }

    fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("content".into(), content_value(&self.content));
        m.insert(
            "additional_kwargs".into(),
            Value::Object(self.additional_kwargs.clone()),
        );
        m.insert(
            "response_metadata".into(),
            Value::Object(self.response_metadata.clone()),
        );
        m.insert("type".into(), Value::String(self.kind.as_str().to_owned()));
        m.insert("name".into(), opt_str(&self.name));
        m.insert("id".into(), opt_str(&self.id));
        let ai = self.kind == MessageType::Ai;
        if ai || !self.tool_calls.is_empty() {
            m.insert(
                "tool_calls".into(),
                Value::Array(self.tool_calls.iter().map(ToolCall::to_json).collect()),
            );
        }
        if ai || !self.invalid_tool_calls.is_empty() {
            m.insert(
                "invalid_tool_calls".into(),
                Value::Array(
                    self.invalid_tool_calls
                        .iter()
                        .map(InvalidToolCall::to_json)
                        .collect(),
                ),
            );
        }
        if ai || self.usage_metadata.is_some() {
            m.insert(
                "usage_metadata".into(),
                self.usage_metadata.clone().unwrap_or(Value::Null),
            );
        }
        let tool = self.kind == MessageType::Tool;
        if tool || self.tool_call_id.is_some() {
            m.insert("tool_call_id".into(), opt_str(&self.tool_call_id));
        }
        if tool || self.artifact.is_some() {
            m.insert(
                "artifact".into(),
                self.artifact.clone().unwrap_or(Value::Null),
            );
        }
        if tool || self.status.is_some() {
            m.insert(
                "status".into(),
                Value::String(self.status.clone().unwrap_or_else(|| "success".into())),
            );
        }
        if self.kind == MessageType::Chat || self.role.is_some() {
            m.insert("role".into(), opt_str(&self.role));
        }
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        m
    }

    /// Coerces a LangChain-style dict (`type` or `role` plus `content`, …)
    /// into a message (kernel-spec R18).
    pub fn from_json_map(map: Map<String, Value>) -> Result<Self> {
        crate::coerce::message_from_map(map)
    }

    /// Coerces any JSON message-like: a dict, a bare string (human) or a
    /// `[role, content]` pair.
    pub fn from_json(value: Value) -> Result<Self> {
        crate::coerce::message_from_value(value)
    }
}

fn opt_str(v: &Option<String>) -> Value {
    v.as_ref().map_or(Value::Null, |s| Value::String(s.clone()))
}

fn content_value(c: &Content) -> Value {
    match c {
        Content::Text(s) => Value::String(s.clone()),
        Content::Blocks(b) => Value::Array(b.clone()),
    }
}

impl ToolCall {
    /// A tool call with `name`, `args` and `id`.
    pub fn new(name: impl Into<String>, args: Map<String, Value>, id: impl Into<String>) -> Self {
        ToolCall {
            id: Some(id.into()),
            name: name.into(),
            args,
            extra: Map::new(),
        }
    }

    /// The dict form (`type: "tool_call"`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert("args".into(), Value::Object(self.args.clone()));
        m.insert("id".into(), opt_str(&self.id));
        m.insert("type".into(), Value::String("tool_call".into()));
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

impl InvalidToolCall {
    /// The dict form (`type: "invalid_tool_call"`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), opt_str(&self.name));
        m.insert("args".into(), opt_str(&self.args));
        m.insert("id".into(), opt_str(&self.id));
        m.insert("error".into(), opt_str(&self.error));
        m.insert("type".into(), Value::String("invalid_tool_call".into()));
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Message::from_json(value).map_err(D::Error::custom)
    }
}
