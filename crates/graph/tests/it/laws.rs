//! Property tests of the super-step laws: the result never depends on task completion order.

use std::time::Duration;

use antler_graph::{RunConfig, State, Update};
use proptest::prelude::*;

use crate::common::{LOG, graph, log, memory};

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// BSP determinism: k parallel nodes finishing in any order (random delays on a paused clock)
    /// reach the reducer in task-path order (node-name order), and a join after them sees all writes.
    /// The nodes are declared and wired in a shuffled order, so name order is neither the
    /// declaration order nor the edge order.
    #[test]
    fn reducer_order_is_task_path_order_whatever_the_completion_order(
        (delays, order) in proptest::collection::vec(0u64..50, 2..7)
            .prop_flat_map(|d| {
                let order: Vec<usize> = (0..d.len()).collect();
                (Just(d), Just(order).prop_shuffle())
            })
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime");
        let names: Vec<String> = (0..delays.len()).map(|i| format!("n{i}")).collect();
        let got = rt.block_on(async {
            let mut g = graph();
            for &i in &order {
                let (name, delay) = (&names[i], &delays[i]);
                let (owned, delay) = (name.clone(), *delay);
                g.add_node(name.as_str(), move |_s: State, _c| {
                    let name = owned.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        Ok(Update::new().set(&LOG, vec![name]))
                    }
                });
                g.add_edge("__start__", name.as_str());
            }
            g.add_join(names.iter().map(String::as_str), "join");
            g.add_node("join", |s: State, _c| async move {
                Ok(Update::new().set(&LOG, log(&[&format!("join saw {}", s.get(&LOG).map_or(0, Vec::len))])))
            });
            g.add_edge("join", "__end__");
            let out = memory(g).invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t")).await.expect("runs");
            out.values.get(&LOG).cloned().unwrap_or_default()
        });
        let mut want = vec!["in".to_owned()];
        want.extend(names.iter().cloned());
        want.push(format!("join saw {}", names.len() + 1));
        prop_assert_eq!(got, want);
    }
}

/// One operation on the message list of the delta-against-full law below.
#[derive(Clone, Debug)]
enum MessageOp {
    /// Append (or replace, when the id exists) message `m{0}` with text `t{1}`.
    Put(u8, u8),
    /// Remove the message at this position modulo the list's length (nothing when empty).
    Remove(u8),
    /// Replace the whole list with messages `m{k}`.
    Overwrite(Vec<u8>),
    /// The same as `Put`, through `update_state` instead of a run.
    UpdatePut(u8, u8),
    /// The same as `Put`, as a run forked from the history entry at this position (modulo the
    /// history's length, newest first).
    ForkPut(u8, u8, u8),
}

