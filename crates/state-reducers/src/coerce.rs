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
            let role = role.as_str().unwrap_or_default().to_owned();
            let mut map = Map::new();
            map.insert("role".into(), Value::String(role));
            map.insert("content".into(), content);
            message_from_map(map)
        }
        other => Err(Error::malformed(format!(
            "unsupported message-like value {}",
            short(&other)
        ))),
    }
}

/// Coerces a LangChain dict.
pub(crate) fn message_from_map(mut map: Map<String, Value>) -> Result<Message> {
    let role_value = match map.shift_remove("role") {
        Some(r) => r,
        None => map
            .shift_remove("type")
            .ok_or_else(|| Error::malformed("message dict must contain a `type` or `role` key"))?,
    };
    let role = role_value.as_str().ok_or_else(|| {
        Error::malformed(format!("message role must be a string, got {role_value}"))
    })?;
    let (kind, developer) = MessageType::from_role(role).ok_or_else(|| {
        Error::malformed(format!(
            "Unexpected message type: {}. Use one of 'human', 'user', 'ai', 'assistant', 'function', 'tool', 'system', or 'developer'.",
            crate::pytext::repr_str(role)
        ))
    })?;
    // A `type` left beside a `role` must agree with it.
    if let Some(t) = map.shift_remove("type") {
        let agrees = t
            .as_str()
            .and_then(MessageType::from_role)
            .is_some_and(|(k, _)| k == kind);
        if !agrees {
            return Err(Error::malformed(format!(
                "message `type` {t} contradicts its role {role:?}"
            )));
        }
    }
    if !map.contains_key("content") {
        return Err(Error::malformed(
            "message dict must contain a `content` key",
        ));
    }
    let mut msg = Message::new(kind, Content::default());
    msg.content = Content::from_value(map.shift_remove("content").unwrap_or(Value::Null))?;
    msg.id = take_id(&mut map)?;
    msg.name = take_opt_string(&mut map, "name")?;
    let kwargs = take_map(&mut map, "additional_kwargs")?;
    if !kwargs.is_empty() {
        *msg.additional_kwargs_mut() = kwargs;
    }
    let metadata = take_map(&mut map, "response_metadata")?;
    if !metadata.is_empty() {
        *msg.response_metadata_mut() = metadata;
    }
    if developer {
        msg.additional_kwargs_mut()
            .insert("__openai_role__".into(), Value::String("developer".into()));
    }
    // Chunk-only fields do not survive the chunk → message conversion.
    map.shift_remove("tool_call_chunks");
    map.shift_remove("chunk_position");
    match kind {
        MessageType::Ai => {
            let mut invalid = Vec::new();
            let calls = match map.shift_remove("tool_calls") {
                Some(calls) => tool_calls(calls, &mut invalid)?,
                None => Vec::new(),
            };
            if let Some(raw) = map.shift_remove("invalid_tool_calls") {
                invalid.append(&mut invalid_tool_calls(raw)?);
            }
            if !calls.is_empty() {
                *msg.tool_calls_mut() = calls;
            }
            if !invalid.is_empty() {
                *msg.invalid_tool_calls_mut() = invalid;
            }
            let usage = match map.shift_remove("usage_metadata") {
                None | Some(Value::Null) => None,
                Some(v @ Value::Object(_)) => Some(v),
                Some(other) => {
                    return Err(Error::malformed(format!(
                        "usage_metadata must be an object, got {}",
                        short(&other)
                    )));
                }
            };
            if usage.is_some() {
                msg.set_usage_metadata(usage);
            }
        }
        MessageType::Tool => {
            let id = take_id_like(&mut map, "tool_call_id")?;
            msg.set_tool_call_id(id);
            if msg.tool_call_id().is_none() {
                return Err(Error::malformed("tool message requires a `tool_call_id`"));
            }
            match map.shift_remove("artifact") {
                None | Some(Value::Null) => {}
                Some(v) => msg.set_artifact(Some(v)),
            }
            match map.shift_remove("status") {
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
            let role = take_opt_string(&mut map, "role")?;
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
    if !map.is_empty() {
        *msg.extra_mut() = map;
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
            let id = take_id_like(&mut m, "id")?;
            let name = take_opt_string(&mut f, "name")?.unwrap_or_default();
            match f.shift_remove("arguments") {
                Some(Value::String(raw)) => match serde_json::from_str::<Value>(&raw) {
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
        let name = take_opt_string(&mut m, "name")?
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
        let id = take_id_like(&mut m, "id")?;
        out.push(ToolCall {
            id,
            name,
            args,
            extra: m,
        });
    }
    Ok(out)
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
                id: take_id_like(&mut m, "id")?,
                name: take_opt_string(&mut m, "name")?,
                args: take_opt_string(&mut m, "args")?,
                error: take_opt_string(&mut m, "error")?,
                extra: m,
            })
        })
        .collect()
}

/// Message ids accept numbers, which LangChain coerces to strings.
fn take_id(map: &mut Map<String, Value>) -> Result<Option<String>> {
    take_id_like(map, "id")
}

fn take_id_like(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>> {
    match map.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(Error::malformed(format!(
            "`{key}` must be a string, got {}",
            short(&other)
        ))),
    }
}

fn take_opt_string(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>> {
    match map.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(Error::malformed(format!(
            "`{key}` must be a string, got {}",
            short(&other)
        ))),
    }
}

fn take_map(map: &mut Map<String, Value>, key: &str) -> Result<Map<String, Value>> {
    match map.shift_remove(key) {
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
