//! Coercion of message-likes into [`Message`]s (kernel-spec R18).
//!
//! Accepted shapes: LangChain dicts keyed by `type` or `role` (with role
//! aliases and streaming chunk class names), bare strings (human messages) and
//! `[role, content]` pairs. JSON has no tuples, so a pair is a two-element
//! array whose first element is a string *inside a write's list*; a top-level
//! write that is an array is always a list of message-likes.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::message::{Content, InvalidToolCall, Message, MessageType, ToolCall};

/// Coerces one JSON message-like.
pub(crate) fn message_from_value(value: Value) -> Result<Message> {
    match value {
        Value::String(s) => Ok(Message::human(s)),
        Value::Object(map) => message_from_map(map),
        Value::Array(mut pair) if pair.len() == 2 && pair[0].is_string() => {
            let content = pair.pop().unwrap_or(Value::Null);
            let role = pair.pop().unwrap_or(Value::Null);
            message_from_fields(Fields {
                role: Some(role),
                content: Some(content),
                ..Fields::default()
            })
        }
        other => Err(Error::malformed(format!(
            "unsupported message-like value {}",
            short(&other)
        ))),
    }
}

/// The keys of a message dict, taken apart once. Both the `Value` path and
/// the streaming deserialiser fill this, so they share one set of rules.
#[derive(Default)]
pub(crate) struct Fields {
    pub(crate) role: Option<Value>,
    pub(crate) kind: Option<Value>,
    pub(crate) content: Option<Value>,
    pub(crate) id: Option<Value>,
    pub(crate) name: Option<Value>,
    pub(crate) additional_kwargs: Option<Value>,
    pub(crate) response_metadata: Option<Value>,
    pub(crate) tool_calls: Option<Value>,
    pub(crate) invalid_tool_calls: Option<Value>,
    pub(crate) usage_metadata: Option<Value>,
    pub(crate) tool_call_id: Option<Value>,
    pub(crate) artifact: Option<Value>,
    pub(crate) status: Option<Value>,
    pub(crate) extra: Map<String, Value>,
}

impl Fields {
    /// Routes one key; returns the value back for keys that are not
    /// canonical so the caller can keep them as extras.
    pub(crate) fn slot(&mut self, key: &str) -> Option<&mut Option<Value>> {
        Some(match key {
            "role" => &mut self.role,
            "type" => &mut self.kind,
            "content" => &mut self.content,
            "id" => &mut self.id,
            "name" => &mut self.name,
            "additional_kwargs" => &mut self.additional_kwargs,
            "response_metadata" => &mut self.response_metadata,
            "tool_calls" => &mut self.tool_calls,
            "invalid_tool_calls" => &mut self.invalid_tool_calls,
            "usage_metadata" => &mut self.usage_metadata,
            "tool_call_id" => &mut self.tool_call_id,
            "artifact" => &mut self.artifact,
            "status" => &mut self.status,
            _ => return None,
        })
    }

    fn from_map(map: Map<String, Value>) -> Self {
        let mut f = Fields::default();
        for (k, v) in map {
            match f.slot(&k) {
                Some(slot) => *slot = Some(v),
                None => {
                    f.extra.insert(k, v);
                }
            }
        }
        f
    }
}

/// Coerces a LangChain dict.
pub(crate) fn message_from_map(map: Map<String, Value>) -> Result<Message> {
    message_from_fields(Fields::from_map(map))
}

fn unexpected_type(role: &str) -> Error {
    Error::malformed(format!(
        "Unexpected message type: {}. Use one of 'human', 'user', 'ai', 'assistant', 'function', 'tool', 'system', or 'developer'.",
        crate::pytext::repr_str(role)
    ))
}

fn resolve_role(value: &Value) -> Result<(MessageType, bool)> {
    let role = value
        .as_str()
        .ok_or_else(|| Error::malformed(format!("message role must be a string, got {value}")))?;
    MessageType::from_role(role).ok_or_else(|| unexpected_type(role))
}

