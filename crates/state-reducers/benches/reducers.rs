//! Throughput of the batch message reducer.
//!
//! - `fold_1000_into_100000`: one step's 1,000 writes folded into a
//!   100,000-message state (the index over the state dominates);
//! - `replay_10000_into_empty`: a 10,000-write replay into an empty state,
//!   the shape of materialising a delta channel from its seed.
//!
//! Throughput counts messages folded (state + written). The target is at
//! least 5 million per second and linear scaling in input size.
#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use antler_state_reducers::{Message, MessageWrite, merge_message_writes_owned};

// serde_json is reached through the crate's own dependency.
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

fn message(i: usize) -> Message {
    Message::human(format!("message body number {i} with a little text")).with_id(format!("m{i}"))
}

/// Writes that append two messages each and, every tenth write, replace one
/// existing message and remove another, like a conversation with edits.
fn writes(count: usize, offset: usize) -> Vec<MessageWrite> {
    (0..count)
        .map(|w| {
            let base = offset + 2 * w;
            let mut ms = vec![message(base), message(base + 1)];
            if w % 10 == 9 && base >= 4 {
                ms.push(Message::ai("edited").with_id(format!("m{}", base - 3)));
                ms.push(Message::remove(format!("m{}", base - 4)));
            }
            MessageWrite::Messages(ms)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("merge_message_writes");
    for &(state_len, write_count) in &[(10_000usize, 100usize), (100_000, 1_000)] {
        let state: Vec<Message> = (0..state_len).map(message).collect();
        let ws = writes(write_count, state_len);
        let folded: usize = ws
            .iter()
            .map(|w| match w {
                MessageWrite::Messages(ms) => ms.len(),
                MessageWrite::Null => 0,
            })
            .sum();
        group.throughput(Throughput::Elements((state_len + folded) as u64));
        group.bench_function(format!("fold_{write_count}_into_{state_len}"), |b| {
            b.iter_batched(
                || (state.clone(), ws.clone()),
                |(s, w)| merge_message_writes_owned(s, w),
                BatchSize::LargeInput,
            );
        });
    }
    for &count in &[1_000usize, 10_000] {
        let ws = writes(count, 0);
        group.throughput(Throughput::Elements(2 * count as u64));
        group.bench_function(format!("replay_{count}_into_empty"), |b| {
            b.iter_batched(
                || ws.clone(),
                |w| merge_message_writes_owned(Vec::new(), w),
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

/// Encoding and decoding the workload's 400-character messages, the read
/// and write path of every stored conversation.
fn serde(c: &mut Criterion) {
    let mut group = c.benchmark_group("message_serde");
    let messages: Vec<Message> = (0..1_000)
        .map(|i| {
            let text: String = format!("turn {i} human:")
                .chars()
                .chain(std::iter::repeat('x'))
                .take(400)
                .collect();
            Message::human(text).with_id(format!("m{i}h"))
        })
        .collect();
    let encoded: Vec<Vec<u8>> = messages
        .iter()
        .map(|m| serde_json::to_vec(m).expect("serialises"))
        .collect();
    group.throughput(Throughput::Elements(messages.len() as u64));
    group.bench_function("encode_1000", |b| {
        b.iter(|| {
            messages
                .iter()
                .map(|m| serde_json::to_vec(m).map(|v| v.len()).unwrap_or(0))
                .sum::<usize>()
        });
    });
    group.bench_function("decode_1000", |b| {
        b.iter(|| {
            encoded
                .iter()
                .filter_map(|bytes| serde_json::from_slice::<Message>(bytes).ok())
                .count()
        });
    });
    // The write-amp workload's shape: alternating human and AI messages (an AI message also
    // carries `tool_calls`, `invalid_tool_calls` and `usage_metadata`), as a cold read decodes them.
    let workload: Vec<Vec<u8>> = (0..4_000)
        .map(|i| {
            let text: String = format!(
                "turn {} {}:",
                i / 2,
                if i % 2 == 0 { "human" } else { "ai" }
            )
            .chars()
            .chain(std::iter::repeat('y'))
            .take(400)
            .collect();
            let m = if i % 2 == 0 {
                Message::human(text)
            } else {
                Message::ai(text)
            };
            serde_json::to_vec(&m.with_id(format!("m{i}"))).expect("serialises")
        })
        .collect();
    group.throughput(Throughput::Elements(workload.len() as u64));
    group.bench_function("decode_workload_4000", |b| {
        b.iter(|| {
            workload
                .iter()
                .filter_map(|bytes| serde_json::from_slice::<Message>(bytes).ok())
                .collect::<Vec<_>>()
        });
    });
    // What savers' readers call: the byte-exact fast path for plain messages, serde otherwise.
    group.bench_function("decode_messages_workload_4000", |b| {
        b.iter(|| antler_state_reducers::decode_messages(&workload).map(|l| l.len()));
    });
    group.throughput(Throughput::Elements(messages.len() as u64));
    // The general path (any JSON value, then coercion), for comparison.
    group.bench_function("decode_1000_via_value", |b| {
        b.iter(|| {
            encoded
                .iter()
                .filter_map(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok())
                .filter_map(|v| Message::from_json(v).ok())
                .count()
        });
    });
    group.finish();
}

criterion_group!(benches, bench, serde);
criterion_main!(benches);
