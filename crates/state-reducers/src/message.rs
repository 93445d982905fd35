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

/// Role-specific and rarely set fields, boxed so that a plain message stays
/// small: the reducers move messages around, and a smaller message moves
/// faster.
#[derive(Clone, Debug, Default, PartialEq)]
struct Ext {
    tool_calls: Vec<ToolCall>,
    invalid_tool_calls: Vec<InvalidToolCall>,
    usage_metadata: Option<Value>,
    tool_call_id: Option<String>,
    status: Option<String>,
    artifact: Option<Value>,
    role: Option<String>,
    extra: Map<String, Value>,
}

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
static EMPTY_EXT: std::sync::LazyLock<Ext> = std::sync::LazyLock::new(Ext::default);

/// A LangChain message.
///
/// The type, content, id and name are plain fields; the maps and the
/// role-specific fields (tool calls, tool-call id, status, artifact, …) sit
/// behind accessors because they are stored out of line until set. Fields
/// that belong to one role are empty/`None` on other roles unless a caller
/// sets them.
#[derive(Clone, Debug)]
pub struct Message {
    /// The message type.
    pub kind: MessageType,
    /// The content.
    pub content: Content,
    /// The id; the message reducer assigns one to every message it stores.
    pub id: Option<String>,
    /// Optional participant name.
    pub name: Option<String>,
    additional_kwargs: Option<Box<Map<String, Value>>>,
    response_metadata: Option<Box<Map<String, Value>>>,
    ext: Option<Box<Ext>>,
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        // An absent box and an empty one are the same value.
        self.kind == other.kind
            && self.content == other.content
            && self.id == other.id
            && self.name == other.name
            && self.additional_kwargs() == other.additional_kwargs()
            && self.response_metadata() == other.response_metadata()
            && self.ext_ref() == other.ext_ref()
    }
}

impl Message {
    /// A message of `kind` with `content` and everything else empty.
    pub fn new(kind: MessageType, content: impl Into<Content>) -> Self {
        let mut m = Message {
            kind,
            content: content.into(),
            id: None,
            name: None,
            additional_kwargs: None,
            response_metadata: None,
            ext: None,
        };
        if kind == MessageType::Tool {
            m.ext_mut().status = Some("success".to_owned());
        }
        m
    }

    fn ext_ref(&self) -> &Ext {
        self.ext.as_deref().unwrap_or(&EMPTY_EXT)
    }

    fn ext_mut(&mut self) -> &mut Ext {
        self.ext.get_or_insert_with(Box::default)
    }

    /// Provider-specific and kernel marker fields.
    pub fn additional_kwargs(&self) -> &Map<String, Value> {
        self.additional_kwargs.as_deref().unwrap_or(&EMPTY_MAP)
    }

    /// Mutable access to `additional_kwargs`.
    pub fn additional_kwargs_mut(&mut self) -> &mut Map<String, Value> {
        self.additional_kwargs.get_or_insert_with(Box::default)
    }

    /// Response metadata (`finish_reason`, `model_name`, …).
    pub fn response_metadata(&self) -> &Map<String, Value> {
        self.response_metadata.as_deref().unwrap_or(&EMPTY_MAP)
    }

    /// Mutable access to `response_metadata`.
    pub fn response_metadata_mut(&mut self) -> &mut Map<String, Value> {
        self.response_metadata.get_or_insert_with(Box::default)
    }