/// Coerces the taken-apart keys of a message dict.
///
/// The message type comes from `role` (LangChain's precedence) unless a
/// `type` of `chat` is present, in which case `role` is the chat message's
/// free-form role; a `type` beside a `role` must otherwise agree with it.
pub(crate) fn message_from_fields(mut f: Fields) -> Result<Message> {
    let chat_role;
    let (kind, developer) = match (f.role.take(), f.kind.take()) {
        (None, None) => {
            return Err(Error::malformed(
                "message dict must contain a `type` or `role` key",
            ));
        }
        (None, Some(t)) => {
            chat_role = None;
            resolve_role(&t)?
        }
        (Some(r), None) => {
            chat_role = None;
            resolve_role(&r)?
        }
        (Some(r), Some(t)) => {
            let (tk, tdev) = resolve_role(&t)?;
            if tk == MessageType::Chat {
                chat_role = Some(r);
                (tk, tdev)
            } else {
                chat_role = None;
                let (rk, rdev) = resolve_role(&r)?;
                if rk != tk {
                    return Err(Error::malformed(format!(
                        "message `type` {t} contradicts its role {r}"
                    )));
                }
                (rk, rdev)
            }
        }
    };
    let Some(content) = f.content.take() else {
        return Err(Error::malformed(
            "message dict must contain a `content` key",
        ));
    };
    let mut msg = Message::new(kind, Content::default());
    msg.content = Content::from_value(content)?;
    msg.id = id_like(f.id.take(), "id")?;
    msg.name = opt_string(f.name.take(), "name")?;
    let kwargs = object(f.additional_kwargs.take(), "additional_kwargs")?;
    if !kwargs.is_empty() {
        *msg.additional_kwargs_mut() = kwargs;
    }
    let metadata = object(f.response_metadata.take(), "response_metadata")?;
    if !metadata.is_empty() {
        *msg.response_metadata_mut() = metadata;
    }
    if developer {
        msg.additional_kwargs_mut()
            .insert("__openai_role__".into(), Value::String("developer".into()));
    }
    // Chunk-only fields do not survive the chunk → message conversion.
    let chunks_given = f
        .extra
        .shift_remove("tool_call_chunks")
        .is_some_and(|v| truthy(&v));
    f.extra.shift_remove("chunk_position");
    // Role-specific keys on another role are kept as extras, as LangChain's
    // models keep unknown attributes.
    let mut keep = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            f.extra.insert(key.to_owned(), v);
        }
    };
    match kind {
        MessageType::Ai => {
            let mut invalid = Vec::new();
            let mut calls = match f.tool_calls.take() {
                Some(calls) => tool_calls(calls, &mut invalid)?,
                None => Vec::new(),
            };
            if let Some(raw) = f.invalid_tool_calls.take() {
                invalid.append(&mut invalid_tool_calls(raw)?);
            }
            // LangChain's AI message parses the provider's raw calls when it is given no
            // parsed ones (`_backwards_compat_tool_calls`).
            if calls.is_empty()
                && invalid.is_empty()
                && !chunks_given
                && let Some(raw) = msg.additional_kwargs().get("tool_calls")
                && truthy(raw)
                && let Some((parsed, unparsed)) = raw_tool_calls(raw)?
            {
                calls = parsed;
                invalid = unparsed;
            }
            if !calls.is_empty() {
                *msg.tool_calls_mut() = calls;
            }
            if !invalid.is_empty() {
                *msg.invalid_tool_calls_mut() = invalid;
            }
            match f.usage_metadata.take() {
                None | Some(Value::Null) => {}
                Some(v @ Value::Object(_)) => msg.set_usage_metadata(Some(v)),
                Some(other) => {
                    return Err(Error::malformed(format!(
                        "usage_metadata must be an object, got {}",
                        short(&other)
                    )));
                }
            }
        }
        MessageType::Tool => {
            let id = id_like(f.tool_call_id.take(), "tool_call_id")?;
            if id.is_none() {
                return Err(Error::malformed("tool message requires a `tool_call_id`"));
            }
            msg.set_tool_call_id(id);
            match f.artifact.take() {
                None | Some(Value::Null) => {}
                Some(v) => msg.set_artifact(Some(v)),
            }
            match f.status.take() {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s == "success" || s == "error" => {
                    msg.set_status(Some(s));
                }
                Some(other) => {
                    return Err(Error::malformed(format!(
                        "tool message status must be \"success\" or \"error\", got {}",
                        short(&other)
                    )));
                }
            }
        }
        MessageType::Chat => {
            let role = opt_string(chat_role, "role")?;
            msg.set_role(role);
        }
        MessageType::Remove => {
            if msg.id.is_none() {
                return Err(Error::malformed("remove message requires an `id`"));
            }
            // RemoveMessage carries no content.
            msg.content = Content::default();
        }
        MessageType::Human | MessageType::System | MessageType::Function => {}
    }
    keep("tool_calls", f.tool_calls.take());
    keep("invalid_tool_calls", f.invalid_tool_calls.take());
    keep("usage_metadata", f.usage_metadata.take());
    keep("tool_call_id", f.tool_call_id.take());
    keep("artifact", f.artifact.take());
    keep("status", f.status.take());
    if !f.extra.is_empty() {
        *msg.extra_mut() = f.extra;
    }
    Ok(msg)
}