fn message_op() -> impl Strategy<Value = MessageOp> {
    prop_oneof![
        4 => (0u8..12, 0u8..4).prop_map(|(k, t)| MessageOp::Put(k, t)),
        2 => any::<u8>().prop_map(MessageOp::Remove),
        1 => proptest::collection::vec(0u8..12, 0..4).prop_map(MessageOp::Overwrite),
        1 => (0u8..12, 0u8..4).prop_map(|(k, t)| MessageOp::UpdatePut(k, t)),
        1 => (any::<u8>(), 0u8..12, 0u8..4).prop_map(|(b, k, t)| MessageOp::ForkPut(b, k, t)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The delta invariant: the same operations give the same message list in delta mode (any
    /// snapshot frequency, on the in-process checkpointer and through a saver) as in full mode,
    /// live and in a cold read of every store after every operation.
    #[test]
    fn delta_mode_reads_what_full_mode_reads(
        ops in proptest::collection::vec(message_op(), 1..14),
        frequency in 1u32..4,
    ) {
        use std::sync::Arc;
        use antler_graph::{ChannelSpec, Checkpointer, Key, MemoryCheckpointer, SaverCheckpointer, StateGraph};
        use antler_state_reducers::Message;
        const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");
        let chat = |delta: bool| {
            let mut g = StateGraph::new();
            let spec = if delta { ChannelSpec::messages_delta(frequency) } else { ChannelSpec::messages() };
            g.channel(&MESSAGES, spec).expect("declared once");
            g.add_node("noop", |_s: State, _c| async { Ok(Update::new()) });
            g.add_edge("__start__", "noop").add_edge("noop", "__end__");
            g
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let saver = antler_checkpoint::MemorySaver::new(antler_checkpoint::StoreConfig::delta(
                antler_checkpoint::SnapshotFrequency::new(frequency).expect("positive"),
            ));
            let stores: Vec<(bool, Arc<dyn Checkpointer>)> = vec![
                (false, Arc::new(MemoryCheckpointer::new())),
                (true, Arc::new(MemoryCheckpointer::new())),
                (true, Arc::new(SaverCheckpointer::new(Arc::new(saver)))),
            ];
            let graphs: Vec<_> = stores
                .iter()
                .map(|(delta, store)| chat(*delta).compile().expect("valid").with_checkpointer(store.clone()))
                .collect();
            let cold: Vec<_> = stores
                .iter()
                .map(|(delta, store)| chat(*delta).compile().expect("valid").with_checkpointer(store.clone()).with_hot_cache(false))
                .collect();
            let cfg = RunConfig::new("t");
            let shape = |l: Option<&Vec<Message>>| -> Vec<(Option<String>, String)> {
                l.map(|l| l.iter().map(|m| (m.id.clone(), m.content.text())).collect()).unwrap_or_default()
            };
            let mut current: Vec<(Option<String>, String)> = Vec::new();
            for op in &ops {
                let put = |k: u8, t: u8| Message::human(format!("t{t}")).with_id(format!("m{k}"));
                let (update, as_state, back) = match op {
                    MessageOp::Put(k, t) => (Update::new().set(&MESSAGES, vec![put(*k, *t)]), false, None),
                    MessageOp::UpdatePut(k, t) => (Update::new().set(&MESSAGES, vec![put(*k, *t)]), true, None),
                    MessageOp::ForkPut(b, k, t) => (Update::new().set(&MESSAGES, vec![put(*k, *t)]), false, Some(*b)),
                    MessageOp::Remove(i) => {
                        if current.is_empty() { continue; }
                        let id = current[usize::from(*i) % current.len()].0.clone().expect("every message has an id");
                        (Update::new().set(&MESSAGES, vec![Message::remove(id)]), false, None)
                    }
                    MessageOp::Overwrite(ks) => {
                        let list: Vec<Message> = ks.iter().map(|k| put(*k, 9)).collect();
                        (Update::new().overwrite(&MESSAGES, list), false, None)
                    }
                };
                let mut results = Vec::new();
                for g in &graphs {
                    let values = if as_state {
                        g.update_state(&cfg, update.clone(), Some("noop".into())).await.expect("updates");
                        g.get_state(&cfg).await.expect("reads").expect("a head").values
                    } else if let Some(b) = back
                        && let history = g.get_state_history(&cfg).await.expect("reads")
                        && !history.is_empty()
                    {
                        // The same logical checkpoint in every store: the same history position.
                        let at = &history[usize::from(b) % history.len()];
                        let forked = cfg.clone().with_checkpoint(at.checkpoint_id.clone());
                        g.invoke(update.clone(), &forked).await.expect("runs").values
                    } else {
                        g.invoke(update.clone(), &cfg).await.expect("runs").values
                    };
                    results.push(shape(values.get(&MESSAGES)));
                }
                for g in &cold {
                    let snap = g.get_state(&cfg).await.expect("reads").expect("a head");
                    results.push(shape(snap.values.get(&MESSAGES)));
                }
                for r in &results[1..] {
                    assert_eq!(r, &results[0], "after {op:?} in {ops:?} (F = {frequency})");
                }
                current = results[0].clone();
            }
        });
    }
}