    /// AI: parsed tool calls.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.ext_ref().tool_calls
    }

    /// Mutable access to the tool calls.
    pub fn tool_calls_mut(&mut self) -> &mut Vec<ToolCall> {
        &mut self.ext_mut().tool_calls
    }

    /// AI: tool calls whose arguments did not parse.
    pub fn invalid_tool_calls(&self) -> &[InvalidToolCall] {
        &self.ext_ref().invalid_tool_calls
    }

    /// Mutable access to the invalid tool calls.
    pub fn invalid_tool_calls_mut(&mut self) -> &mut Vec<InvalidToolCall> {
        &mut self.ext_mut().invalid_tool_calls
    }

    /// AI: token usage (`{input_tokens, output_tokens, total_tokens, …}`), kept verbatim.
    pub fn usage_metadata(&self) -> Option<&Value> {
        self.ext_ref().usage_metadata.as_ref()
    }

    /// Sets the token usage.
    pub fn set_usage_metadata(&mut self, usage: Option<Value>) {
        self.ext_mut().usage_metadata = usage;
    }

    /// Tool: the id of the call this message answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.ext_ref().tool_call_id.as_deref()
    }

    /// Sets the answered tool-call id.
    pub fn set_tool_call_id(&mut self, id: Option<String>) {
        self.ext_mut().tool_call_id = id;
    }

    /// Tool: `"success"` (the default of tool messages) or `"error"`.
    pub fn status(&self) -> Option<&str> {
        self.ext_ref().status.as_deref()
    }

    /// Sets the tool status.
    pub fn set_status(&mut self, status: Option<String>) {
        self.ext_mut().status = status;
    }

    /// Tool: a free value not sent to the model (e.g. `{human_input: …}`).
    pub fn artifact(&self) -> Option<&Value> {
        self.ext_ref().artifact.as_ref()
    }

    /// Sets the artifact.
    pub fn set_artifact(&mut self, artifact: Option<Value>) {
        self.ext_mut().artifact = artifact;
    }

    /// Chat: the free-form role.
    pub fn role(&self) -> Option<&str> {
        self.ext_ref().role.as_deref()
    }

    /// Sets the free-form role.
    pub fn set_role(&mut self, role: Option<String>) {
        self.ext_mut().role = role;
    }

    /// Keys beyond the canonical ones, preserved in order.
    pub fn extra(&self) -> &Map<String, Value> {
        &self.ext_ref().extra
    }

    /// Mutable access to the unknown keys.
    pub fn extra_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.ext_mut().extra
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
        m.set_tool_call_id(Some(tool_call_id.into()));
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
        self.tool_calls_mut().push(call);
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
        // Serialising a message into a `Value` cannot fail: every key is a string.
        serde_json::to_value(self).unwrap_or(Value::Null)
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
    /// Writes the canonical keys in LangChain's order, then unknown keys,
    /// without building an intermediate map (this is the storage hot path).
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct ToolCalls<'a>(&'a [ToolCall]);
        impl Serialize for ToolCalls<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().map(ToolCall::to_json))
            }
        }
        struct Invalid<'a>(&'a [InvalidToolCall]);
        impl Serialize for Invalid<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().map(InvalidToolCall::to_json))
            }
        }
        let mut m = serializer.serialize_map(None)?;
        m.serialize_entry("content", &self.content)?;
        m.serialize_entry("additional_kwargs", self.additional_kwargs())?;
        m.serialize_entry("response_metadata", self.response_metadata())?;
        let ext = self.ext_ref();
        m.serialize_entry("type", self.kind.as_str())?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("id", &self.id)?;
        let mut written: [&str; 7] = [""; 7];
        let mut n = 0;
        let ai = self.kind == MessageType::Ai;
        if ai || !ext.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &ToolCalls(&ext.tool_calls))?;
            written[n] = "tool_calls";
            n += 1;
        }
        if ai || !ext.invalid_tool_calls.is_empty() {
            m.serialize_entry("invalid_tool_calls", &Invalid(&ext.invalid_tool_calls))?;
            written[n] = "invalid_tool_calls";
            n += 1;
        }
        if ai || ext.usage_metadata.is_some() {
            m.serialize_entry("usage_metadata", &ext.usage_metadata)?;
            written[n] = "usage_metadata";
            n += 1;
        }
        let tool = self.kind == MessageType::Tool;
        if tool || ext.tool_call_id.is_some() {
            m.serialize_entry("tool_call_id", &ext.tool_call_id)?;
            written[n] = "tool_call_id";
            n += 1;
        }
        if tool || ext.artifact.is_some() {
            m.serialize_entry("artifact", &ext.artifact)?;
            written[n] = "artifact";
            n += 1;
        }
        if tool || ext.status.is_some() {
            m.serialize_entry("status", ext.status.as_deref().unwrap_or("success"))?;
            written[n] = "status";
            n += 1;
        }
        if self.kind == MessageType::Chat || ext.role.is_some() {
            m.serialize_entry("role", &ext.role)?;
            written[n] = "role";
            n += 1;
        }
        const BASE: [&str; 6] = [
            "content",
            "additional_kwargs",
            "response_metadata",
            "type",
            "name",
            "id",
        ];
        for (k, v) in &ext.extra {
            // A canonical key always wins over an unknown key of the same name.
            if BASE.contains(&k.as_str()) || written[..n].contains(&k.as_str()) {
                continue;
            }
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Message {
    /// Reads a message-like straight from the input: the top-level keys of a
    /// dict are routed as they stream by (no intermediate map), then the same
    /// coercion rules as [`Message::from_json`] apply. This is the read path
    /// of every stored conversation.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

/// A map key, borrowed from the input when the format allows it.
struct KeyStr<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = KeyStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(KeyStr(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(KeyStr(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Self::Value, E> {
                Ok(KeyStr(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::de::Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a message dict, a string or a [role, content] pair")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Message, E> {
        Ok(Message::human(v))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> std::result::Result<Message, E> {
        Ok(Message::human(v))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Message, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            items.push(v);
        }
        Message::from_json(Value::Array(items)).map_err(A::Error::custom)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Message, A::Error> {
        let mut fields = crate::coerce::Fields::default();
        while let Some(KeyStr(key)) = map.next_key::<KeyStr<'de>>()? {
            let value: Value = map.next_value()?;
            match fields.slot(&key) {
                Some(slot) => *slot = Some(value),
                None => {
                    fields.extra.insert(key.into_owned(), value);
                }
            }
        }
        crate::coerce::message_from_fields(fields).map_err(A::Error::custom)
    }

    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Message, E> {
        Err(E::custom(Error::malformed(
            "unsupported message-like value null",
        )))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Message, E> {
        Err(E::custom(Error::malformed(format!(
            "unsupported message-like value {v}"
        ))))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Message, E> {
        Err(E::custom(Error::malformed(format!(
            "unsupported message-like value {v}"
        ))))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Message, E> {
        Err(E::custom(Error::malformed(format!(
            "unsupported message-like value {v}"
        ))))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Message, E> {
        Err(E::custom(Error::malformed(format!(
            "unsupported message-like value {v}"
        ))))
    }
}