fn tool_calls(value: Value, invalid: &mut Vec<InvalidToolCall>) -> Result<Vec<ToolCall>> {
    let Value::Array(items) = value else {
        return Err(Error::malformed(format!(
            "tool_calls must be a list, got {}",
            short(&value)
        )));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(mut m) = item else {
            return Err(Error::malformed(format!(
                "a tool call must be an object, got {}",
                short(&item)
            )));
        };
        // OpenAI shape: {id, type: "function", function: {name, arguments}}.
        if let Some(function) = m.shift_remove("function") {
            let Value::Object(mut f) = function else {
                return Err(Error::malformed("tool call `function` must be an object"));
            };
            let id = id_like(m.shift_remove("id"), "id")?;
            let name = opt_string(f.shift_remove("name"), "name")?.unwrap_or_default();
            match f.shift_remove("arguments") {
                Some(Value::String(raw)) => match loads_lenient(&raw) {
                    Ok(Value::Object(args)) => out.push(ToolCall {
                        id,
                        name,
                        args,
                        extra: Map::new(),
                    }),
                    Ok(_) | Err(_) => invalid.push(InvalidToolCall {
                        id,
                        name: Some(name),
                        args: Some(raw),
                        error: Some("arguments are not a JSON object".into()),
                        extra: Map::new(),
                    }),
                },
                Some(Value::Object(args)) => out.push(ToolCall {
                    id,
                    name,
                    args,
                    extra: Map::new(),
                }),
                _ => out.push(ToolCall {
                    id,
                    name,
                    args: Map::new(),
                    extra: Map::new(),
                }),
            }
            continue;
        }
        m.shift_remove("type");
        let name = opt_string(m.shift_remove("name"), "name")?
            .ok_or_else(|| Error::malformed("a tool call requires a `name`"))?;
        let args = match m.shift_remove("args") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a,
            Some(other) => {
                return Err(Error::malformed(format!(
                    "tool call args must be an object, got {}",
                    short(&other)
                )));
            }
        };
        let id = id_like(m.shift_remove("id"), "id")?;
        out.push(ToolCall {
            id,
            name,
            args,
            extra: m,
        });
    }
    Ok(out)
}

