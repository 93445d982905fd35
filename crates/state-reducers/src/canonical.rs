//! A fast path for decoding the messages savers store most: plain human, AI and system
//! messages exactly as [`Message`]'s `Serialize` writes them.
//!
//! A cold read of a long conversation decodes every stored message, and the general path
//! (serde's map visitor, a `Value` per key, then the coercion rules of a message dict) costs
//! about three times what copying the strings out does.
//! Most stored messages are the same few keys in the same order with empty extras, so this
//! module matches that byte layout literally and builds the message directly.
//!
//! The contract is narrow on purpose: [`decode`] returns `Some` only for input in the canonical
//! layout, and then the message equals what `serde_json::from_slice::<Message>` returns for the
//! same bytes; anything else (other keys or key order, non-empty extras, tool calls, whitespace,
//! a malformed string) returns `None`, and the caller decodes with serde, which also reports the
//! errors. Strings with escapes are handed to serde_json's own string parser, so escapes,
//! surrogates and control characters are judged exactly as the general path judges them.

use crate::message::{Content, Message, MessageType};

/// Decodes `bytes` if they are a plain message in the canonical layout
/// (`{"content":"…","additional_kwargs":{},"response_metadata":{},"type":"human|ai|system",
/// "name":null|"…","id":null|"…"}`, plus `"tool_calls":[],"invalid_tool_calls":[],
/// "usage_metadata":null` for an AI message); `None` otherwise.
pub(crate) fn decode(bytes: &[u8]) -> Option<Message> {
    let mut r = Reader { bytes, at: 0 };
    r.literal(b"{\"content\":")?;
    let content = r.string()?;
    r.literal(b",\"additional_kwargs\":{},\"response_metadata\":{},\"type\":\"")?;
    let kind = if r.literal(b"human\"").is_some() {
        MessageType::Human
    } else if r.literal(b"ai\"").is_some() {
        MessageType::Ai
    } else if r.literal(b"system\"").is_some() {
        MessageType::System
    } else {
        return None;
    };
    r.literal(b",\"name\":")?;
    let name = r.string_or_null()?;
    r.literal(b",\"id\":")?;
    let id = r.string_or_null()?;
    if kind == MessageType::Ai {
        r.literal(b",\"tool_calls\":[],\"invalid_tool_calls\":[],\"usage_metadata\":null")?;
    }
    r.literal(b"}")?;
    if r.at != bytes.len() {
        return None;
    }
    let mut m = Message::new(kind, Content::Text(content));
    m.id = id;
    m.name = name;
    Some(m)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    /// Consumes `lit` if the input continues with it.
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        if rest.starts_with(lit) {
            self.at += lit.len();
            Some(())
        } else {
            None
        }
    }

    fn string_or_null(&mut self) -> Option<Option<String>> {
        if self.literal(b"null").is_some() {
            Some(None)
        } else {
            self.string().map(Some)
        }
    }

    /// A JSON string token at the cursor.
    fn string(&mut self) -> Option<String> {
        let start = self.at;
        if self.bytes.get(start) != Some(&b'"') {
            return None;
        }
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            let rest = self.bytes.get(i..)?;
            let k = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[k] == b'"' {
                let end = i + k;
                self.at = end + 1;
                if escaped {
                    // serde_json's own string parser: the same escapes, surrogates and
                    // control-character rules as the general path.
                    return serde_json::from_slice::<String>(&self.bytes[start..=end]).ok();
                }
                let raw = &self.bytes[start + 1..end];
                // JSON forbids raw control characters in strings; the general path rejects
                // them, so this one must not accept them. (Folded, not short-circuited, so the
                // check vectorises.)
                if raw.iter().fold(false, |bad, &b| bad | (b < 0x20)) {
                    return None;
                }
                return std::str::from_utf8(raw).ok().map(str::to_owned);
            }
            // A backslash escapes the next byte (for `\u`, the four hex digits that follow
            // cannot be a quote or a backslash, so scanning on from here is exact).
            escaped = true;
            i += k + 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decode;
    use crate::message::{Message, MessageType};
    use proptest::prelude::*;

    fn general(bytes: &[u8]) -> Option<Message> {
        serde_json::from_slice::<Message>(bytes).ok()
    }

    #[test]
    fn stored_plain_messages_take_the_fast_path() {
        for m in [
            Message::human("hello").with_id("m1"),
            Message::ai("hi there").with_id("m2"),
            Message::system("be brief"),
            Message::human("line one\nline \"two\" \\ \u{1F600} \u{7f}").with_id("m\t3"),
        ] {
            let bytes = serde_json::to_vec(&m).unwrap();
            assert_eq!(
                decode(&bytes),
                Some(m.clone()),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let mut named = Message::human("x");
        named.name = Some("ann".into());
        let bytes = serde_json::to_vec(&named).unwrap();
        assert_eq!(decode(&bytes), Some(named));
    }

    #[test]
    fn anything_else_is_left_to_the_general_path() {
        let mut with_kwargs = Message::ai("x");
        with_kwargs
            .additional_kwargs_mut()
            .insert("k".into(), serde_json::json!(1));
        let others = [
            serde_json::to_vec(&Message::new(MessageType::Tool, "t")).unwrap(),
            serde_json::to_vec(&with_kwargs).unwrap(),
            br#"{"type":"human","content":"reordered"}"#.to_vec(),
            br#"{"content":"x","additional_kwargs":{},"response_metadata":{},"type":"human","name":null,"id":null} "#.to_vec(),
            br#"{"content":"x","additional_kwargs":{},"response_metadata":{},"type":"user","name":null,"id":null}"#.to_vec(),
            br#"{"content":"x","additional_kwargs":{},"response_metadata":{},"type":"human","name":null,"id":7}"#.to_vec(),
            br#"{"content":"x","additional_kwargs":{},"response_metadata":{},"type":"human","name":null,"id":null,"extra":1}"#.to_vec(),
        ];
        for bytes in others {
            assert_eq!(decode(&bytes), None, "{}", String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn strings_the_general_path_rejects_are_rejected() {
        for bad in [
            "{\"content\":\"a\u{1}b\",\"additional_kwargs\":{},\"response_metadata\":{},\"type\":\"human\",\"name\":null,\"id\":null}".as_bytes().to_vec(),
            br#"{"content":"\ud800","additional_kwargs":{},"response_metadata":{},"type":"human","name":null,"id":null}"#.to_vec(),
            br#"{"content":"\q","additional_kwargs":{},"response_metadata":{},"type":"human","name":null,"id":null}"#.to_vec(),
            b"{\"content\":\"\xff\",\"additional_kwargs\":{},\"response_metadata\":{},\"type\":\"human\",\"name\":null,\"id\":null}".to_vec(),
            br#"{"content":"unterminated"#.to_vec(),
            br#"{"content":"ends in a backslash\"#.to_vec(),
        ] {
            assert_eq!(decode(&bad), None, "{}", String::from_utf8_lossy(&bad));
            assert_eq!(general(&bad), None, "{}", String::from_utf8_lossy(&bad));
        }
    }

    fn kind() -> impl Strategy<Value = MessageType> {
        prop_oneof![
            Just(MessageType::Human),
            Just(MessageType::Ai),
            Just(MessageType::System)
        ]
    }

    proptest! {
        /// The fast path returns exactly what the general path returns for every plain message.
        #[test]
        fn agrees_with_the_general_path_on_plain_messages(
            kind in kind(),
            content in any::<String>(),
            id in proptest::option::of(any::<String>()),
            name in proptest::option::of(any::<String>()),
        ) {
            let mut m = Message::new(kind, content.as_str());
            m.id = id;
            m.name = name;
            let bytes = serde_json::to_vec(&m).unwrap();
            prop_assert_eq!(decode(&bytes), Some(m.clone()));
            prop_assert_eq!(general(&bytes), Some(m));
        }

        /// Whatever the input, a message the fast path returns is the general path's message.
        #[test]
        fn never_disagrees_on_damaged_input(
            kind in kind(),
            content in "[a-z\"\\\\\n\u{0}-\u{1f}é😀]{0,12}",
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let m = Message::new(kind, content.as_str()).with_id("id");
            let mut bytes = serde_json::to_vec(&m).unwrap();
            let i = at.index(bytes.len());
            if cut {
                bytes.truncate(i);
            } else {
                bytes[i] = byte;
            }
            if let Some(fast) = decode(&bytes) {
                prop_assert_eq!(Some(fast), general(&bytes));
            }
        }
    }
}
