//! Arbitrary JSON into message coercion, both message reducers and every
//! field reducer: nothing may panic, the batch and pairwise reducers must
//! agree (R22), and a coerced message must survive a JSON round trip.
#![no_main]

use antler_state_reducers as sr;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

struct Counter(usize);

impl sr::IdSource for Counter {
    fn next_id(&mut self) -> String {
        self.0 += 1;
        format!("gen-{}", self.0)
    }
}

fn field<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // Coercion of one message-like, and its round trip; the streaming
    // deserialiser must agree with the Value path.
    let streamed = serde_json::from_slice::<sr::Message>(data);
    match sr::Message::from_json(value.clone()) {
        Ok(m) => {
            let back = sr::Message::from_json(m.to_json()).expect("a serialised message coerces");
            assert_eq!(back, m, "round trip");
            let bytes = serde_json::to_vec(&m).expect("serialises");
            assert_eq!(serde_json::from_slice::<sr::Message>(&bytes).expect("decodes"), m);
            assert_eq!(streamed.expect("the streaming path accepts it too"), m);
        }
        Err(_) => assert!(streamed.is_err(), "the streaming path accepted what coercion rejects"),
    }
    let Value::Array(items) = &value else {
        return;
    };
    // [state, write, write, …]
    if let Some((state, writes)) = items.split_first() {
        let state: Option<Vec<sr::Message>> = match state {
            Value::Array(ms) => ms.iter().cloned().map(sr::Message::from_json).collect::<Result<_, _>>().ok(),
            _ => None,
        };
        let writes: Option<Vec<sr::MessageWrite>> = writes
            .iter()
            .cloned()
            .map(sr::MessageWrite::from_json)
            .collect::<Result<_, _>>()
            .ok();
        if let (Some(state), Some(writes)) = (state, writes) {
            let batch = sr::merge_message_writes_with(state.clone(), writes.clone(), &mut Counter(0));
            let mut ids = Counter(0);
            let mut fold = Ok(state);
            for w in writes {
                fold = fold.and_then(|acc| sr::add_messages_with(acc, w, &mut ids));
            }
            assert_eq!(batch, fold, "batch and pairwise reducers disagree");
        }
    }
    // Field reducers on the first two elements, whatever their shape.
    if let [a, b, ..] = items.as_slice() {
        let _ = sr::merge_sandbox(field(a), field(b));
        let _ = sr::merge_artifacts(field(a), field(b));
        let _ = sr::merge_viewed_images(field(a), field(b));
        let _ = sr::merge_todos(field(a), field(b));
        let _ = sr::merge_goal(field(a), field(b));
        let _ = sr::merge_promoted(field(a), field(b));
        let _ = sr::merge_delegations(field(a), field(b));
        let _ = sr::merge_skill_context(field(a), field(b));
        if let (Some(t), Some(c)) = (a.as_str(), b.as_i64()) {
            let out = sr::bound_head_tail(t, c);
            assert!(out.chars().count() <= t.chars().count());
        }
    }
});