/// Python's truth value of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// The provider's raw calls (`additional_kwargs.tool_calls`, OpenAI shape) parsed as
/// LangChain's `default_tool_parser` parses them for an AI message given no parsed calls:
/// `None` where the reference's parse stops on an exception it suppresses (anything but a
/// list; an entry that is neither an object nor a text or list without `"function"`; a
/// `function` without a `name` or without text `arguments`), so no call is taken from them.
/// Arguments that are not JSON make an invalid call without an error text; a name, id or
/// argument value the message model refuses (the reference's validation error after the
/// parse) is [`Error::MalformedMessage`]. (Python's parser also takes `NaN` and
/// `Infinity`, which serde does not: such arguments make an invalid call here.)
fn raw_tool_calls(raw: &Value) -> Result<Option<(Vec<ToolCall>, Vec<InvalidToolCall>)>> {
    let Value::Array(items) = raw else {
        return Ok(None);
    };
    let (mut calls, mut invalid) = (Vec::new(), Vec::new());
    for item in items {
        let call = match item {
            Value::Object(m) => match m.get("function") {
                None => continue,
                Some(f) => f,
            },
            // `"function" in item`: a substring or member test, then an index that fails.
            Value::String(s) if !s.contains("function") => continue,
            Value::Array(a) if !a.iter().any(|v| v.as_str() == Some("function")) => continue,
            _ => return Ok(None),
        };
        let Value::Object(function) = call else {
            return Ok(None);
        };
        let (Some(name), Some(Value::String(arguments))) =
            (function.get("name"), function.get("arguments"))
        else {
            return Ok(None);
        };
        let id = match item.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(Error::malformed(format!(
                    "a raw tool call's `id` must be a string, got {}",
                    short(other)
                )));
            }
        };
        match loads_lenient(arguments) {
            Ok(args) => {
                let args = match args {
                    Value::Object(m) => m,
                    other if !truthy(&other) => Map::new(),
                    other => {
                        return Err(Error::malformed(format!(
                            "a raw tool call's arguments must be a JSON object, got {}",
                            short(&other)
                        )));
                    }
                };
                let name = match name {
                    Value::String(s) => s.clone(),
                    other if !truthy(other) => String::new(),
                    other => {
                        return Err(Error::malformed(format!(
                            "a raw tool call's name must be a string, got {}",
                            short(other)
                        )));
                    }
                };
                calls.push(ToolCall {
                    id,
                    name,
                    args,
                    extra: Map::new(),
                });
            }
            Err(_) => invalid.push(InvalidToolCall {
                id,
                name: opt_string(Some(name.clone()), "name")?,
                args: Some(arguments.clone()),
                error: None,
                extra: Map::new(),
            }),
        }
    }
    Ok(Some((calls, invalid)))
}

fn invalid_tool_calls(value: Value) -> Result<Vec<InvalidToolCall>> {
    let Value::Array(items) = value else {
        return Err(Error::malformed(format!(
            "invalid_tool_calls must be a list, got {}",
            short(&value)
        )));
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Object(mut m) = item else {
                return Err(Error::malformed("an invalid tool call must be an object"));
            };
            m.shift_remove("type");
            Ok(InvalidToolCall {
                id: id_like(m.shift_remove("id"), "id")?,
                name: opt_string(m.shift_remove("name"), "name")?,
                args: opt_string(m.shift_remove("args"), "args")?,
                error: opt_string(m.shift_remove("error"), "error")?,
                extra: m,
            })
        })
        .collect()
}

/// Ids accept numbers, which LangChain coerces to strings.
fn id_like(value: Option<Value>, key: &str) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(Error::malformed(format!(
            "`{key}` must be a string, got {}",
            short(&other)
        ))),
    }
}

fn opt_string(value: Option<Value>, key: &str) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(Error::malformed(format!(
            "`{key}` must be a string, got {}",
            short(&other)
        ))),
    }
}

fn object(value: Option<Value>, key: &str) -> Result<Map<String, Value>> {
    match value {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(Error::malformed(format!(
            "`{key}` must be an object, got {}",
            short(&other)
        ))),
    }
}

/// A bounded rendering of a value for error messages.
fn short(value: &Value) -> String {
    let s = value.to_string();
    crate::pytext::take_chars(&s, 80).to_owned()
}

/// Parses a tool call's argument text as the reference does, with Python's
/// `json.loads(text, strict=False)`: raw control characters (below U+0020) inside strings are
/// taken as they are, where strict JSON refuses them; a model that writes a literal line break
/// into an argument string still makes a call. Everything else is strict JSON.
fn loads_lenient(text: &str) -> serde_json::Result<Value> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) if !text.bytes().any(|b| b < 0x20) => Err(e),
        Err(e) => {
            // Escape the control characters inside strings (outside them, JSON allows only
            // its whitespace, which stays as it is), then parse strictly.
            let mut escaped = String::with_capacity(text.len() + 16);
            let (mut in_string, mut backslash) = (false, false);
            for c in text.chars() {
                if in_string {
                    if backslash {
                        backslash = false;
                    } else if c == '\\' {
                        backslash = true;
                    } else if c == '"' {
                        in_string = false;
                    } else if (c as u32) < 0x20 {
                        escaped.push_str(&format!("\\u{:04x}", c as u32));
                        continue;
                    }
                } else if c == '"' {
                    in_string = true;
                }
                escaped.push(c);
            }
            serde_json::from_str(&escaped).map_err(|_| e)
        }
    }
}
