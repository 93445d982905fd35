//! Delta channels in the runtime (runtime-spec §5.3–§5.4, §10 rules 5–7, 11).

use std::sync::Arc;

use antler_graph::{
    ChannelSpec, Input, Key, MemoryCheckpointer, RunConfig, State, StateGraph, Update,
};
use antler_state_reducers::{Message, MessageType};

use crate::common::Recording;

const MESSAGES: Key<Vec<Message>> = Key::from_static("messages");

fn ai(id: Option<&str>, text: &str) -> Message {
    let mut m = Message::new(MessageType::Ai, text);
    m.id = id.map(str::to_owned);
    m
}

fn chat(frequency: u32, with_ids: bool) -> StateGraph {
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(frequency))
        .expect("declared once");
    g.add_node("reply", move |s: State, _c| async move {
        let n = s.get(&MESSAGES).map_or(0, Vec::len);
        let id = with_ids.then(|| format!("ai-{n}"));
        Ok(Update::new().set(&MESSAGES, vec![ai(id.as_deref(), &format!("reply {n}"))]))
    });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    g
}

/// The in-process checkpointer, or an in-memory SQLite saver in delta mode with snapshot
/// frequency `frequency` through the saver adapter.
async fn delta_store(sqlite: bool, frequency: u32) -> Arc<dyn antler_graph::Checkpointer> {
    if sqlite {
        let mode = antler_checkpoint::StoreConfig::delta(
            antler_checkpoint::SnapshotFrequency::new(frequency).expect("a valid frequency"),
        );
        let saver = antler_checkpoint::SqliteSaver::open_in_memory(mode)
            .await
            .expect("SQLite opens");
        Arc::new(antler_graph::SaverCheckpointer::new(Arc::new(saver)))
    } else {
        Arc::new(MemoryCheckpointer::new())
    }
}

fn human(i: usize) -> Update {
    let mut m = Message::new(MessageType::Human, format!("hi {i}"));
    m.id = Some(format!("h-{i}"));
    Update::new().set(&MESSAGES, vec![m])
}

/// A put's `messages` counters as `(updates,supersteps)` (`-` when zero), and ` snapshot` when
/// it stored the value.
fn counters_of(r: &antler_graph::CheckpointRecord) -> String {
    let c = r
        .counters
        .get("messages")
        .map_or("-".to_owned(), |(u, s)| format!("({u},{s})"));
    let stored = r.values.contains_key("messages") || r.encoded_lists.contains_key("messages");
    format!("{c}{}", if stored { " snapshot" } else { "" })
}

/// Every put `store` recorded, as its source and [`counters_of`].
fn puts_with_counters(store: &Recording) -> Vec<String> {
    store
        .puts()
        .iter()
        .map(|r| format!("{} {}", r.source.as_str(), counters_of(r)))
        .collect()
}

/// Rule 6: counters advance on every checkpoint (input included), updates only when the channel
/// moved; they ride in metadata across invokes and reset on a snapshot, which lands every F updates.
#[tokio::test]
async fn rule_06_counters_in_metadata_and_snapshot_cadence() {
    let store = Arc::new(Recording::default());
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(3))
        .unwrap();
    g.add_node("reply", |_s: State, _c| async {
        Ok(Update::new().set(&MESSAGES, vec![ai(Some("x"), "r")]))
    });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    const OTHER: Key<i64> = Key::from_static("other");
    g.channel(&OTHER, ChannelSpec::last_value()).unwrap();
    let graph = g
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let cfg = RunConfig::new("t");
    for i in 0..3 {
        graph
            .invoke(Update::new().set(&OTHER, i), &cfg)
            .await
            .unwrap();
    }
    let got = puts_with_counters(&store);
    assert_eq!(
        got,
        vec![
            "input (0,1)",
            "loop (0,2)",
            "loop (1,3)",
            "input (1,4)",
            "loop (1,5)",
            "loop (2,6)",
            "input (2,7)",
            "loop (2,8)",
            "loop - snapshot"
        ]
    );
    let snap = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        snap.values.get(&MESSAGES).map(Vec::len),
        Some(1),
        "replace-by-id across the walk"
    );
}

/// Rule 6, exit durability: the final save must not double count. A run under exit
/// durability stores only its final checkpoint, which snapshots the delta channel and so
/// carries no counters; the steps it did not store are counted nowhere, and the next run (in
/// sync durability) counts from that snapshot: its counters are those of a run that follows a
/// snapshot, not ones that add the exit run's steps a second time.
#[tokio::test]
async fn rule_06_exit_durability_final_save_does_not_double_count() {
    let store = Arc::new(Recording::default());
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let exit = RunConfig::new("t").with_durability(antler_graph::Durability::Exit);
    for i in 0..2 {
        graph.invoke(human(i), &exit).await.unwrap();
    }
    let sync = RunConfig::new("t");
    graph.invoke(human(2), &sync).await.unwrap();
    let got = puts_with_counters(&store);
    assert_eq!(
        got,
        vec![
            "loop - snapshot",
            "loop - snapshot",
            "input (0,1)",
            "loop (1,2)",
            "loop (2,3)"
        ]
    );
    let snap = graph.get_state(&sync).await.unwrap().unwrap();
    assert_eq!(snap.values.get(&MESSAGES).map(Vec::len), Some(6));
}

/// Rule 5 (delta part) and the walk: an Overwrite forces a snapshot, so replay never crosses it;
/// cold reads (history walk) equal the live state after every turn.
#[tokio::test]
async fn rule_05_overwrite_forces_snapshot_and_cold_reads_equal_live_state() {
    let store = Arc::new(Recording::default());
    let graph = chat(4, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let mut live = Vec::new();
    for i in 0..5 {
        let out = graph.invoke(human(i), &cfg).await.unwrap();
        live.push(out.values.get(&MESSAGES).cloned().unwrap_or_default());
        let cold = chat(4, true)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone());
        let cold_state = cold.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(
            cold_state.values.get(&MESSAGES),
            live.last(),
            "turn {i}: walk == live"
        );
    }
    assert_eq!(live[4].len(), 10);
    graph
        .update_state(
            &cfg,
            Update::new().overwrite(&MESSAGES, vec![ai(Some("o"), "only")]),
            Some("reply".into()),
        )
        .await
        .unwrap();
    let last = store.puts().pop().unwrap();
    assert!(
        last.values.contains_key("messages"),
        "an Overwrite (update_state) snapshots"
    );
    // The update checkpoint triggers `reply` (as_node's edge goes to __end__: nothing runs).
    let cold = chat(4, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let state = cold.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        state.values.get(&MESSAGES).map(Vec::len),
        Some(1),
        "replay never crosses the Overwrite"
    );
    let out = graph.invoke(human(9), &cfg).await.unwrap();
    assert_eq!(out.values.get(&MESSAGES).map(Vec::len), Some(3));
}

/// Rule 5 from a node: an Overwrite written by a task (beside a sibling's append in the same
/// step) forces a snapshot at the step's checkpoint, so the walk never replays that step's writes
/// (where the Overwrite would become the base and the sibling's write, which the live channel
/// dropped, would come back).
#[tokio::test]
async fn rule_05_a_nodes_overwrite_beside_a_siblings_append_forces_a_snapshot() {
    let store = Arc::new(Recording::default());
    let build = || {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(100))
            .unwrap();
        g.add_node("a", |_s: State, _c| async {
            Ok(Update::new().overwrite(&MESSAGES, vec![ai(Some("x"), "only")]))
        });
        g.add_node("b", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(Some("y"), "dropped")]))
        });
        g.add_edge("__start__", "a")
            .add_edge("__start__", "b")
            .add_edge("a", "__end__")
            .add_edge("b", "__end__");
        g.compile().unwrap()
    };
    let graph = build().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let out = graph.invoke(human(0), &cfg).await.unwrap();
    let live = out.values.get(&MESSAGES).cloned().unwrap();
    assert_eq!(
        live,
        vec![ai(Some("x"), "only")],
        "the step's other write is dropped"
    );
    let last = store.puts().pop().unwrap();
    assert!(
        last.values.contains_key("messages") || last.encoded_lists.contains_key("messages"),
        "the overwrite step's checkpoint snapshots"
    );
    let cold = build()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let state = cold.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(state.values.get(&MESSAGES), Some(&live), "cold == live");
}

/// Rule 6 at a fork: the fork checkpoint is saved before any step ran, so it counts a superstep
/// but no update, although the checkpoint it replays was saved by a step that moved `messages`.
/// The forked checkpoint is a finished run's last: a fork of one whose step is unfinished
/// snapshots instead (`a_late_resume_of_an_older_checkpoint_does_not_leak_into_its_children`).
#[tokio::test]
async fn rule_06_a_fork_counts_a_superstep_but_no_update() {
    let store = Arc::new(Recording::default());
    let graph = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    graph.invoke(human(0), &cfg).await.unwrap();
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    let counters = |source: antler_graph::Source| {
        store
            .puts()
            .iter()
            .rev()
            .find(|r| r.source == source)
            .and_then(|r| r.counters.get("messages").copied())
    };
    // Input (0,1), `__start__` wrote the human message (1,2), `reply` its answer (2,3).
    assert_eq!(counters(antler_graph::Source::Loop), Some((2, 3)));
    graph
        .invoke(
            Input::Continue,
            &cfg.clone().with_checkpoint(head.checkpoint_id.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        counters(antler_graph::Source::Fork),
        Some((2, 4)),
        "the fork moved no version: one more superstep, no update"
    );
}

/// Rule 7: a snapshot-only version bump is stored but neither re-triggers nor re-fires `interrupt_before`.
///
/// A replay of a checkpoint whose step left a write to `messages` pending re-runs that step, so
/// the fork checkpoint snapshots `messages` (the walk must not replay the old write) without the
/// channel moving: a bump, after the replay marked every version as seen by the breakpoints.
#[tokio::test]
async fn rule_07_snapshot_only_bump_does_not_refire_breakpoints() {
    let store = Arc::new(Recording::default());
    let mut g = chat(100, true);
    g.add_node("ask", |_s: State, ctx: antler_graph::Context| async move {
        ctx.interrupt(serde_json::json!("ok?"))?;
        Ok(Update::new())
    });
    g.add_edge("__start__", "ask").add_edge("ask", "__end__");
    g.interrupt_before(["reply"]);
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let out = graph.invoke(human(0), &cfg).await.unwrap();
    assert!(out.paused, "stopped before `reply`");
    // Past the breakpoint: `reply` writes, `ask` interrupts; both stay pending on the head.
    let out = graph.invoke(Input::Continue, &cfg).await.unwrap();
    assert_eq!(out.interrupts.len(), 1);
    let head = graph.get_state(&cfg).await.unwrap().unwrap();
    let replayed = store.puts().len();
    let out = graph
        .invoke(
            Input::Continue,
            &cfg.clone().with_checkpoint(head.checkpoint_id.clone()),
        )
        .await
        .unwrap();
    let puts = store.puts();
    let fork = puts[replayed..]
        .iter()
        .find(|r| r.source == antler_graph::Source::Fork)
        .unwrap();
    let bumps = fork
        .versions_seen
        .get("__snapshot_bumps__")
        .expect("bump recorded");
    assert_eq!(bumps.get("messages"), fork.versions.get("messages"));
    assert!(
        fork.values.contains_key("messages"),
        "the snapshot is stored"
    );
    // The bump did not re-fire `interrupt_before(["reply"])`: the replayed step ran, and `ask`
    // stopped on its interrupt again.
    assert_eq!(out.interrupts.len(), 1, "{out:?}");
    let after = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        after.checkpoint_id, fork.id,
        "the replayed step is still pending"
    );
    assert_eq!(after.interrupts().len(), 1);
    // `reply` finished: the head shows its result, and only `ask` is next; the checkpoint
    // stores the step's start (its step waits on `ask`).
    assert_eq!(after.values.get(&MESSAGES).map(Vec::len), Some(2));
    assert_eq!(
        after.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["ask"]
    );
    let stored = graph
        .get_state(&cfg.clone().with_checkpoint(after.checkpoint_id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.values.get(&MESSAGES).map(Vec::len),
        Some(1),
        "`reply` has not been applied to the checkpoint: its step waits on `ask`"
    );
}

/// Rule 11: message ids are assigned before delta writes are persisted, so a cold read rebuilds the same list.
#[tokio::test]
async fn rule_11_message_ids_assigned_before_persisting_delta_writes() {
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = chat(100, false)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let out = graph.invoke(human(0), &cfg).await.unwrap();
    let live = out.values.get(&MESSAGES).cloned().unwrap();
    assert!(live.iter().all(|m| m.id.is_some()));
    let cold = chat(100, false)
        .compile()
        .unwrap()
        .with_checkpointer(store)
        .with_hot_cache(false);
    let rebuilt = cold.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(rebuilt.values.get(&MESSAGES), Some(&live));
}

/// The same graph in full and delta mode gives the same states, and delta stores no full list per step.
#[tokio::test]
async fn full_and_delta_modes_agree_and_delta_stores_less() {
    let full_store = Arc::new(Recording::default());
    let delta_store = Arc::new(Recording::default());
    let mut full = StateGraph::new();
    full.channel(&MESSAGES, ChannelSpec::messages()).unwrap();
    full.add_node("reply", |s: State, _c| async move {
        let n = s.get(&MESSAGES).map_or(0, Vec::len);
        Ok(Update::new().set(
            &MESSAGES,
            vec![ai(Some(&format!("ai-{n}")), &format!("reply {n}"))],
        ))
    });
    full.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    let full = full
        .compile()
        .unwrap()
        .with_checkpointer(full_store.clone());
    let delta = chat(5, true)
        .compile()
        .unwrap()
        .with_checkpointer(delta_store.clone());
    let cfg = RunConfig::new("t");
    for i in 0..12 {
        let a = full.invoke(human(i), &cfg).await.unwrap();
        let b = delta.invoke(human(i), &cfg).await.unwrap();
        assert_eq!(a.values.get(&MESSAGES), b.values.get(&MESSAGES));
    }
    let stored = |r: &Recording| {
        r.puts()
            .iter()
            .filter(|p| p.values.contains_key("messages"))
            .count()
    };
    assert_eq!(
        stored(&full_store),
        24,
        "full mode stores the list at every checkpoint where it moved"
    );
    assert!(
        stored(&delta_store) <= 5,
        "delta mode stores a snapshot every 5 updates ({})",
        stored(&delta_store)
    );
}

/// Rule 12, the fresh-thread half: a write to a delta channel that no step of a stored
/// checkpoint made has no checkpoint to hang its write on. `update_state` on a fresh thread
/// stores a checkpoint that snapshots the channel it wrote (runtime-spec §5.4), so a cold read
/// finds the value without a walk; a graph's input goes to `__start__` and reaches the channel
/// as an ordinary task write, stored on the input checkpoint, which therefore snapshots nothing.
#[tokio::test]
async fn rule_12_a_fresh_thread_snapshots_what_update_state_wrote() {
    let store = Arc::new(Recording::default());
    let graph = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let updated = RunConfig::new("updated");
    graph.update_state(&updated, human(0), None).await.unwrap();
    let invoked = RunConfig::new("invoked");
    graph.invoke(human(0), &invoked).await.unwrap();
    let got = puts_with_counters(&store);
    assert_eq!(
        got,
        vec![
            "update - snapshot",
            "input (0,1)",
            "loop (1,2)",
            "loop (2,3)"
        ]
    );
    let cold = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store)
        .with_hot_cache(false);
    let state = cold.get_state(&updated).await.unwrap().unwrap();
    assert_eq!(state.values.get(&MESSAGES).map(Vec::len), Some(1));
}

/// Rule 12 (graph side): a forked branch never replays the writes of its sibling branch; cold reads
/// (history walk) of both branch heads equal what the live runs produced.
#[tokio::test]
async fn rule_12_forked_branches_replay_only_their_own_writes() {
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let mut heads = Vec::new();
    for i in 0..3 {
        let out = graph.invoke(human(i), &cfg).await.unwrap();
        heads.push((
            out.checkpoint_id.clone().unwrap(),
            out.values.get(&MESSAGES).cloned().unwrap(),
        ));
    }
    // Fork from the head of turn 1 with new input, and replay the head of turn 0.
    let fork = graph
        .invoke(human(7), &cfg.clone().with_checkpoint(heads[0].0.clone()))
        .await
        .unwrap();
    let fork_msgs = fork.values.get(&MESSAGES).cloned().unwrap();
    assert_eq!(
        fork_msgs.len(),
        4,
        "turn 0 (2 messages) + the forked turn (2)"
    );
    assert!(
        fork_msgs.iter().all(|m| m.id.as_deref() != Some("h-1")),
        "no message of the sibling branch"
    );
    let cold = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store)
        .with_hot_cache(false);
    let head = cold.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(head.values.get(&MESSAGES), Some(&fork_msgs));
    let old = cold
        .get_state(&cfg.clone().with_checkpoint(heads[2].0.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        old.values.get(&MESSAGES),
        Some(&heads[2].1),
        "the original branch still rebuilds"
    );
}

fn rec(
    id: &str,
    parent: Option<&str>,
    version: u64,
    value: Option<serde_json::Value>,
) -> antler_graph::CheckpointRecord {
    antler_graph::CheckpointRecord {
        id: antler_graph::CheckpointId::new(id),
        parent: parent.map(antler_graph::CheckpointId::new),
        step: 0,
        source: antler_graph::Source::Loop,
        values: value.into_iter().map(|v| ("ch".to_owned(), v)).collect(),
        versions: [("ch".to_owned(), version)].into(),
        versions_seen: Default::default(),
        updated_channels: None,
        new_versions: ["ch".to_owned()].into(),
        counters: Default::default(),
        encoded_lists: Default::default(),
        run_id: None,
        metadata: Default::default(),
        parents: Default::default(),
    }
}

/// Rule 8 / rule 1 (walk contract of the in-process store): start at the target's parent (its own
/// writes excluded), follow parent pointers (not id order), collect each ancestor's writes, stop at
/// the first ancestor with a stored value (its own writes included), return writes oldest first.
#[tokio::test]
async fn rule_08_history_walk_follows_parents_and_includes_the_seed_ancestors_writes() {
    use antler_graph::{CheckpointId, Checkpointer, Scope, TaskId};
    use serde_json::json;
    let store = MemoryCheckpointer::new();
    let scope = Scope::root("t");
    // a (value) ← b (value) ← c ← d (target); a sibling branch b ← cc, whose id sorts between
    // c and d, stores a value and carries writes: a walk by id order would stop there.
    store
        .put(&scope, rec("a", None, 1, Some(json!(["seed-a"]))))
        .await
        .unwrap();
    store
        .put(&scope, rec("b", Some("a"), 2, Some(json!(["seed-b"]))))
        .await
        .unwrap();
    store
        .put(&scope, rec("c", Some("b"), 3, None))
        .await
        .unwrap();
    store
        .put(&scope, rec("cc", Some("b"), 4, Some(json!(["sibling"]))))
        .await
        .unwrap();
    store
        .put(&scope, rec("d", Some("c"), 5, None))
        .await
        .unwrap();
    for (cp, v) in [
        ("a", "w-a"),
        ("b", "w-b"),
        ("c", "w-c"),
        ("cc", "w-cc"),
        ("d", "w-d"),
    ] {
        store
            .put_writes(
                &scope,
                &CheckpointId::new(cp),
                &TaskId::new("task"),
                "~p",
                vec![("ch".to_owned(), json!(v))],
            )
            .await
            .unwrap();
    }
    let h = store
        .delta_history(&scope, &CheckpointId::new("d"), &["ch".to_owned()])
        .await
        .unwrap();
    let h = &h["ch"];
    // The nearest stored value on the path is the seed; its own writes and those below it
    // follow, oldest first; the target's own writes are not part of its history.
    assert_eq!(h.seed, Some(json!(["seed-b"])));
    assert_eq!(h.writes, vec![json!("w-b"), json!("w-c")]);
}

/// The in-process store's walk fails closed: a walk from a checkpoint it does not hold, through
/// a parent it does not hold, or around a loop of parent pointers is an error, never the
/// history up to the gap (which would materialise a shorter list without a sign).
#[tokio::test]
async fn the_in_process_walk_fails_on_a_missing_checkpoint_a_missing_parent_or_a_cycle() {
    use antler_graph::{BrokenHistory, CheckpointId, Checkpointer, ErrorKind, Scope};
    use serde_json::json;
    let store = MemoryCheckpointer::new();
    let scope = Scope::root("t");
    let walk = |id: &'static str| {
        let store = &store;
        let scope = &scope;
        async move {
            store
                .delta_history(scope, &CheckpointId::new(id), &["ch".to_owned()])
                .await
        }
    };
    let unknown = walk("a").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound, "{unknown}");
    // "b"'s parent "gone" was never stored; "a" holds the seed beyond it.
    store
        .put(&scope, rec("a", None, 1, Some(json!(["seed"]))))
        .await
        .unwrap();
    store
        .put(&scope, rec("b", Some("gone"), 2, None))
        .await
        .unwrap();
    store
        .put(&scope, rec("c", Some("b"), 3, None))
        .await
        .unwrap();
    assert_eq!(walk("zz").await.unwrap_err().kind(), ErrorKind::NotFound);
    let missing = walk("c").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Storage);
    let source = std::error::Error::source(&missing)
        .and_then(|e| e.downcast_ref::<BrokenHistory>())
        .expect("a BrokenHistory source");
    assert_eq!(source.checkpoint, "b", "{missing}");
    assert!(
        missing.to_string().contains("parent is not stored"),
        "{missing}"
    );
    // A loop: "x" → "y" → "x".
    store
        .put(&scope, rec("x", Some("y"), 4, None))
        .await
        .unwrap();
    store
        .put(&scope, rec("y", Some("x"), 5, None))
        .await
        .unwrap();
    let cycle = walk("x").await.unwrap_err();
    assert_eq!(cycle.kind(), ErrorKind::Storage);
    assert!(cycle.to_string().contains("cycle"), "{cycle}");
    // The intact part still walks.
    store
        .put(&scope, rec("d", Some("a"), 6, None))
        .await
        .unwrap();
    let h = walk("d").await.unwrap();
    assert_eq!(h["ch"].seed, Some(json!(["seed"])));
}

/// The walk for a channel ends, with no seed, at an ancestor without a version of it (the
/// channel was empty there), as in `antler-checkpoint`'s walk: an older write that was never
/// applied is not replayed.
#[tokio::test]
async fn the_walk_ends_at_an_ancestor_without_the_channel() {
    use antler_graph::{CheckpointId, Checkpointer, Scope, TaskId};
    use serde_json::json;
    let store = MemoryCheckpointer::new();
    let scope = Scope::root("t");
    let mut empty = rec("b", Some("a"), 0, None);
    empty.versions.clear();
    empty.new_versions.clear();
    store.put(&scope, rec("a", None, 1, None)).await.unwrap();
    store.put(&scope, empty).await.unwrap();
    store
        .put(&scope, rec("c", Some("b"), 2, None))
        .await
        .unwrap();
    for (cp, v) in [("a", "never applied"), ("b", "w-b")] {
        store
            .put_writes(
                &scope,
                &CheckpointId::new(cp),
                &TaskId::new("task"),
                "~p",
                vec![("ch".to_owned(), json!(v))],
            )
            .await
            .unwrap();
    }
    let h = store
        .delta_history(&scope, &CheckpointId::new("c"), &["ch".to_owned()])
        .await
        .unwrap();
    assert_eq!(h["ch"].seed, None);
    assert_eq!(h["ch"].writes, vec![json!("w-b")]);
}

/// Exit durability with a delta channel: only the final checkpoint is stored, and it snapshots the
/// channel, so a cold read (no history to replay from the skipped steps) equals the live state.
#[tokio::test]
async fn exit_durability_snapshots_delta_channels_at_the_final_checkpoint() {
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t").with_durability(antler_graph::Durability::Exit);
    let mut live = None;
    for i in 0..3 {
        live = graph
            .invoke(human(i), &cfg)
            .await
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned();
    }
    assert_eq!(live.as_ref().map(Vec::len), Some(6));
    let cold = chat(100, true)
        .compile()
        .unwrap()
        .with_checkpointer(store)
        .with_hot_cache(false);
    assert_eq!(
        cold.get_state(&cfg)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES),
        live.as_ref()
    );
    assert_eq!(
        cold.get_state_history(&cfg).await.unwrap().len(),
        3,
        "one checkpoint per invoke"
    );
}

/// Records stored relative to their parent (the `SaverCheckpointer`'s compact form) read back
/// exactly: a fresh adapter (no cached maps) returns the same tuples as the one that wrote them,
/// for every checkpoint of a thread with forks and an `update_state`, and no relative record is
/// more than 7 records away from a full one.
#[tokio::test]
async fn relative_records_read_back_identically_from_a_cold_adapter() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, RELATIVE_RECORD_V, SaverCheckpointer, Scope};

    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let warm = Arc::new(SaverCheckpointer::new(saver.clone()));
    let (graph, _) = forked_thread(warm.clone(), 12).await;
    let cfg = RunConfig::new("t");
    graph.update_state(&cfg, human(60), None).await.unwrap();
    graph.invoke(human(61), &cfg).await.unwrap();

    let scope = Scope::root("t");
    let want = warm.list(&scope).await.unwrap();
    let cold = SaverCheckpointer::new(saver.clone());
    assert_eq!(cold.list(&scope).await.unwrap(), want);
    for t in &want {
        let id = Some(&t.checkpoint.id);
        let fresh = SaverCheckpointer::new(saver.clone());
        assert_eq!(fresh.get_tuple(&scope, id).await.unwrap().as_ref(), Some(t));
        assert_eq!(warm.get_tuple(&scope, id).await.unwrap().as_ref(), Some(t));
        let head = fresh.head(&scope, id).await.unwrap().unwrap();
        assert_eq!(head.checkpoint.versions, t.checkpoint.versions);
        assert_eq!(head.checkpoint.versions_seen, t.checkpoint.versions_seen);
        assert_eq!(head.pending_writes, t.pending_writes);
    }
    // The stored form: relative records, each within 7 records of a full one on its parent path.
    let raws = saver
        .list(&cp::ListQuery {
            thread_id: Some(cp::ThreadId::new("t")),
            ..cp::ListQuery::default()
        })
        .await
        .unwrap();
    let by_id: std::collections::HashMap<_, _> =
        raws.iter().map(|t| (t.checkpoint.id, t)).collect();
    let relative = raws
        .iter()
        .filter(|t| t.checkpoint.v == RELATIVE_RECORD_V)
        .count();
    assert!(relative * 2 > raws.len(), "{relative} of {}", raws.len());
    for t in &raws {
        let mut cur = t;
        let mut run = 0;
        while cur.checkpoint.v == RELATIVE_RECORD_V {
            run += 1;
            let parent = cur
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id)
                .unwrap();
            cur = by_id[&parent];
        }
        assert!(run <= 7, "{run} relative records in a row");
    }
    // A cold graph rebuilds the same state as the warm one.
    let cold_graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(saver)))
        .with_hot_cache(false);
    assert_eq!(
        cold_graph
            .get_state(&cfg)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES),
        graph
            .get_state(&cfg)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
    );
}

/// A checkpointer that forwards to another, changing one behaviour for a test.
struct Wrapped<C> {
    inner: C,
    /// Takes no encoded lists (so snapshots arrive as JSON) and checks none is sent.
    json_only: bool,
    /// History pages name a checkpoint that is gone by the time it is read (another process
    /// pruned it between the two calls).
    pruned_meanwhile: bool,
    /// `delta_history` calls so far.
    walks: std::sync::atomic::AtomicUsize,
}

impl<C> Wrapped<C> {
    fn json_only(inner: C) -> Self {
        Self {
            inner,
            json_only: true,
            pruned_meanwhile: false,
            walks: Default::default(),
        }
    }

    fn pruned_meanwhile(inner: C) -> Self {
        Self {
            inner,
            json_only: false,
            pruned_meanwhile: true,
            walks: Default::default(),
        }
    }

    /// Forwards everything and counts history walks.
    fn counting(inner: C) -> Self {
        Self {
            inner,
            json_only: false,
            pruned_meanwhile: false,
            walks: Default::default(),
        }
    }

    /// `delta_history` calls since the last call of this method.
    fn take_walks(&self) -> usize {
        self.walks.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl<C: antler_graph::Checkpointer> antler_graph::Checkpointer for Wrapped<C> {
    async fn get_tuple(
        &self,
        s: &antler_graph::Scope,
        id: Option<&antler_graph::CheckpointId>,
    ) -> antler_graph::Result<Option<antler_graph::CheckpointTuple>> {
        self.inner.get_tuple(s, id).await
    }
    fn accepts_encoded_lists(&self) -> bool {
        !self.json_only && self.inner.accepts_encoded_lists()
    }
    async fn list(
        &self,
        s: &antler_graph::Scope,
    ) -> antler_graph::Result<Vec<antler_graph::CheckpointTuple>> {
        self.inner.list(s).await
    }
    async fn list_ids(
        &self,
        s: &antler_graph::Scope,
        before: Option<&antler_graph::CheckpointId>,
        limit: Option<usize>,
    ) -> antler_graph::Result<Vec<antler_graph::CheckpointId>> {
        let mut ids = self.inner.list_ids(s, before, limit).await?;
        if self.pruned_meanwhile {
            ids.insert(1, antler_graph::CheckpointId::new("pruned-meanwhile"));
        }
        Ok(ids)
    }
    async fn list_page(
        &self,
        s: &antler_graph::Scope,
        before: Option<&antler_graph::CheckpointId>,
        limit: usize,
    ) -> antler_graph::Result<Vec<antler_graph::CheckpointTuple>> {
        if !self.pruned_meanwhile {
            return self.inner.list_page(s, before, limit).await;
        }
        // A page read the way the trait's default does, through the ids above.
        let mut out = Vec::new();
        for id in self.list_ids(s, before, Some(limit)).await? {
            if let Some(t) = self.get_tuple(s, Some(&id)).await? {
                out.push(t);
            }
        }
        Ok(out)
    }
    async fn put(
        &self,
        s: &antler_graph::Scope,
        c: antler_graph::CheckpointRecord,
    ) -> antler_graph::Result<()> {
        if self.json_only {
            assert!(c.encoded_lists.is_empty(), "not accepted, not sent");
        }
        self.inner.put(s, c).await
    }
    async fn put_writes(
        &self,
        s: &antler_graph::Scope,
        c: &antler_graph::CheckpointId,
        t: &antler_graph::TaskId,
        p: &str,
        w: Vec<(String, serde_json::Value)>,
    ) -> antler_graph::Result<()> {
        self.inner.put_writes(s, c, t, p, w).await
    }
    async fn delta_history(
        &self,
        s: &antler_graph::Scope,
        c: &antler_graph::CheckpointId,
        ch: &[String],
    ) -> antler_graph::Result<std::collections::BTreeMap<String, antler_graph::DeltaHistory>> {
        self.walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.delta_history(s, c, ch).await
    }
}

/// Snapshots from the incrementally kept encoded messages store exactly the bytes of a full
/// serialisation, also after a replace (same id, new content) empties the encoded prefix, in a
/// step (`update_state`) and inside a replayed history walk (F = 7 puts the replace between a
/// seed and the next snapshot; a cache kept across that replay stores different bytes).
#[tokio::test]
async fn encoded_snapshots_store_the_same_bytes_as_json_snapshots() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;

    let mut totals = Vec::new();
    let mut finals = Vec::new();
    for encoded in [true, false] {
        let saver = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
            cp::SnapshotFrequency::new(7).unwrap(),
        )));
        let adapter = SaverCheckpointer::new(saver.clone());
        let store: Arc<dyn antler_graph::Checkpointer> = if encoded {
            Arc::new(adapter)
        } else {
            Arc::new(Wrapped::json_only(adapter))
        };
        let graph = chat(7, true).compile().unwrap().with_checkpointer(store);
        let cfg = RunConfig::new("t");
        for i in 0..5 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        // Replace h-1 in place (same id, new text): not a pure append.
        let mut m = Message::new(MessageType::Human, "edited");
        m.id = Some("h-1".to_owned());
        graph
            .update_state(&cfg, Update::new().set(&MESSAGES, vec![m]), None)
            .await
            .unwrap();
        for i in 5..9 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        // Replace h-7 through an input write, then run on a graph that rebuilds state from
        // the history walk every time (seed + replayed writes, the replace among them).
        let mut m = Message::new(MessageType::Human, "edited again");
        m.id = Some("h-7".to_owned());
        graph
            .invoke(Update::new().set(&MESSAGES, vec![m]), &cfg)
            .await
            .unwrap();
        let cold_adapter = SaverCheckpointer::new(saver.clone());
        let cold_store: Arc<dyn antler_graph::Checkpointer> = if encoded {
            Arc::new(cold_adapter)
        } else {
            Arc::new(Wrapped::json_only(cold_adapter))
        };
        let walking = chat(7, true)
            .compile()
            .unwrap()
            .with_checkpointer(cold_store)
            .with_hot_cache(false);
        for i in 9..13 {
            walking.invoke(human(i), &cfg).await.unwrap();
        }
        totals.push(
            saver
                .storage_stats(&cp::ThreadId::new("t"))
                .await
                .unwrap()
                .total(),
        );
        let cold = chat(7, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver)))
            .with_hot_cache(false);
        finals.push(
            cold.get_state(&cfg)
                .await
                .unwrap()
                .unwrap()
                .values
                .get(&MESSAGES)
                .cloned()
                .unwrap(),
        );
    }
    assert_eq!(totals[0], totals[1], "identical stored bytes");
    assert_eq!(finals[0], finals[1]);
    assert_eq!(
        finals[0].len(),
        27,
        "13 turns of two messages, plus a reply to the replace"
    );
    for (id, text) in [("h-1", "edited"), ("h-7", "edited again")] {
        assert!(
            finals[0]
                .iter()
                .any(|m| m.id.as_deref() == Some(id) && m.content.text() == text)
        );
    }
}

/// `prune(KeepLatest)` on a thread written through the `SaverCheckpointer` keeps the head
/// readable: a relative head needs its parent chain up to a full record, and the saver keeps it
/// (before, pruning kept only the head and its delta ancestors, and a cold read failed).
#[tokio::test]
async fn prune_keep_latest_keeps_a_relative_head_readable() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, RELATIVE_RECORD_V, SaverCheckpointer, Scope};

    for sqlite in [false, true] {
        // F = 1: every step snapshots, so delta history alone keeps no ancestor.
        let mode = cp::StoreConfig::delta(cp::SnapshotFrequency::new(1).unwrap());
        let saver: Arc<dyn cp::Saver> = if sqlite {
            Arc::new(cp::SqliteSaver::open_in_memory(mode).await.unwrap())
        } else {
            Arc::new(cp::MemorySaver::new(mode))
        };
        let graph = chat(1, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
        let cfg = RunConfig::new("t");
        for i in 0..10 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        let scope = Scope::root("t");
        let before = SaverCheckpointer::new(saver.clone())
            .get_tuple(&scope, None)
            .await
            .unwrap()
            .unwrap();
        let raw_head = saver
            .list(&cp::ListQuery {
                thread_id: Some(cp::ThreadId::new("t")),
                limit: Some(1),
                ..cp::ListQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(
            raw_head[0].checkpoint.v, RELATIVE_RECORD_V,
            "the head is a relative record"
        );
        saver
            .prune(&[cp::ThreadId::new("t")], cp::PruneStrategy::KeepLatest)
            .await
            .unwrap();
        let after = SaverCheckpointer::new(saver.clone())
            .get_tuple(&scope, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.checkpoint, before.checkpoint, "sqlite: {sqlite}");
        let kept = saver
            .list(&cp::ListQuery {
                thread_id: Some(cp::ThreadId::new("t")),
                ..cp::ListQuery::default()
            })
            .await
            .unwrap()
            .len();
        assert!(kept > 1, "the parent chain was kept ({kept} checkpoints)");
        // The graph continues the thread after pruning.
        graph.invoke(human(99), &cfg).await.unwrap();
    }
}

/// Forwards to a real saver, counts the record reads an adapter makes, and can hide
/// checkpoints as if their rows were gone.
struct Counting {
    inner: Arc<dyn antler_checkpoint::Saver>,
    /// `get_tuple` calls.
    valued: std::sync::atomic::AtomicUsize,
    /// `get_tuple_without_values` calls.
    bare: std::sync::atomic::AtomicUsize,
    /// `get_ancestors_without_values` calls.
    chains: std::sync::atomic::AtomicUsize,
    /// `get_channel_values` calls.
    by_key: std::sync::atomic::AtomicUsize,
    /// `get_channel_values` answers that the checkpoint is gone.
    vanish: std::sync::atomic::AtomicBool,
    hidden: std::sync::Mutex<std::collections::HashSet<antler_checkpoint::CheckpointId>>,
    /// How many of the next `list` calls answer with nothing, as if every checkpoint they
    /// listed went before its reads (`list_without_values` is not affected).
    emptied_lists: std::sync::atomic::AtomicUsize,
    /// Whether `get_tuple_with_ancestry` goes to the wrapped saver's own implementation
    /// (counted in `ancestry`) rather than the trait's default, which makes the three
    /// counted calls.
    forward_ancestry: std::sync::atomic::AtomicBool,
    /// `get_tuple_with_ancestry` calls forwarded to the wrapped saver.
    ancestry: std::sync::atomic::AtomicUsize,
    /// A run whose checkpoints the next `get_ancestors_without_values` call deletes from the
    /// wrapped saver first, as another process's `delete_for_runs` racing a read.
    delete_before_chain: std::sync::Mutex<Option<antler_checkpoint::RunId>>,
    /// Whether `delta_channel_history` answers with no channel at all, as a saver breaking
    /// the trait's contract would.
    forget_histories: std::sync::atomic::AtomicBool,
}

impl Counting {
    fn new(inner: Arc<dyn antler_checkpoint::Saver>) -> Self {
        Self {
            inner,
            valued: Default::default(),
            bare: Default::default(),
            chains: Default::default(),
            by_key: Default::default(),
            vanish: Default::default(),
            hidden: Default::default(),
            emptied_lists: Default::default(),
            forward_ancestry: Default::default(),
            ancestry: Default::default(),
            delete_before_chain: Default::default(),
            forget_histories: Default::default(),
        }
    }

    /// `(get_tuple, get_tuple_without_values, get_ancestors_without_values)` calls since the
    /// last call of this method.
    fn take(&self) -> (usize, usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.valued.swap(0, Relaxed),
            self.bare.swap(0, Relaxed),
            self.chains.swap(0, Relaxed),
        )
    }

    /// `get_channel_values` calls since the last call of this method.
    fn take_by_key(&self) -> usize {
        self.by_key.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    fn hide(&self, id: antler_checkpoint::CheckpointId) {
        self.hidden
            .lock()
            .expect("no test panicked holding it")
            .insert(id);
    }

    fn is_hidden(&self, config: &antler_checkpoint::CheckpointConfig) -> bool {
        config.checkpoint_id.is_some_and(|id| {
            self.hidden
                .lock()
                .expect("no test panicked holding it")
                .contains(&id)
        })
    }
}

#[async_trait::async_trait]
impl antler_checkpoint::Saver for Counting {
    async fn get_tuple(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
    ) -> antler_checkpoint::Result<Option<antler_checkpoint::CheckpointTuple>> {
        self.valued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.is_hidden(config) {
            return Ok(None);
        }
        self.inner.get_tuple(config).await
    }
    async fn get_tuple_without_values(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
    ) -> antler_checkpoint::Result<Option<antler_checkpoint::CheckpointTuple>> {
        self.bare.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.is_hidden(config) {
            return Ok(None);
        }
        self.inner.get_tuple_without_values(config).await
    }
    async fn get_ancestors_without_values(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        limit: usize,
    ) -> antler_checkpoint::Result<Vec<antler_checkpoint::CheckpointTuple>> {
        self.chains
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let doomed = self
            .delete_before_chain
            .lock()
            .expect("no test panicked holding it")
            .take();
        if let Some(run) = doomed {
            self.inner.delete_for_runs(&[run]).await?;
        }
        let mut chain = self
            .inner
            .get_ancestors_without_values(config, limit)
            .await?;
        // A hidden checkpoint ends the chain as a missing row does.
        if let Some(cut) = chain.iter().position(|t| self.is_hidden(&t.config)) {
            chain.truncate(cut);
        }
        Ok(chain)
    }
    async fn get_tuple_with_ancestry(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        limit: usize,
    ) -> antler_checkpoint::Result<Option<antler_checkpoint::TupleWithAncestry>> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.forward_ancestry.load(Relaxed) {
            self.ancestry.fetch_add(1, Relaxed);
            return self.inner.get_tuple_with_ancestry(config, limit).await;
        }
        // The trait's default: the three calls this wrapper counts.
        antler_checkpoint::get_tuple_with_ancestry_default(self, config, limit).await
    }
    async fn get_channel_values(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        keys: &[(
            antler_checkpoint::ChannelName,
            antler_checkpoint::ChannelVersion,
        )],
    ) -> antler_checkpoint::Result<
        Option<
            std::collections::BTreeMap<
                (
                    antler_checkpoint::ChannelName,
                    antler_checkpoint::ChannelVersion,
                ),
                antler_checkpoint::Blob,
            >,
        >,
    > {
        self.by_key
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.vanish.load(std::sync::atomic::Ordering::Relaxed) {
            // As if the checkpoint were deleted after it was read.
            return Ok(None);
        }
        self.inner.get_channel_values(config, keys).await
    }
    async fn list(
        &self,
        query: &antler_checkpoint::ListQuery,
    ) -> antler_checkpoint::Result<Vec<antler_checkpoint::CheckpointTuple>> {
        use std::sync::atomic::Ordering::Relaxed;
        if self
            .emptied_lists
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Ok(Vec::new());
        }
        self.inner.list(query).await
    }
    async fn list_without_values(
        &self,
        query: &antler_checkpoint::ListQuery,
    ) -> antler_checkpoint::Result<Vec<antler_checkpoint::CheckpointTuple>> {
        self.inner.list_without_values(query).await
    }
    async fn put(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        checkpoint: antler_checkpoint::Checkpoint,
        metadata: antler_checkpoint::CheckpointMetadata,
        new_versions: &antler_checkpoint::ChannelVersions,
    ) -> antler_checkpoint::Result<antler_checkpoint::CheckpointConfig> {
        self.inner
            .put(config, checkpoint, metadata, new_versions)
            .await
    }
    async fn put_writes(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        writes: Vec<(antler_checkpoint::ChannelName, antler_checkpoint::Blob)>,
        task_id: &antler_checkpoint::TaskId,
        task_path: &antler_checkpoint::TaskPath,
    ) -> antler_checkpoint::Result<()> {
        self.inner
            .put_writes(config, writes, task_id, task_path)
            .await
    }
    async fn delete_thread(
        &self,
        thread_id: &antler_checkpoint::ThreadId,
    ) -> antler_checkpoint::Result<()> {
        self.inner.delete_thread(thread_id).await
    }
    async fn delete_for_runs(
        &self,
        run_ids: &[antler_checkpoint::RunId],
    ) -> antler_checkpoint::Result<()> {
        self.inner.delete_for_runs(run_ids).await
    }
    async fn copy_thread(
        &self,
        source: &antler_checkpoint::ThreadId,
        target: &antler_checkpoint::ThreadId,
    ) -> antler_checkpoint::Result<()> {
        self.inner.copy_thread(source, target).await
    }
    async fn prune(
        &self,
        thread_ids: &[antler_checkpoint::ThreadId],
        strategy: antler_checkpoint::PruneStrategy,
    ) -> antler_checkpoint::Result<()> {
        self.inner.prune(thread_ids, strategy).await
    }
    async fn delta_channel_history(
        &self,
        config: &antler_checkpoint::CheckpointConfig,
        channels: &[antler_checkpoint::ChannelName],
    ) -> antler_checkpoint::Result<
        std::collections::BTreeMap<
            antler_checkpoint::ChannelName,
            antler_checkpoint::DeltaChannelHistory,
        >,
    > {
        if self
            .forget_histories
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(std::collections::BTreeMap::new());
        }
        if self.is_hidden(config) {
            // As the saver answers for a checkpoint deleted before the walk read it.
            return Err(antler_checkpoint::Error::UnknownCheckpoint {
                thread_id: config.thread_id.clone(),
                checkpoint_ns: config.checkpoint_ns.clone(),
                checkpoint_id: config
                    .checkpoint_id
                    .unwrap_or_else(antler_checkpoint::CheckpointId::generate),
            });
        }
        self.inner.delta_channel_history(config, channels).await
    }
    fn store_config(&self) -> antler_checkpoint::StoreConfig {
        self.inner.store_config()
    }
}

/// Every stored record of thread `t` with its number of relative records in a row on its
/// parent path (0 for a full record), newest first.
async fn relative_depths(
    saver: &dyn antler_checkpoint::Saver,
) -> Vec<(antler_checkpoint::CheckpointTuple, usize)> {
    use antler_checkpoint as cp;
    let raws = saver
        .list(&cp::ListQuery {
            thread_id: Some(cp::ThreadId::new("t")),
            ..cp::ListQuery::default()
        })
        .await
        .expect("the thread lists");
    let by_id: std::collections::HashMap<_, _> =
        raws.iter().map(|t| (t.checkpoint.id, t)).collect();
    let mut out = Vec::new();
    for t in &raws {
        let mut cur = t;
        let mut depth = 0;
        while cur.checkpoint.v == cp::RELATIVE_RECORD_V {
            depth += 1;
            let parent = cur
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id)
                .expect("a relative record has a parent");
            cur = by_id[&parent];
        }
        out.push((t.clone(), depth));
    }
    out
}

/// Runs `turns` turns of the chat graph (F = 3) on thread `t` of `store`, then a fork from the
/// fifth head; returns the graph and the heads of the turns.
async fn forked_thread(
    store: Arc<dyn antler_graph::Checkpointer>,
    turns: usize,
) -> (antler_graph::CompiledGraph, Vec<antler_graph::CheckpointId>) {
    let graph = chat(3, true)
        .compile()
        .expect("the chat graph compiles")
        .with_checkpointer(store);
    let cfg = RunConfig::new("t");
    let mut heads = Vec::new();
    for i in 0..turns {
        heads.push(
            graph
                .invoke(human(i), &cfg)
                .await
                .expect("a turn runs")
                .checkpoint_id
                .expect("a turn checkpoints"),
        );
    }
    graph
        .invoke(human(50), &cfg.clone().with_checkpoint(heads[4].clone()))
        .await
        .expect("a fork runs");
    (graph, heads)
}

/// A thread of 12 turns with a fork, written through a `SaverCheckpointer` over `saver`;
/// returns the writing (warm) adapter.
async fn relative_thread(
    saver: Arc<dyn antler_checkpoint::Saver>,
) -> Arc<antler_graph::SaverCheckpointer> {
    let warm = Arc::new(antler_graph::SaverCheckpointer::new(saver));
    forked_thread(warm.clone(), 12).await;
    warm
}

/// Request 7 of `NEEDS-FROM-CHECKPOINT.md`: a cold read of a relative record (an adapter with
/// no cached maps) fetches the record's ancestors with one `get_ancestors_without_values`
/// call, not one `get_tuple_without_values` per ancestor, and returns what the adapter that
/// wrote the thread returns. With values, only the record itself is read with `get_tuple`;
/// the values its ancestors stored come from one `get_channel_values` call.
#[tokio::test]
async fn a_cold_read_of_a_relative_record_fetches_its_ancestors_in_one_call() {
    use antler_checkpoint as cp;
    use antler_graph::{CheckpointId, Checkpointer, SaverCheckpointer, Scope};

    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let counting = Arc::new(Counting::new(inner.clone()));
    let warm = relative_thread(counting.clone()).await;
    let scope = Scope::root("t");
    let records = relative_depths(&*inner).await;
    assert!(
        records.iter().any(|(_, d)| *d >= 3),
        "some record is three or more relative records below a full one"
    );
    let mut by_key_reads = 0;
    for (raw, depth) in &records {
        let id = CheckpointId::new(raw.checkpoint.id.to_string());
        let want_head = warm.head(&scope, Some(&id)).await.unwrap();
        let want = warm.get_tuple(&scope, Some(&id)).await.unwrap();
        counting.take();

        let cold = SaverCheckpointer::new(counting.clone());
        assert_eq!(cold.head(&scope, Some(&id)).await.unwrap(), want_head);
        let chains = usize::from(*depth > 0);
        assert_eq!(
            counting.take(),
            (0, 1, chains),
            "head of a record {depth} below a full one: one read of the record, one of its ancestors"
        );

        counting.take_by_key();
        let cold = SaverCheckpointer::new(counting.clone());
        assert_eq!(cold.get_tuple(&scope, Some(&id)).await.unwrap(), want);
        assert_eq!(
            counting.take(),
            (1, 0, chains),
            "depth {depth}: only the record is read with its values"
        );
        let by_key = counting.take_by_key();
        assert!(by_key <= 1, "depth {depth}: {by_key} value reads by key");
        if *depth > 0 {
            by_key_reads += by_key;
        }
    }
    assert!(
        by_key_reads > 0,
        "some relative record takes a value from an ancestor"
    );
    // An independent reference: `list` completes each record's values along the parent path.
    let listed = warm.list(&scope).await.unwrap();
    assert_eq!(listed.len(), records.len());
    for t in &listed {
        let cold = SaverCheckpointer::new(counting.clone());
        let got = cold
            .get_tuple(&scope, Some(&t.checkpoint.id))
            .await
            .unwrap();
        assert_eq!(got.as_ref(), Some(t));
    }
    // A checkpoint deleted between the record read and the value read is gone for the read;
    // it never returns the record without the values its ancestors stored.
    counting
        .vanish
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let mut failed = 0;
    for (raw, depth) in &records {
        let id = CheckpointId::new(raw.checkpoint.id.to_string());
        counting.take_by_key();
        let cold = SaverCheckpointer::new(counting.clone());
        let got = cold.get_tuple(&scope, Some(&id)).await;
        if counting.take_by_key() > 0 {
            assert_eq!(got.unwrap(), None, "depth {depth}");
            failed += 1;
        } else {
            assert!(got.unwrap().is_some());
        }
    }
    assert!(failed > 0);
    counting
        .vanish
        .store(false, std::sync::atomic::Ordering::Relaxed);
    // A warm adapter has every record's maps: no ancestor is read for the head.
    counting.take();
    warm.head(&scope, None).await.unwrap();
    assert_eq!(counting.take(), (0, 1, 0));
    // A saver that reads a record with its ancestry itself (as the savers of antler do):
    // a cold read of any record is that one call, and returns what the warm adapter does.
    counting
        .forward_ancestry
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for (raw, depth) in &records {
        let id = CheckpointId::new(raw.checkpoint.id.to_string());
        let want = warm.get_tuple(&scope, Some(&id)).await.unwrap();
        counting.take();
        counting.take_by_key();
        counting
            .ancestry
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        let cold = SaverCheckpointer::new(counting.clone());
        assert_eq!(cold.get_tuple(&scope, Some(&id)).await.unwrap(), want);
        assert_eq!(
            (
                counting
                    .ancestry
                    .swap(0, std::sync::atomic::Ordering::Relaxed),
                counting.take(),
                counting.take_by_key()
            ),
            (1, (0, 0, 0), 0),
            "depth {depth}: one call"
        );
    }
}

/// The chain coming back short still fails the read as a missing parent did before, whether
/// the missing record is the parent or further up; and a chain of relative records that
/// never reaches a full one still fails at the bound.
#[tokio::test]
async fn a_cold_read_with_a_missing_ancestor_or_no_full_record_fails() {
    use antler_checkpoint as cp;
    use antler_graph::{CheckpointId, Checkpointer, SaverCheckpointer, Scope};

    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let counting = Arc::new(Counting::new(inner.clone()));
    relative_thread(counting.clone()).await;
    let scope = Scope::root("t");
    let records = relative_depths(&*inner).await;
    let (deep, depth) = records
        .iter()
        .find(|(_, d)| *d >= 3)
        .map(|(t, d)| (t.clone(), *d))
        .unwrap();
    let id = CheckpointId::new(deep.checkpoint.id.to_string());
    // The ancestors of `deep` up to its full record, nearest first.
    let chain = inner
        .get_ancestors_without_values(&deep.config, depth + 1)
        .await
        .unwrap();
    assert_eq!(chain.len(), depth + 1);
    for gone in [1, depth] {
        let hidden = Counting::new(inner.clone());
        hidden.hide(chain[gone].checkpoint.id);
        let hidden = Arc::new(hidden);
        for with_values in [false, true] {
            let cold = SaverCheckpointer::new(hidden.clone());
            let err = if with_values {
                cold.get_tuple(&scope, Some(&id)).await.unwrap_err()
            } else {
                cold.head(&scope, Some(&id)).await.unwrap_err()
            };
            assert!(
                err.to_string()
                    .contains("the parent of a relative record is missing"),
                "{err}"
            );
            assert_eq!(
                hidden.take().2,
                1,
                "one ancestor call, even when it comes back short"
            );
        }
    }

    // 40 relative records in a row above a full one: the adapter gives up at its bound.
    let mut at = cp::CheckpointConfig::latest("endless");
    for i in 0..41 {
        let mut c = cp::Checkpoint::empty();
        if i > 0 {
            c.v = cp::RELATIVE_RECORD_V;
        }
        at = inner
            .put(
                &at,
                c,
                cp::CheckpointMetadata::default(),
                &cp::ChannelVersions::new(),
            )
            .await
            .unwrap();
    }
    let err = SaverCheckpointer::new(inner.clone())
        .head(&Scope::root("endless"), None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no full record within the bound"),
        "{err}"
    );
}

/// Writes for a checkpoint that is not stored are refused by both checkpointers, the
/// in-process one as the savers do (before, it kept them for whatever checkpoint came to be
/// put under that id).
#[tokio::test]
async fn writes_for_a_checkpoint_that_is_not_stored_are_refused() {
    use antler_checkpoint as cp;
    use antler_graph::{CheckpointId, Checkpointer, MemoryCheckpointer, SaverCheckpointer, Scope};
    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::full()));
    let checkpointers: [Arc<dyn Checkpointer>; 2] = [
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(SaverCheckpointer::new(saver)),
    ];
    // The saver's `UnknownCheckpoint` is mapped to the runtime's `CheckpointNotFound`.
    for (c, kind) in checkpointers.into_iter().zip([
        antler_graph::ErrorKind::NotFound,
        antler_graph::ErrorKind::NotFound,
    ]) {
        let ghost = CheckpointId::new(cp::CheckpointId::generate().to_string());
        let err = c
            .put_writes(
                &Scope::root("t"),
                &ghost,
                &antler_graph::TaskId::new("task"),
                "",
                vec![("log".to_owned(), serde_json::json!(["x"]))],
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.to_string().contains(ghost.as_str()), "{err}");
    }
}

/// A relative thread (see [`relative_thread`]) on a fresh delta store (F = 3), with more turns
/// until its head, with its relative depth, satisfies `wanted`: the store and the head.
async fn relative_thread_with_head(
    wanted: impl Fn(&(antler_checkpoint::CheckpointTuple, usize)) -> bool,
) -> (
    Arc<dyn antler_checkpoint::Saver>,
    antler_checkpoint::CheckpointTuple,
) {
    use antler_checkpoint as cp;
    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).expect("a valid frequency"),
    )));
    relative_thread(Arc::new(Counting::new(inner.clone()))).await;
    let writer = chat(3, true)
        .compile()
        .expect("the chat graph compiles")
        .with_checkpointer(Arc::new(antler_graph::SaverCheckpointer::new(
            inner.clone(),
        )));
    for turn in 100..120 {
        let records = relative_depths(&*inner).await;
        if wanted(&records[0]) {
            return (inner, records[0].0.clone());
        }
        writer
            .invoke(human(turn), &RunConfig::new("t"))
            .await
            .expect("a turn runs");
    }
    panic!("no head within 20 more turns is the one wanted");
}

/// A page of one relative record whose own read finds, two records up, an ancestor gone: the
/// record is left out when it is gone too (a prune took both), whatever is left between them.
/// The check is on the record being read, not on the deepest ancestor reached (before, an
/// ancestor that still existed made the page fail).
#[tokio::test]
async fn a_gone_record_is_left_out_whichever_ancestor_its_read_misses() {
    use antler_graph::{Checkpointer, SaverCheckpointer, Scope};

    // A head two or more relative records below a full one.
    let (inner, head) = relative_thread_with_head(|(_, depth)| *depth >= 2).await;
    let chain = inner
        .get_ancestors_without_values(&head.config, 3)
        .await
        .unwrap();
    let hidden = Counting::new(inner.clone());
    hidden.hide(chain[0].checkpoint.id);
    hidden.hide(chain[2].checkpoint.id);
    let page = SaverCheckpointer::new(Arc::new(hidden))
        .list_page(&Scope::root("t"), None, 1)
        .await
        .unwrap();
    assert!(page.is_empty(), "the head is gone: left out");
}

/// A read of the latest checkpoint that finds it deleted while it completes it (another
/// process's `delete_for_runs` between the record and its ancestors) reads the new latest,
/// as the savers' own reads do; one that keeps finding it gone fails with a `Conflict` to
/// retry, and a relative record whose parent is missing while it exists is `Corrupt`.
/// Before, the first failed with the adapter's error, which had no checkpoint kind.
#[tokio::test]
async fn a_latest_read_racing_a_delete_reads_the_new_latest() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, SaverCheckpointer, Scope};

    let scope = Scope::root("t");
    // Turns with run ids until the head is a relative record whose parent is of its run (the
    // turn that wrote it), so deleting the run leaves the head's read no ancestor to complete
    // it with.
    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let writer = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(inner.clone())));
    let mut head = None;
    for turn in 0..20 {
        let run = RunConfig::new("t").with_run_id(format!("r{turn}"));
        writer.invoke(human(turn), &run).await.unwrap();
        let records = relative_depths(&*inner).await;
        if turn > 0 && records[0].1 >= 1 {
            head = Some(records[0].0.clone());
            break;
        }
    }
    let head = head.expect("a relative head within 20 turns");
    let chain = inner
        .get_ancestors_without_values(&head.config, 2)
        .await
        .unwrap();
    assert_eq!(chain[1].metadata.run_id, head.metadata.run_id);
    let racing = Arc::new(Counting::new(inner.clone()));
    *racing.delete_before_chain.lock().unwrap() = head.metadata.run_id.clone();
    let got = SaverCheckpointer::new(racing.clone())
        .get_tuple(&scope, None)
        .await
        .unwrap()
        .expect("the thread still has checkpoints");
    assert!(
        racing.delete_before_chain.lock().unwrap().is_none(),
        "the delete ran"
    );
    assert_ne!(got.checkpoint.id.as_str(), head.checkpoint.id.to_string());
    let after = SaverCheckpointer::new(inner.clone())
        .get_tuple(&scope, None)
        .await
        .unwrap();
    assert_eq!(Some(got), after);

    // Gone on every try: the head read as the latest, then neither it nor its parent.
    let (inner, head) = relative_thread_with_head(|(_, depth)| *depth >= 2).await;
    let chain = inner
        .get_ancestors_without_values(&head.config, 2)
        .await
        .unwrap();
    let hidden = Counting::new(inner.clone());
    hidden.hide(chain[0].checkpoint.id);
    hidden.hide(chain[1].checkpoint.id);
    let err = SaverCheckpointer::new(Arc::new(hidden))
        .get_tuple(&scope, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.checkpoint_kind(),
        Some(cp::ErrorKind::Conflict),
        "{err}"
    );
    // Its parent gone while it exists: stored data that cannot be completed.
    let hidden = Counting::new(inner.clone());
    hidden.hide(chain[1].checkpoint.id);
    let err = SaverCheckpointer::new(Arc::new(hidden))
        .get_tuple(&scope, None)
        .await
        .unwrap_err();
    assert_eq!(err.checkpoint_kind(), Some(cp::ErrorKind::Corrupt), "{err}");
}

/// A record deleted after its page of history was read, whose delta channel the runtime then
/// restores with a history walk, is left out of the history, as a record the page's own read
/// saw go is (before, the walk's `UnknownCheckpoint` failed the whole history).
#[tokio::test]
async fn a_record_deleted_before_its_history_walk_is_left_out() {
    use antler_graph::{HistoryQuery, SaverCheckpointer};

    // A head (a record without children) that stores no snapshot of `messages`, so restoring
    // it needs the walk.
    let (inner, head) = relative_thread_with_head(|(t, _)| {
        !t.checkpoint
            .channel_values
            .keys()
            .any(|c| c.as_str() == "messages")
    })
    .await;
    let gone = head.checkpoint.id;
    let hidden = Counting::new(inner.clone());
    hidden.hide(gone);
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(Arc::new(hidden))));
    // A page of one: the record's parent is not on it, so the runtime walks its history
    // (on a longer page it continues the parent's channels without reading the store).
    let history = graph
        .get_state_history_with(&RunConfig::new("t"), &HistoryQuery::limit(1))
        .await
        .unwrap();
    assert!(
        history
            .iter()
            .all(|s| s.checkpoint_id.as_str() != gone.to_string()),
        "{:?}",
        history
            .iter()
            .map(|s| s.checkpoint_id.to_string())
            .collect::<Vec<_>>()
    );
}

/// A relative record deleted with its parent between a page's list and its completion (a
/// prune by another process) is left out of the page, as a record deleted before its values
/// were read is; a missing parent of a record that still exists stays an error.
#[tokio::test]
async fn a_relative_record_deleted_with_its_parent_mid_page_is_left_out() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, SaverCheckpointer, Scope};

    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    relative_thread(Arc::new(Counting::new(inner.clone()))).await;
    let scope = Scope::root("t");
    // A relative record without children whose parent has no other child: a prune may delete
    // both while every other record keeps what it needs.
    let raws = inner.list(&cp::ListQuery::thread("t")).await.unwrap();
    let parent_of =
        |t: &cp::CheckpointTuple| t.parent_config.as_ref().and_then(|p| p.checkpoint_id);
    let children = |id: cp::CheckpointId| raws.iter().filter(|t| parent_of(t) == Some(id)).count();
    let deep = raws
        .iter()
        .find(|t| {
            t.checkpoint.v == cp::RELATIVE_RECORD_V
                && children(t.checkpoint.id) == 0
                && parent_of(t).is_some_and(|p| children(p) == 1)
        })
        .expect("a childless relative record")
        .clone();
    let hidden = Counting::new(inner.clone());
    hidden.hide(deep.checkpoint.id);
    hidden.hide(parent_of(&deep).unwrap());
    let hidden = Arc::new(hidden);
    let all = inner.list(&cp::ListQuery::thread("t")).await.unwrap().len();
    let page = SaverCheckpointer::new(hidden.clone())
        .list_page(&scope, None, all)
        .await
        .unwrap();
    let ids: Vec<String> = page.iter().map(|t| t.checkpoint.id.to_string()).collect();
    assert!(!ids.contains(&deep.checkpoint.id.to_string()), "{ids:?}");
    assert!(
        page.len() + 2 >= all,
        "only the deleted records are left out"
    );
}

/// A page of history (`limit`, `before`) is the matching slice of the whole history, on the
/// in-process checkpointer and through a saver, with a fork and an `update_state` on the
/// thread; walking pages with `before` visits every checkpoint once. The fork floor each
/// checkpointer computes from its records alone is the greatest version of any checkpoint.
#[tokio::test]
async fn a_page_of_history_is_a_slice_of_the_whole() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, HistoryQuery, SaverCheckpointer, Scope, StateSnapshot};

    type Key4 = (String, Option<String>, i64, String, Option<Vec<Message>>);
    fn keys(snaps: &[StateSnapshot]) -> Vec<Key4> {
        snaps
            .iter()
            .map(|s| {
                (
                    s.checkpoint_id.to_string(),
                    s.parent_id.as_ref().map(ToString::to_string),
                    s.step,
                    format!("{:?}", s.source),
                    s.values.get(&MESSAGES).cloned(),
                )
            })
            .collect()
    }

    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let stores: [Arc<dyn Checkpointer>; 2] = [
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(SaverCheckpointer::new(saver)),
    ];
    for store in stores {
        let (graph, heads) = forked_thread(store.clone(), 9).await;
        let cfg = RunConfig::new("t");
        graph.update_state(&cfg, human(60), None).await.unwrap();
        graph.invoke(human(61), &cfg).await.unwrap();

        let whole = keys(&graph.get_state_history(&cfg).await.unwrap());
        assert!(whole.len() > 20, "{}", whole.len());
        for limit in [1, 2, 5, whole.len(), whole.len() + 3] {
            let page = graph
                .get_state_history_with(&cfg, &HistoryQuery::limit(limit))
                .await
                .unwrap();
            assert_eq!(
                keys(&page),
                whole[..limit.min(whole.len())],
                "limit {limit}"
            );
        }
        let mut walked = Vec::new();
        let mut query = HistoryQuery::limit(4);
        loop {
            let page = graph.get_state_history_with(&cfg, &query).await.unwrap();
            let Some(last) = page.last() else { break };
            query = HistoryQuery::limit(4).before(last.checkpoint_id.clone());
            walked.extend(keys(&page));
        }
        assert_eq!(walked, whole);
        let older = HistoryQuery::default().before(heads[3].clone());
        let got = keys(&graph.get_state_history_with(&cfg, &older).await.unwrap());
        let at = whole
            .iter()
            .position(|k| k.0 == heads[3].to_string())
            .unwrap();
        assert_eq!(got, whole[at + 1..]);

        let scope = Scope::root("t");
        let from_list = store
            .list(&scope)
            .await
            .unwrap()
            .iter()
            .flat_map(|t| t.checkpoint.versions.values().copied())
            .max()
            .unwrap();
        assert_eq!(store.max_version(&scope).await.unwrap(), from_list);
        assert_eq!(store.max_version(&Scope::root("nobody")).await.unwrap(), 0);
    }
}

/// A process that opens a thread cold and runs one turn stores only that turn's messages:
/// the reads that rebuild the state seed the saver's message index (head and history walk),
/// so the turn's writes and the next snapshot reference the stored bodies instead of storing
/// them again, without loading every body of the thread first.
#[tokio::test]
async fn a_cold_turn_stores_only_its_new_messages() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;

    let dir = std::env::temp_dir().join(format!("antler-graph-cold-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let _ = std::fs::remove_file(&path);
    let config = cp::StoreConfig::delta(cp::SnapshotFrequency::new(3).unwrap());
    let open = || async { Arc::new(cp::SqliteSaver::open(&path, config).await.unwrap()) };
    let bodies = |s: Arc<cp::SqliteSaver>| async move {
        s.storage_stats(&cp::ThreadId::new("t"))
            .await
            .unwrap()
            .message_bytes
    };
    let cfg = RunConfig::new("t");
    let warm = open().await;
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(warm.clone())));
    for i in 10..40 {
        graph.invoke(human(i), &cfg).await.unwrap();
    }
    let before = bodies(warm.clone()).await;
    graph.invoke(human(40), &cfg).await.unwrap();
    let warm_turn = bodies(warm.clone()).await - before;
    // Three cold turns: each on a fresh saver and graph (they land on a snapshot turn too).
    for i in 41..44 {
        let before = bodies(warm.clone()).await;
        let cold = chat(3, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(open().await)));
        cold.invoke(human(i), &cfg).await.unwrap();
        assert_eq!(bodies(warm.clone()).await - before, warm_turn, "turn {i}");
    }
    let state = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(open().await)))
        .get_state(&cfg)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.values.get(&MESSAGES).map(Vec::len), Some(68));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A checkpoint deleted between listing a history page and reading it is left out of the
/// page, not an error: it is no longer history.
#[tokio::test]
async fn a_history_page_skips_a_checkpoint_deleted_meanwhile() {
    use antler_graph::HistoryQuery;

    let graph =
        chat(3, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(Wrapped::pruned_meanwhile(
                MemoryCheckpointer::new(),
            )));
    let cfg = RunConfig::new("t");
    for i in 0..3 {
        graph.invoke(human(i), &cfg).await.unwrap();
    }
    let page = graph
        .get_state_history_with(&cfg, &HistoryQuery::limit(4))
        .await
        .unwrap();
    assert_eq!(page.len(), 4);
    assert!(
        page.iter()
            .all(|s| s.checkpoint_id.as_str() != "pruned-meanwhile")
    );
}

/// Two processes (two savers on one SQLite file, two graphs) taking turns on one thread: every
/// state either returns is the whole conversation, and the message bodies stored are those of
/// one process running every turn (a process whose message index predates the other's writes
/// takes a sequence number the other already used, gets a conflict, reloads its index and
/// retries, so no body is stored twice).
#[tokio::test]
async fn two_processes_taking_turns_on_one_thread() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;

    let dir = std::env::temp_dir().join(format!("antler-graph-turns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = cp::StoreConfig::delta(cp::SnapshotFrequency::new(3).unwrap());
    let mut body_bytes = Vec::new();
    for processes in [1, 2] {
        let path = dir.join(format!("store-{processes}.db"));
        let _ = std::fs::remove_file(&path);
        let mut savers = Vec::new();
        let mut graphs = Vec::new();
        for _ in 0..processes {
            let saver = Arc::new(cp::SqliteSaver::open(&path, config).await.unwrap());
            graphs.push(
                chat(3, true)
                    .compile()
                    .unwrap()
                    .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone()))),
            );
            savers.push(saver);
        }
        let cfg = RunConfig::new("t");
        for i in 0..20 {
            let out = graphs[i % processes].invoke(human(i), &cfg).await.unwrap();
            let messages = out.values.get(&MESSAGES).unwrap();
            assert_eq!(
                messages.len(),
                2 * (i + 1),
                "{processes} processes, turn {i}"
            );
        }
        let stats = savers[0]
            .storage_stats(&cp::ThreadId::new("t"))
            .await
            .unwrap();
        body_bytes.push(stats.message_bytes);
    }
    assert_eq!(body_bytes[0], body_bytes[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A page of history rebuilds a checkpoint whose parent is on the page from the parent's
/// channels and writes instead of walking history again: every snapshot equals a cold
/// `get_state` of that checkpoint (which walks), on a thread with removals, replacements by
/// id, an Overwrite and a fork, on both checkpointers; a page of consecutive checkpoints
/// walks history at most once.
#[tokio::test]
async fn a_history_page_walks_history_once_and_equals_cold_reads() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, HistoryQuery, SaverCheckpointer};

    fn editing(frequency: u32) -> StateGraph {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(frequency))
            .expect("declared once");
        g.add_node("reply", |s: State, _c| async move {
            let list = s.get(&MESSAGES).cloned().unwrap_or_default();
            let n = list.len();
            let mut out = vec![ai(Some(&format!("ai-{n}")), &format!("reply {n}"))];
            // Every third turn removes the oldest message; every fourth rewrites the newest.
            if n % 3 == 0
                && let Some(first) = list.first().and_then(|m| m.id.clone())
            {
                out.push(Message::remove(first));
            }
            if n % 4 == 1
                && let Some(last) = list.last().and_then(|m| m.id.clone())
            {
                let mut m = Message::new(MessageType::Human, format!("edited {n}"));
                m.id = Some(last);
                out.push(m);
            }
            Ok(Update::new().set(&MESSAGES, out))
        });
        // In parallel with `reply`: appends an echo whose id comes back every fourth turn
        // (a replacement by id in the same step as other writes).
        g.add_node("echo", |s: State, _c| async move {
            let n = s.get(&MESSAGES).map_or(0, Vec::len);
            let mut m = Message::new(MessageType::System, format!("echo {n}"));
            m.id = Some(format!("e-{}", n % 4));
            Ok(Update::new().set(&MESSAGES, vec![m]))
        });
        g.add_edge("__start__", "reply")
            .add_edge("__start__", "echo")
            .add_edge("reply", "__end__")
            .add_edge("echo", "__end__");
        g
    }

    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(4).unwrap(),
    )));
    check(Wrapped::counting(MemoryCheckpointer::new())).await;
    check(Wrapped::counting(SaverCheckpointer::new(saver))).await;

    async fn check<C: Checkpointer + 'static>(store: Wrapped<C>) {
        let store = Arc::new(store);
        let graph = editing(4)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        let mut heads = Vec::new();
        for i in 0..14 {
            let out = if i % 5 == 2 {
                // A command's update: an input (NULL-task) write on the head.
                let mut m = Message::new(MessageType::Human, format!("command {i}"));
                m.id = Some(format!("c-{i}"));
                graph
                    .invoke(
                        antler_graph::Command::new().update(Update::new().set(&MESSAGES, vec![m])),
                        &cfg,
                    )
                    .await
                    .unwrap()
            } else {
                graph.invoke(human(i), &cfg).await.unwrap()
            };
            heads.push(out.checkpoint_id.unwrap());
            if i == 6 {
                graph
                    .update_state(
                        &cfg,
                        Update::new().overwrite(&MESSAGES, vec![ai(Some("o"), "only")]),
                        Some("reply".into()),
                    )
                    .await
                    .unwrap();
            }
        }
        graph
            .invoke(human(50), &cfg.clone().with_checkpoint(heads[9].clone()))
            .await
            .unwrap();
        graph.invoke(human(51), &cfg).await.unwrap();

        // The reference: each checkpoint read cold on its own (a history walk per read).
        let cold = editing(4)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let ids = store.list_ids(&cfg.scope(), None, None).await.unwrap();
        assert!(ids.len() > 30, "{}", ids.len());
        let mut expected = Vec::new();
        for id in &ids {
            let one = cold
                .get_state(&cfg.clone().with_checkpoint(id.clone()))
                .await
                .unwrap()
                .unwrap();
            expected.push((id.clone(), one.values.get(&MESSAGES).cloned()));
        }
        store.take_walks();
        for limit in [3, 10, ids.len()] {
            let mut got = Vec::new();
            let mut query = HistoryQuery::limit(limit);
            loop {
                let page = cold.get_state_history_with(&cfg, &query).await.unwrap();
                let Some(last) = page.last() else { break };
                query = HistoryQuery::limit(limit).before(last.checkpoint_id.clone());
                got.extend(
                    page.iter()
                        .map(|s| (s.checkpoint_id.clone(), s.values.get(&MESSAGES).cloned())),
                );
            }
            assert_eq!(got, expected, "limit {limit}");
        }
        let whole = cold.get_state_history(&cfg).await.unwrap();
        let got: Vec<_> = whole
            .iter()
            .map(|s| (s.checkpoint_id.clone(), s.values.get(&MESSAGES).cloned()))
            .collect();
        assert_eq!(got, expected, "the whole history");
        // The whole thread as one page: ids list newest first across both branches, so the
        // main line and the fork each start a run (one walk each at most).
        store.take_walks();
        cold.get_state_history_with(&cfg, &HistoryQuery::limit(ids.len()))
            .await
            .unwrap();
        let walks = store.take_walks();
        assert!(walks <= 2, "{walks} history walks for one page");
    }
}

/// A run on an addressed checkpoint applies the input (NULL-task) writes pending on it, as a
/// run on the head does (runtime-spec §2.2: they are that checkpoint's own input): a new
/// branch from the checkpoint a command's update is stored on starts from the state
/// `get_state` shows for that checkpoint, update included, with new input and with a replay.
/// The history walk through the checkpoint replays that input as well, so a cold `get_state`
/// and a history page of the branch equal the live state. (Before, such runs dropped the
/// input, and the branch did not start from the checkpoint's state.)
#[tokio::test]
async fn a_run_addressed_to_a_checkpoint_applies_the_input_stored_on_it() {
    use antler_graph::{Command, HistoryQuery};

    for store in both_stores(50) {
        let (graph, cfg, head) = chat_thread(store.clone(), 50, 2).await;
        // A command's update is stored on the head as an input (NULL-task) write, then applied.
        let mut extra = Message::new(MessageType::Human, "only on the first branch");
        extra.id = Some("m".into());
        graph
            .invoke(
                Command::new().update(Update::new().set(&MESSAGES, vec![extra])),
                &cfg,
            )
            .await
            .unwrap();
        // The state shown for that checkpoint includes the update.
        let at_head = cfg.clone().with_checkpoint(head.clone());
        let shown = graph.get_state(&at_head).await.unwrap().unwrap();
        let shown = shown.values.get(&MESSAGES).cloned().unwrap();
        assert_eq!(
            shown
                .iter()
                .filter(|m| m.id.as_deref() == Some("m"))
                .count(),
            1,
            "{shown:?}"
        );
        // A replay of the checkpoint starts from that state.
        let replayed = graph
            .invoke(antler_graph::Input::Continue, &at_head)
            .await
            .unwrap();
        let replayed = replayed.values.get(&MESSAGES).cloned().unwrap();
        assert_eq!(replayed.get(..shown.len()), Some(shown.as_slice()));
        // A new branch from it with new input: the update applied once, before the input.
        let forked = graph.invoke(human(2), &at_head).await.unwrap();
        let live = forked.values.get(&MESSAGES).cloned().unwrap();
        assert_eq!(live.get(..shown.len()), Some(shown.as_slice()), "{live:?}");
        assert_eq!(
            live.iter().filter(|m| m.id.as_deref() == Some("m")).count(),
            1,
            "{live:?}"
        );
        let cold = chat(50, true)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let at = cfg
            .clone()
            .with_checkpoint(forked.checkpoint_id.clone().unwrap());
        let state = cold.get_state(&at).await.unwrap().unwrap();
        assert_eq!(
            state.values.get(&MESSAGES),
            Some(&live),
            "cold read == live"
        );
        let page = cold
            .get_state_history_with(&cfg, &HistoryQuery::limit(3))
            .await
            .unwrap();
        assert_eq!(page[0].checkpoint_id, forked.checkpoint_id.unwrap());
        assert_eq!(
            page[0].values.get(&MESSAGES),
            Some(&live),
            "history == live"
        );
    }
}

/// A fork that changes nothing (an empty `update_state` on an old checkpoint) becomes the
/// thread's newest checkpoint without holding a version above the other branch; plain runs
/// continuing from it still allocate versions above every version of the thread (the branch's
/// floor is stored with its checkpoints), so nothing collides, on the in-process checkpointer
/// and through a saver, and the first branch still reads as it did.
#[tokio::test]
async fn a_fork_that_changes_nothing_keeps_its_branch_above_the_other_versions() {
    for store in both_stores(3) {
        let graph = chat(3, true)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        let mut heads = Vec::new();
        for i in 0..4 {
            heads.push(
                graph
                    .invoke(human(i), &cfg)
                    .await
                    .unwrap()
                    .checkpoint_id
                    .unwrap(),
            );
        }
        let first_branch = cfg.clone().with_checkpoint(heads[3].clone());
        let before = graph
            .get_state(&first_branch)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned();
        graph
            .update_state(
                &cfg.clone().with_checkpoint(heads[0].clone()),
                Update::new(),
                None,
            )
            .await
            .unwrap();
        for i in 10..14 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        let state = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(state.values.get(&MESSAGES).map(Vec::len), Some(2 + 8));
        let cold = chat(3, true)
            .compile()
            .unwrap()
            .with_checkpointer(store)
            .with_hot_cache(false);
        let read = |s: antler_graph::StateSnapshot| s.values.get(&MESSAGES).cloned();
        assert_eq!(
            read(cold.get_state(&first_branch).await.unwrap().unwrap()),
            before
        );
        assert_eq!(
            read(cold.get_state(&cfg).await.unwrap().unwrap()),
            state.values.get(&MESSAGES).cloned()
        );
    }
}

/// The in-process checkpointer refuses a value under a (channel, version) that holds another
/// value, storing nothing, as the savers do; an identical value put again keeps the first
/// checkpoint that stored it as the value's owner (the seed of history walks).
#[tokio::test]
async fn the_in_process_checkpointer_refuses_a_version_clash() {
    use antler_graph::{CheckpointId, CheckpointRecord, Checkpointer, Scope, Source};
    use serde_json::json;

    let store = MemoryCheckpointer::new();
    let scope = Scope::root("t");
    let record = |id: &str, value: serde_json::Value| CheckpointRecord {
        id: CheckpointId::new(id),
        parent: None,
        step: -1,
        source: Source::Input,
        values: [("a".to_owned(), value)].into_iter().collect(),
        versions: [("a".to_owned(), 1)].into_iter().collect(),
        versions_seen: Default::default(),
        updated_channels: None,
        new_versions: ["a".to_owned()].into_iter().collect(),
        counters: Default::default(),
        encoded_lists: Default::default(),
        run_id: None,
        metadata: Default::default(),
        parents: Default::default(),
    };
    store
        .put(&scope, record("1", json!("first")))
        .await
        .unwrap();
    // The same value again is fine.
    store
        .put(&scope, record("2", json!("first")))
        .await
        .unwrap();
    let err = store
        .put(&scope, record("3", json!("second")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("already holds a different value"),
        "{err}"
    );
    assert!(
        store
            .get_tuple(&scope, Some(&CheckpointId::new("3")))
            .await
            .unwrap()
            .is_none()
    );
    let kept = store
        .get_tuple(&scope, Some(&CheckpointId::new("1")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.checkpoint.values["a"], json!("first"));
    // The identical put left "1" the value's owner: a walk from a child of "1" (which stores
    // no value of its own) takes its seed there.
    let child = CheckpointRecord {
        id: CheckpointId::new("4"),
        parent: Some(CheckpointId::new("1")),
        values: Default::default(),
        new_versions: Default::default(),
        ..record("4", json!(null))
    };
    store.put(&scope, child).await.unwrap();
    let walk = store
        .delta_history(&scope, &CheckpointId::new("4"), &["a".to_owned()])
        .await
        .unwrap();
    assert_eq!(walk["a"].seed, Some(json!("first")));
}

/// A command's update on an addressed checkpoint starts a new branch at a fork checkpoint
/// (runtime-spec §2.2) and is stored with it, not attached to the addressed checkpoint:
/// the checkpoint's existing children read what they read before (their history walks pass
/// through it), and the new branch reads the update, cold as live.
#[tokio::test]
async fn a_command_on_an_addressed_checkpoint_leaves_its_children_alone() {
    use antler_graph::Command;
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = chat(50, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    graph.invoke(human(0), &cfg).await.unwrap();
    let h = graph
        .invoke(human(1), &cfg)
        .await
        .unwrap()
        .checkpoint_id
        .unwrap();
    let c = graph.invoke(human(2), &cfg).await.unwrap();
    let before = c.values.get(&MESSAGES).cloned();
    let mut m = Message::new(MessageType::Human, "late");
    m.id = Some("late".into());
    let branch = graph
        .invoke(
            Command::new().update(Update::new().set(&MESSAGES, vec![m])),
            &cfg.clone().with_checkpoint(h.clone()),
        )
        .await
        .unwrap();
    let live = branch.values.get(&MESSAGES).cloned().unwrap();
    assert!(live.iter().any(|m| m.id.as_deref() == Some("late")));
    let cold = chat(50, true)
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let at = cfg.clone().with_checkpoint(c.checkpoint_id.unwrap());
    let got = cold.get_state(&at).await.unwrap().unwrap();
    assert_eq!(got.values.get(&MESSAGES).cloned(), before);
    let at = cfg.clone().with_checkpoint(branch.checkpoint_id.unwrap());
    let got = cold.get_state(&at).await.unwrap().unwrap();
    assert_eq!(got.values.get(&MESSAGES), Some(&live));
    // The addressed checkpoint carries no write of the update, and the branch starts with a
    // fork.
    use antler_graph::Checkpointer;
    let scope = cfg.scope();
    assert_no_pending_write_mentions(store.as_ref(), &scope, &h, "late").await;
    let forks: Vec<_> = store
        .list(&scope)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.checkpoint.source == antler_graph::Source::Fork)
        .collect();
    assert_eq!(forks.len(), 1);
    assert_eq!(forks[0].checkpoint.parent.as_ref(), Some(&h));
}

const OTHER: Key<i64> = Key::from_static("other");

/// A delta `messages` channel and a last-value `other`; `reply` writes messages only once
/// `other` reaches 5.
fn graph_with_other() -> StateGraph {
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(50))
        .expect("declared once");
    g.channel(&OTHER, ChannelSpec::last_value())
        .expect("declared once");
    g.add_node("reply", |s: State, _c| async move {
        let n = s.get(&OTHER).copied().unwrap_or(0);
        Ok(if n >= 5 {
            Update::new().set(&MESSAGES, vec![ai(Some(&format!("ai-{n}")), "reply")])
        } else {
            Update::new()
        })
    });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    g
}

/// Runs `graph_with_other` once (`other` = 1) and returns its head `p`, then gives a command
/// whose update (a human message with id `id`) runs no node: the channel's first write, stored
/// on `p` as its input.
async fn input_stored_on_a_head(
    graph: &antler_graph::CompiledGraph,
    cfg: &RunConfig,
    id: &str,
) -> antler_graph::CheckpointId {
    let p = graph
        .invoke(Update::new().set(&OTHER, 1), cfg)
        .await
        .expect("the first run")
        .checkpoint_id
        .expect("a checkpoint");
    let mut m = Message::new(MessageType::Human, id);
    m.id = Some(id.into());
    graph
        .invoke(
            antler_graph::Command::new().update(Update::new().set(&MESSAGES, vec![m])),
            cfg,
        )
        .await
        .expect("the command");
    p
}

/// The in-process checkpointer and a delta-mode saver with snapshot frequency `f` (whose
/// history walk is the store's own).
/// `chat(f, true)` over `store`, run for `turns` turns on thread `t`: the graph, its config
/// and the head checkpoint.
async fn chat_thread(
    store: Arc<dyn antler_graph::Checkpointer>,
    f: u32,
    turns: usize,
) -> (
    antler_graph::CompiledGraph,
    RunConfig,
    antler_graph::CheckpointId,
) {
    let graph = chat(f, true)
        .compile()
        .expect("a valid graph")
        .with_checkpointer(store);
    let cfg = RunConfig::new("t");
    let mut head = None;
    for i in 0..turns {
        head = graph
            .invoke(human(i), &cfg)
            .await
            .expect("the turn runs")
            .checkpoint_id;
    }
    (graph, cfg, head.expect("at least one turn"))
}

fn both_stores(f: u32) -> [Arc<dyn antler_graph::Checkpointer>; 2] {
    let saver: Arc<dyn antler_checkpoint::Saver> = Arc::new(antler_checkpoint::MemorySaver::new(
        antler_checkpoint::StoreConfig::delta(
            antler_checkpoint::SnapshotFrequency::new(f).expect("a valid frequency"),
        ),
    ));
    [
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(antler_graph::SaverCheckpointer::new(saver)),
    ]
}

/// A snapshot forced while the delta channel has no version waits for the branch's first
/// write, and the wait is stored with the branch's checkpoints (`__forced_snapshots__`): a
/// process that loads the branch cold and writes the channel still snapshots there, so no
/// history walk replays what the branch left out. Here `update_state` on an addressed
/// checkpoint leaves out the command's update stored on it (the reference's update applies
/// pending writes only on the head), on a channel the branch has not written yet.
#[tokio::test]
async fn a_forced_snapshot_waiting_for_a_first_write_survives_a_cold_load() {
    let store = Arc::new(Recording::default());
    let graph = graph_with_other()
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let p = input_stored_on_a_head(&graph, &cfg, "left out").await;
    // A new branch from `p` by an update, which leaves that input out; the channel has no
    // version there, and the branch writes it only later, from a cold process.
    graph
        .update_state(
            &cfg.clone().with_checkpoint(p),
            Update::new().set(&OTHER, 2),
            None,
        )
        .await
        .unwrap();
    // The update's checkpoint stores the wait for the channel.
    let puts = store.puts();
    let update = puts.last().unwrap();
    assert_eq!(update.source, antler_graph::Source::Update);
    assert!(
        update
            .versions_seen
            .get("__forced_snapshots__")
            .is_some_and(|w| w.contains_key("messages")),
        "{:?}",
        update.versions_seen
    );
    let before = puts.len();
    let cold_writer = graph_with_other()
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    cold_writer
        .invoke(Update::new().set(&OTHER, 5), &cfg)
        .await
        .unwrap();
    // The cold process's first write of the channel snapshots it.
    let first = store.puts()[before..]
        .iter()
        .find(|r| r.versions.contains_key("messages"))
        .cloned()
        .unwrap();
    assert!(first.values.contains_key("messages"), "{first:?}");
    let out = cold_writer
        .invoke(Update::new().set(&OTHER, 6), &cfg)
        .await
        .unwrap();
    let live = out.values.get(&MESSAGES).cloned().unwrap();
    let ids: Vec<_> = live.iter().map(|m| m.id.as_deref()).collect();
    assert_eq!(ids, [Some("ai-5"), Some("ai-6")], "{live:?}");
    let state = cold_writer.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(state.values.get(&MESSAGES), Some(&live));
}

/// A branch started (with new input) from a checkpoint that stores a command's update to a
/// channel with no version there applies that update once, and a process that loads the
/// branch cold and writes the channel reads and extends the same list: the history walk
/// through the checkpoint replays the stored update once, not twice and not never.
#[tokio::test]
async fn a_branch_from_stored_input_on_an_unwritten_channel_reads_the_same_cold() {
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = graph_with_other()
        .compile()
        .unwrap()
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let p = input_stored_on_a_head(&graph, &cfg, "stored").await;
    // A new branch from the checkpoint the command's write is stored on; the channel has no
    // version there, and the branch's nodes write it only later, from a cold process.
    graph
        .invoke(
            Update::new().set(&OTHER, 2),
            &cfg.clone().with_checkpoint(p),
        )
        .await
        .unwrap();
    let cold_writer = graph_with_other()
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    cold_writer
        .invoke(Update::new().set(&OTHER, 5), &cfg)
        .await
        .unwrap();
    let out = cold_writer
        .invoke(Update::new().set(&OTHER, 6), &cfg)
        .await
        .unwrap();
    let live = out.values.get(&MESSAGES).cloned().unwrap();
    let ids: Vec<_> = live.iter().map(|m| m.id.as_deref()).collect();
    assert_eq!(
        ids,
        [Some("stored"), Some("ai-5"), Some("ai-6")],
        "{live:?}"
    );
    let state = cold_writer.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(state.values.get(&MESSAGES), Some(&live));
}

/// Commands whose update runs no node leave it pending on the checkpoint as input; a second
/// one adds to it instead of being dropped by the store (regular writes are insert-if-absent
/// by position), on the head and on the thread's newest update checkpoint addressed by id, so
/// a cold read equals the live state.
#[tokio::test]
async fn commands_that_run_nothing_accumulate_their_input() {
    use antler_graph::Command;
    fn idle() -> StateGraph {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(50))
            .unwrap();
        g.add_node("reply", |_s: State, _c| async move { Ok(Update::new()) });
        g.add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        g
    }
    fn command(id: &str) -> Command {
        let mut m = Message::new(MessageType::Human, id);
        m.id = Some(id.into());
        Command::new().update(Update::new().set(&MESSAGES, vec![m]))
    }
    let saver: Arc<dyn antler_checkpoint::Saver> = Arc::new(antler_checkpoint::MemorySaver::new(
        antler_checkpoint::StoreConfig::delta(
            antler_checkpoint::SnapshotFrequency::new(50).unwrap(),
        ),
    ));
    for (addressed, store) in [
        (
            false,
            Arc::new(MemoryCheckpointer::new()) as Arc<dyn antler_graph::Checkpointer>,
        ),
        (true, Arc::new(MemoryCheckpointer::new())),
        (
            false,
            Arc::new(antler_graph::SaverCheckpointer::new(saver.clone())),
        ),
        (true, Arc::new(antler_graph::SaverCheckpointer::new(saver))),
    ] {
        let graph = idle().compile().unwrap().with_checkpointer(store.clone());
        let cfg = RunConfig::new(format!("t-{addressed}"));
        graph.invoke(human(0), &cfg).await.unwrap();
        let mut at = cfg.clone();
        if addressed {
            // The newest checkpoint, an update: a run on it by id saves no fork.
            let u = graph.update_state(&cfg, human(1), None).await.unwrap();
            at = cfg.clone().with_checkpoint(u);
        }
        graph.invoke(command("x"), &at).await.unwrap();
        let out = graph.invoke(command("y"), &at).await.unwrap();
        let live = out.values.get(&MESSAGES).cloned().unwrap();
        let ids: Vec<_> = live.iter().filter_map(|m| m.id.clone()).collect();
        assert!(
            ids.ends_with(&["x".to_owned(), "y".to_owned()]),
            "addressed {addressed}: {ids:?}"
        );
        let cold = idle()
            .compile()
            .unwrap()
            .with_checkpointer(store)
            .with_hot_cache(false);
        let state = cold.get_state(&at).await.unwrap().unwrap();
        assert_eq!(
            state.values.get(&MESSAGES),
            Some(&live),
            "addressed {addressed}"
        );
    }
}

/// The command-fork path with a goto, under every durability mode, through the in-process
/// checkpointer and through a saver: the goto's node runs on the new branch, the addressed
/// checkpoint's old child reads as before, and a cold read of the branch equals the run's
/// result.
#[tokio::test]
async fn a_goto_command_on_an_addressed_checkpoint_runs_on_a_new_branch() {
    use antler_graph::{Command, Durability};
    let saver: Arc<dyn antler_checkpoint::Saver> = Arc::new(antler_checkpoint::MemorySaver::new(
        antler_checkpoint::StoreConfig::delta(
            antler_checkpoint::SnapshotFrequency::new(50).unwrap(),
        ),
    ));
    let stores: [Arc<dyn antler_graph::Checkpointer>; 2] = [
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(antler_graph::SaverCheckpointer::new(saver)),
    ];
    for (k, store) in stores.into_iter().enumerate() {
        for (d, durability) in [Durability::Sync, Durability::Async, Durability::Exit]
            .into_iter()
            .enumerate()
        {
            let graph = chat(50, true)
                .compile()
                .unwrap()
                .with_checkpointer(store.clone());
            let cfg = RunConfig::new(format!("t{k}{d}")).with_durability(durability);
            graph.invoke(human(0), &cfg).await.unwrap();
            let h = graph
                .invoke(human(1), &cfg)
                .await
                .unwrap()
                .checkpoint_id
                .unwrap();
            let child = graph.invoke(human(2), &cfg).await.unwrap();
            let mut m = Message::new(MessageType::Human, "again");
            m.id = Some("again".into());
            let out = graph
                .invoke(
                    Command::new()
                        .update(Update::new().set(&MESSAGES, vec![m]))
                        .goto("reply"),
                    &cfg.clone().with_checkpoint(h),
                )
                .await
                .unwrap();
            let live = out.values.get(&MESSAGES).cloned().unwrap();
            let ids: Vec<_> = live.iter().filter_map(|m| m.id.clone()).collect();
            // The update, then the reply the goto ran (its id counts the messages it saw).
            assert_eq!(
                ids[ids.len() - 2..],
                ["again".to_owned(), "ai-5".to_owned()],
                "{durability:?}: {ids:?}"
            );
            let cold = chat(50, true)
                .compile()
                .unwrap()
                .with_checkpointer(store.clone())
                .with_hot_cache(false);
            let branch = cfg.clone().with_checkpoint(out.checkpoint_id.unwrap());
            let state = cold.get_state(&branch).await.unwrap().unwrap();
            assert_eq!(state.values.get(&MESSAGES), Some(&live), "{durability:?}");
            let old = cfg.clone().with_checkpoint(child.checkpoint_id.unwrap());
            let state = cold.get_state(&old).await.unwrap().unwrap();
            assert_eq!(
                state.values.get(&MESSAGES),
                child.values.get(&MESSAGES),
                "{durability:?}"
            );
        }
    }
}

/// A page of history through a saver reads the page's rows with one `Saver::list` (values and
/// writes included, shared message bodies fetched once), not one `get_tuple` per checkpoint,
/// and returns what per-checkpoint reads return.
#[tokio::test]
async fn a_history_page_through_a_saver_is_one_list() {
    use antler_checkpoint as cp;
    use antler_graph::{Checkpointer, HistoryQuery, SaverCheckpointer};

    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).unwrap(),
    )));
    let counting = Arc::new(Counting::new(inner));
    relative_thread(counting.clone()).await;
    let cfg = RunConfig::new("t");
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(counting.clone())))
        .with_hot_cache(false);
    counting.take();
    let page = graph
        .get_state_history_with(&cfg, &HistoryQuery::limit(10))
        .await
        .unwrap();
    assert_eq!(page.len(), 10);
    let (valued, bare, _) = counting.take();
    assert_eq!((valued, bare), (0, 0), "no per-checkpoint read");
    // Every tuple of every page equals a fresh adapter's read of that checkpoint alone.
    let scope = cfg.scope();
    let mut before: Option<antler_graph::CheckpointId> = None;
    let mut seen = 0;
    loop {
        let paged = SaverCheckpointer::new(counting.clone())
            .list_page(&scope, before.as_ref(), 4)
            .await
            .unwrap();
        let Some(last) = paged.last() else { break };
        before = Some(last.checkpoint.id.clone());
        for t in &paged {
            let alone = SaverCheckpointer::new(counting.clone())
                .get_tuple(&scope, Some(&t.checkpoint.id))
                .await
                .unwrap();
            assert_eq!(alone.as_ref(), Some(t));
            seen += 1;
        }
    }
    assert!(seen > 20, "{seen}");
    // A checkpoint deleted between the page's list and its completion is left out, not an
    // error (the wrapper answers every value read as if the checkpoint were gone).
    counting
        .vanish
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let paged = SaverCheckpointer::new(counting.clone())
        .list_page(&scope, None, 10)
        .await
        .unwrap();
    counting
        .vanish
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(paged.len() < 10, "{}", paged.len());
}

/// A chat whose node asks a question before it answers.
fn asking() -> StateGraph {
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(50))
        .expect("declared once");
    g.add_node("ask", |s: State, ctx: antler_graph::Context| async move {
        let n = s.get(&MESSAGES).map_or(0, Vec::len);
        let answer = ctx.interrupt(serde_json::json!("name?"))?;
        Ok(Update::new().set(
            &MESSAGES,
            vec![ai(Some(&format!("ai-{n}")), &format!("hello {answer}"))],
        ))
    });
    g.add_edge("__start__", "ask").add_edge("ask", "__end__");
    g
}

/// A resume carrying an update, on an addressed interrupted checkpoint that already has
/// children (an earlier resume continued from it), does not attach the update to that
/// checkpoint: the children's history walks pass through it and would replay the update into
/// the branch that never saw it. The new branch still reads the update, cold as live. On the
/// in-process checkpointer and on SQLite through the saver adapter.
#[tokio::test]
async fn a_resume_with_an_update_on_an_addressed_checkpoint_leaves_its_children_alone() {
    for sqlite in [false, true] {
        let store = delta_store(sqlite, 50).await;
        resume_with_an_update_on_an_older_checkpoint(store).await;
    }
}

async fn resume_with_an_update_on_an_older_checkpoint(store: Arc<dyn antler_graph::Checkpointer>) {
    use antler_graph::Command;
    let graph = asking()
        .compile()
        .expect("each step of the scenario succeeds")
        .with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    let asked = graph
        .invoke(human(0), &cfg)
        .await
        .expect("each step of the scenario succeeds");
    assert_eq!(asked.interrupts.len(), 1);
    let p = asked
        .checkpoint_id
        .expect("each step of the scenario succeeds");
    // The first answer continues the interrupted step: the child of `p` and a later turn.
    graph
        .invoke(Command::resume(serde_json::json!("ada")), &cfg)
        .await
        .expect("each step of the scenario succeeds");
    graph
        .invoke(human(1), &cfg)
        .await
        .expect("each step of the scenario succeeds");
    let c = graph
        .invoke(Command::resume(serde_json::json!("bob")), &cfg)
        .await
        .expect("each step of the scenario succeeds");
    let before = c.values.get(&MESSAGES).cloned();
    // A second answer to the same interrupt, with an update, on `p` itself.
    let mut late = Message::new(MessageType::Human, "late");
    late.id = Some("late".into());
    let branch = graph
        .invoke(
            Command::resume(serde_json::json!("cy"))
                .update(Update::new().set(&MESSAGES, vec![late])),
            &cfg.clone().with_checkpoint(p.clone()),
        )
        .await
        .expect("each step of the scenario succeeds");
    let live = branch
        .values
        .get(&MESSAGES)
        .cloned()
        .expect("each step of the scenario succeeds");
    assert!(live.iter().any(|m| m.id.as_deref() == Some("late")));
    let cold = asking()
        .compile()
        .expect("each step of the scenario succeeds")
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let at = cfg
        .clone()
        .with_checkpoint(c.checkpoint_id.expect("each step of the scenario succeeds"));
    let got = cold
        .get_state(&at)
        .await
        .expect("each step of the scenario succeeds")
        .expect("each step of the scenario succeeds");
    assert_eq!(got.values.get(&MESSAGES).cloned(), before);
    let at = cfg.clone().with_checkpoint(
        branch
            .checkpoint_id
            .expect("each step of the scenario succeeds"),
    );
    let got = cold
        .get_state(&at)
        .await
        .expect("each step of the scenario succeeds")
        .expect("each step of the scenario succeeds");
    assert_eq!(got.values.get(&MESSAGES), Some(&live));
    assert_no_pending_write_mentions(store.as_ref(), &cfg.scope(), &p, "late").await;
}

/// Asserts that no pending write of checkpoint `id` mentions `text`.
async fn assert_no_pending_write_mentions(
    store: &dyn antler_graph::Checkpointer,
    scope: &antler_graph::Scope,
    id: &antler_graph::CheckpointId,
    text: &str,
) {
    let tuple = store
        .get_tuple(scope, Some(id))
        .await
        .expect("the checkpoint reads")
        .expect("the checkpoint exists");
    assert!(
        tuple
            .pending_writes
            .iter()
            .all(|w| !w.value.to_string().contains(text)),
        "{:?}",
        tuple.pending_writes
    );
}

/// A delta channel first written after a prune: its first write takes no snapshot (one update,
/// F = 2), so a cold read walks history for it, back past the pruned checkpoints; the walk
/// stops at the nearest full record that has no version of it (the channel was empty there),
/// instead of failing on the pruned parent (runtime-spec §5.5: no stored value, start from
/// empty). Before, the thread's new head could not be read.
#[tokio::test]
async fn a_delta_channel_first_written_after_a_prune_reads_back() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;
    const NOTES: Key<Vec<Message>> = Key::from_static("notes");
    fn noting() -> StateGraph {
        let mut g = chat(2, true);
        g.channel(&NOTES, ChannelSpec::messages_delta(2))
            .expect("declared once");
        g.add_node("note", |s: State, _c| async move {
            let n = s.get(&MESSAGES).map_or(0, Vec::len);
            // Notes start once the conversation is long.
            Ok(if n >= 20 {
                Update::new().set(&NOTES, vec![ai(Some(&format!("note-{n}")), "noted")])
            } else {
                Update::new()
            })
        });
        g.add_edge("reply", "note");
        g
    }
    for sqlite in [false, true] {
        let mode = cp::StoreConfig::delta(cp::SnapshotFrequency::new(2).unwrap());
        let saver: Arc<dyn cp::Saver> = if sqlite {
            Arc::new(cp::SqliteSaver::open_in_memory(mode).await.unwrap())
        } else {
            Arc::new(cp::MemorySaver::new(mode))
        };
        let graph = noting()
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
        let cfg = RunConfig::new("t");
        for i in 0..9 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        let all = saver.list(&cp::ListQuery::thread("t")).await.unwrap().len();
        saver
            .prune(&[cp::ThreadId::new("t")], cp::PruneStrategy::KeepLatest)
            .await
            .unwrap();
        let kept = saver.list(&cp::ListQuery::thread("t")).await.unwrap().len();
        assert!(
            kept < all,
            "sqlite: {sqlite}: the prune removed checkpoints ({kept} of {all} kept)"
        );
        let live = graph.invoke(human(10), &cfg).await.unwrap();
        let notes = live.values.get(&NOTES).cloned().unwrap();
        assert_eq!(notes.len(), 1, "sqlite: {sqlite}");
        let cold = noting()
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())))
            .with_hot_cache(false);
        let got = cold.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(got.values.get(&NOTES), Some(&notes), "sqlite: {sqlite}");
        assert_eq!(
            got.values.get(&MESSAGES),
            live.values.get(&MESSAGES),
            "sqlite: {sqlite}"
        );
    }
}

/// Kernel-spec R35 b–c: a full-mode process that addresses an old full checkpoint of a thread
/// whose head is delta is refused before it writes anything, by a run (R35 c checks the head as
/// well as the selected checkpoint) and by `update_state` (R35 b checks the head first); reading
/// the old checkpoint is allowed (R35 a checks only what is returned). Before, both wrote a
/// full-mode branch beside the thread's delta head.
/// Runs on the head itself and a read of the head are refused too.
#[tokio::test]
async fn r35_a_full_mode_write_on_an_old_checkpoint_checks_the_delta_head() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;

    let dir = std::env::temp_dir().join(format!("antler-graph-gate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let _ = std::fs::remove_file(&path);
    let full_chat = || {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages()).unwrap();
        g.add_node("reply", |s: State, _c| async move {
            let n = s.get(&MESSAGES).map_or(0, Vec::len);
            Ok(Update::new().set(&MESSAGES, vec![ai(Some(&format!("ai-{n}")), "reply")]))
        });
        g.add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        g.compile().unwrap()
    };
    let cfg = RunConfig::new("t");
    // Two full-mode turns; the first turn's last checkpoint is the one addressed later.
    let old = {
        let saver = Arc::new(
            cp::SqliteSaver::open(&path, cp::StoreConfig::full())
                .await
                .unwrap(),
        );
        let graph = full_chat().with_checkpointer(Arc::new(SaverCheckpointer::new(saver)));
        graph.invoke(human(0), &cfg).await.unwrap();
        let old = graph.get_state(&cfg).await.unwrap().unwrap().checkpoint_id;
        graph.invoke(human(1), &cfg).await.unwrap();
        old
    };
    // The thread moves on in delta mode.
    {
        let config = cp::StoreConfig::delta(cp::SnapshotFrequency::new(3).unwrap())
            .allow_full_to_delta_migration();
        let saver = Arc::new(cp::SqliteSaver::open(&path, config).await.unwrap());
        let graph = chat(3, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver)));
        graph.invoke(human(2), &cfg).await.unwrap();
    }
    // A full-mode process on a store whose record says full mode (as a store that does not
    // record its mode, the reference's, lets one open): the per-checkpoint gate decides.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "UPDATE antler_meta SET value = 'full' WHERE key = 'channel_mode';
             UPDATE antler_meta SET value = '10' WHERE key = 'snapshot_frequency';",
        )
        .unwrap();
    let saver = Arc::new(
        cp::SqliteSaver::open(&path, cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    // Counted raw: a full-mode list of the thread fails on its delta checkpoints.
    let count = || async {
        rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap()
    };
    let before = count().await;
    let graph = full_chat().with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
    let at_old = cfg.clone().with_checkpoint(old);
    let read = graph.get_state(&at_old).await.unwrap().unwrap();
    assert_eq!(
        read.values.get(&MESSAGES).map(Vec::len),
        Some(2),
        "R35 a: the old checkpoint reads"
    );
    // The saver's kind is reachable for callers that branch on it.
    let mismatch = Some(cp::ErrorKind::ModeMismatch);
    let err = graph.invoke(human(3), &at_old).await.unwrap_err();
    assert!(err.to_string().contains("requires delta mode"), "{err}");
    assert_eq!(err.checkpoint_kind(), mismatch, "{err}");
    let err = graph.invoke(Input::Continue, &at_old).await.unwrap_err();
    assert!(err.to_string().contains("requires delta mode"), "{err}");
    assert_eq!(err.checkpoint_kind(), mismatch, "{err}");
    let err = graph
        .update_state(&at_old, human(4), Some(antler_graph::NodeId::new("reply")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("requires delta mode"), "{err}");
    assert_eq!(err.checkpoint_kind(), mismatch, "{err}");
    assert_eq!(antler_graph::Error::NoCheckpointer.checkpoint_kind(), None);
    // R35 c on the thread's head itself (no checkpoint addressed): a run with new input and a
    // run that continues both stop at the delta head; R35 a: reading the head fails closed.
    for input in [Input::Values(human(5)), Input::Continue] {
        let err = graph.invoke(input, &cfg).await.unwrap_err();
        assert!(err.to_string().contains("requires delta mode"), "{err}");
        assert_eq!(err.checkpoint_kind(), mismatch, "{err}");
    }
    let err = graph.get_state(&cfg).await.unwrap_err();
    assert!(err.to_string().contains("requires delta mode"), "{err}");
    assert_eq!(count().await, before, "nothing was written");
}

/// A replay that runs from the addressed checkpoint itself (the thread's newest, an update, so
/// no fork is saved) re-runs tasks whose earlier writes are stored on that checkpoint; the
/// store keeps the first write at each position, so the re-run's delta-channel writes must
/// reach the next checkpoint as a snapshot, or a cold read replays the stale ones. Before,
/// the hot state held the re-run's message and a cold read did not.
#[tokio::test]
async fn a_replay_in_place_snapshots_what_its_rerun_tasks_write() {
    use antler_graph::NodeError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let agent_runs = Arc::new(AtomicUsize::new(0));
    let checker_runs = Arc::new(AtomicUsize::new(0));
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(10))
        .unwrap();
    const NOTE: Key<String> = Key::from_static("note");
    g.channel(&NOTE, ChannelSpec::last_value()).unwrap();
    let runs = agent_runs.clone();
    g.add_node("agent", move |_s: State, _c| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            // The first run writes only a plain key; the re-run writes a message.
            Ok(if n == 0 {
                Update::new().set(&NOTE, "first".to_owned())
            } else {
                Update::new().set(&MESSAGES, vec![ai(Some("m-rerun"), "re-run reply")])
            })
        }
    });
    let runs = checker_runs.clone();
    g.add_node("checker", move |_s: State, _c| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err(NodeError::failed(std::io::Error::other(
                    "checker fails once",
                )))
            } else {
                Ok(Update::new())
            }
        }
    });
    g.add_edge("__start__", "agent")
        .add_edge("__start__", "checker")
        .add_edge("agent", "__end__")
        .add_edge("checker", "__end__");
    let store = Arc::new(MemoryCheckpointer::new());
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    // U: an update that seeds the thread and leaves agent and checker next.
    let u = graph
        .update_state(&cfg, human(0), Some(antler_graph::NodeId::new("__start__")))
        .await
        .unwrap();
    // agent finishes (its write stored on U), checker fails: U stays the newest.
    assert!(graph.invoke(Input::Continue, &cfg).await.is_err());
    // Replay U in place: both run again, agent now writes a message.
    let out = graph
        .invoke(Input::Continue, &cfg.clone().with_checkpoint(u))
        .await
        .unwrap();
    let ids = |v: &[Message]| v.iter().filter_map(|m| m.id.clone()).collect::<Vec<_>>();
    let hot = out.values.get(&MESSAGES).unwrap();
    assert_eq!(ids(hot), ["h-0", "m-rerun"]);
    let cold_graph = {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(10))
            .unwrap();
        g.channel(&NOTE, ChannelSpec::last_value()).unwrap();
        g.add_node("agent", |_s: State, _c| async { Ok(Update::new()) });
        g.add_node("checker", |_s: State, _c| async { Ok(Update::new()) });
        g.add_edge("__start__", "agent")
            .add_edge("__start__", "checker")
            .add_edge("agent", "__end__")
            .add_edge("checker", "__end__");
        g.compile()
            .unwrap()
            .with_checkpointer(store)
            .with_hot_cache(false)
    };
    let cold = cold_graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(ids(cold.values.get(&MESSAGES).unwrap()), ["h-0", "m-rerun"]);
}

/// A history page whose every checkpoint went between its listing and its reads is not
/// the end of the history while older checkpoints remain: the page is read again (before, it
/// came back empty and a caller paging back stopped there).
#[tokio::test]
async fn an_emptied_history_page_is_read_again_while_older_checkpoints_remain() {
    use antler_checkpoint as cp;
    use antler_graph::{HistoryQuery, SaverCheckpointer};
    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(3).expect("a valid frequency"),
    )));
    let counting = Arc::new(Counting::new(inner.clone()));
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(counting.clone())));
    let cfg = RunConfig::new("t");
    for i in 0..4 {
        graph.invoke(human(i), &cfg).await.unwrap();
    }
    let query = HistoryQuery::limit(3);
    let want = graph.get_state_history_with(&cfg, &query).await.unwrap();
    assert_eq!(want.len(), 3);
    counting
        .emptied_lists
        .store(1, std::sync::atomic::Ordering::Relaxed);
    let got = graph.get_state_history_with(&cfg, &query).await.unwrap();
    let ids = |v: &[antler_graph::StateSnapshot]| {
        v.iter()
            .map(|s| s.checkpoint_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&got), ids(&want));
    // A page that every read finds emptied is an error, not the end of the history.
    counting
        .emptied_lists
        .store(usize::MAX, std::sync::atomic::Ordering::Relaxed);
    let err = graph
        .get_state_history_with(&cfg, &query)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), antler_graph::ErrorKind::Storage, "{err}");
    assert!(
        err.to_string().contains("older checkpoints remain"),
        "{err}"
    );
    counting
        .emptied_lists
        .store(0, std::sync::atomic::Ordering::Relaxed);
    // At the real end, an empty page stays empty.
    let all = graph.get_state_history(&cfg).await.unwrap();
    let mut end = HistoryQuery::limit(3);
    end.before = all.last().map(|s| s.checkpoint_id.clone());
    assert!(
        graph
            .get_state_history_with(&cfg, &end)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The graph crate's in-memory checkpointer and a `SaverCheckpointer` over a delta-mode saver.
fn both_delta_stores() -> Vec<Arc<dyn antler_graph::Checkpointer>> {
    use antler_checkpoint as cp;
    vec![
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(antler_graph::SaverCheckpointer::new(Arc::new(
            cp::MemorySaver::new(cp::StoreConfig::delta(
                cp::SnapshotFrequency::new(10).expect("a valid frequency"),
            )),
        ))),
    ]
}

/// `chat`, with `messages` declared as an ordinary reducer channel (full mode).
fn chat_full() -> StateGraph {
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages())
        .expect("declared once");
    g.add_node("reply", |s: State, _c| async move {
        let n = s.get(&MESSAGES).map_or(0, Vec::len);
        let id = format!("ai-{n}");
        Ok(Update::new().set(&MESSAGES, vec![ai(Some(&id), &format!("reply {n}"))]))
    });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    g
}

/// Runtime-spec §5.5 ([1.2.22]) and §5.6: a graph that declares `messages` as an ordinary reducer
/// channel rebuilds a thread written through a delta channel from its history (a version without
/// a stored value), never as an empty list; going on in either mode keeps every message.
#[tokio::test]
async fn a_full_graph_rebuilds_a_delta_thread_from_its_history() {
    for store in both_delta_stores() {
        let delta = chat(10, true)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let full = chat_full()
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let cfg = RunConfig::new("t");
        for i in 0..2 {
            delta.invoke(human(i), &cfg).await.unwrap();
        }
        let messages = |s: antler_graph::StateSnapshot| s.values.get(&MESSAGES).cloned();
        let live = messages(delta.get_state(&cfg).await.unwrap().unwrap()).unwrap();
        assert_eq!(live.len(), 4);
        assert_eq!(
            messages(full.get_state(&cfg).await.unwrap().unwrap()).as_ref(),
            Some(&live),
            "the full graph's read of the delta head"
        );
        let out = full.invoke(human(2), &cfg).await.unwrap();
        assert_eq!(out.values.get(&MESSAGES).map(Vec::len), Some(6));
        // The full graph stored a plain value: the delta graph seeds from it.
        let out = delta.invoke(human(3), &cfg).await.unwrap();
        assert_eq!(out.values.get(&MESSAGES).map(Vec::len), Some(8));
        assert_eq!(
            messages(full.get_state(&cfg).await.unwrap().unwrap()).map(|m| m.len()),
            Some(8)
        );
    }
}

/// Kernel-spec R36: a history page of zero is empty, without reading the store (before, the
/// empty page looked emptied by a concurrent delete, and after 16 reads the page failed).
#[tokio::test]
async fn a_history_page_of_zero_is_empty() {
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let cfg = RunConfig::new("t");
    graph.invoke(human(0), &cfg).await.unwrap();
    let page = graph
        .get_state_history_with(&cfg, &antler_graph::HistoryQuery::limit(0))
        .await
        .unwrap();
    assert!(page.is_empty());
}

/// A graph with a delta channel over a full-mode store fails before it writes, naming the channel
/// and the cause (before, the store refused the first checkpoint of a brand-new thread with
/// "requires delta mode", as if the thread had been written in delta mode).
#[tokio::test]
async fn a_delta_graph_over_a_full_mode_store_is_refused_before_any_write() {
    use antler_checkpoint as cp;
    use antler_graph::{Error, ErrorKind, SaverCheckpointer};
    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::full()));
    let graph = chat(3, true)
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
    let cfg = RunConfig::new("t");
    let err = graph.invoke(human(0), &cfg).await.unwrap_err();
    assert!(
        matches!(&err, Error::StoreModeMismatch { channel } if channel == "messages"),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Build);
    let err = graph
        .update_state(&cfg, human(0), Some("reply".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StoreModeMismatch { .. }), "{err}");
    assert!(
        saver
            .list(&cp::ListQuery::thread("t"))
            .await
            .unwrap()
            .is_empty()
    );
    // The same graph in full mode runs on it.
    chat_full()
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(saver)))
        .invoke(human(0), &cfg)
        .await
        .unwrap();
}

/// A graph whose delta `messages` channel snapshots at another frequency than the store records
/// is refused before any write, as every process sharing a store must use its frequency
/// (kernel-spec R30); the graph with the store's frequency runs. Before, it ran, and reads of
/// its thread replayed up to its own frequency of writes.
#[tokio::test]
async fn a_delta_graph_with_another_snapshot_frequency_than_the_store_is_refused() {
    use antler_checkpoint as cp;
    use antler_graph::{Error, ErrorKind, SaverCheckpointer};
    let config = cp::StoreConfig::delta(cp::SnapshotFrequency::new(10).unwrap());
    let saver: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(config));
    let over = |f: u32| {
        chat(f, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())))
    };
    let cfg = RunConfig::new("t");
    let err = over(50).invoke(human(0), &cfg).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::SnapshotFrequencyMismatch { channel, graph: 50, store: 10 } if channel == "messages"
        ),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Build);
    let err = over(50)
        .update_state(&cfg, human(0), Some("reply".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SnapshotFrequencyMismatch { .. }),
        "{err}"
    );
    assert!(
        saver
            .list(&cp::ListQuery::thread("t"))
            .await
            .unwrap()
            .is_empty()
    );
    over(10).invoke(human(0), &cfg).await.unwrap();
    // The in-process checkpointer records no frequency: any graph runs on it.
    for f in [3, 50] {
        chat(f, true)
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
            .invoke(human(0), &cfg)
            .await
            .unwrap();
    }
}

/// A full-mode graph that rebuilt `messages` from a delta thread's history stores the value at
/// its first checkpoint: a fork of a checkpoint whose step wrote `messages` reads, cold, the
/// state it forked (before, the fork kept the version without a value, and its walk replayed
/// the forked checkpoint's pending write, which the fork never applied).
#[tokio::test]
async fn a_full_graph_stores_a_rebuilt_channel_at_its_first_checkpoint() {
    use antler_graph::Source;
    for store in both_delta_stores() {
        let delta = chat(10, true)
            .compile()
            .unwrap()
            .with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        delta.invoke(human(0), &cfg).await.unwrap();
        delta.invoke(human(1), &cfg).await.unwrap();
        // C: the checkpoint `reply` ran from in the second turn (its write is pending there).
        let history = delta.get_state_history(&cfg).await.unwrap();
        let c = history
            .iter()
            .find(|s| {
                s.next == vec![antler_graph::NodeId::from("reply")]
                    && s.values.get(&MESSAGES).map(Vec::len) == Some(3)
            })
            .expect("the checkpoint before the second reply")
            .clone();
        let full = chat_full()
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        full.invoke(
            Input::Continue,
            &cfg.clone().with_checkpoint(c.checkpoint_id.clone()),
        )
        .await
        .unwrap();
        let fork = full
            .get_state_history(&cfg)
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.source == Source::Fork)
            .expect("the replay saved a fork");
        // A fresh adapter: no record maps cached from the writes.
        let cold = chat_full()
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false)
            .get_state(&cfg.clone().with_checkpoint(fork.checkpoint_id.clone()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cold.values.get(&MESSAGES), c.values.get(&MESSAGES));
    }
}

/// Runtime-spec §5.4: the super-step bound is a delta channel's setting; a channel that stopped
/// receiving writes snapshots once that many checkpoints passed since its last snapshot, and a
/// bound of 0 is a build error.
#[tokio::test]
async fn the_superstep_bound_snapshots_a_channel_that_stopped_receiving_writes() {
    const OTHER: Key<i64> = Key::from_static("other");
    let store = Arc::new(Recording::default());
    let mut g = StateGraph::new();
    g.channel(
        &MESSAGES,
        ChannelSpec::messages_delta(100).with_max_supersteps_since_snapshot(4),
    )
    .unwrap();
    g.channel(&OTHER, ChannelSpec::last_value()).unwrap();
    g.add_node("reply", |_s: State, _c| async { Ok(Update::new()) });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    let graph = g
        .compile()
        .unwrap()
        .with_checkpointer(store.clone())
        .with_hot_cache(false);
    let cfg = RunConfig::new("t");
    graph.invoke(human(0), &cfg).await.unwrap();
    for i in 0..3 {
        graph
            .invoke(Update::new().set(&OTHER, i), &cfg)
            .await
            .unwrap();
    }
    let got: Vec<String> = store.puts().iter().map(counters_of).collect();
    // Three checkpoints per invoke (input, `__start__`, `reply`); the human message arrives
    // with `__start__`'s step, and from then on nothing writes `messages`: every fourth
    // checkpoint snapshots it (with the default bound of 5000, none would).
    assert_eq!(
        got,
        vec![
            "(0,1)",
            "(1,2)",
            "(1,3)",
            "- snapshot",
            "(0,1)",
            "(0,2)",
            "(0,3)",
            "- snapshot",
            "(0,1)",
            "(0,2)",
            "(0,3)",
            "- snapshot"
        ]
    );
    let mut g = StateGraph::new();
    let err = g
        .channel(
            &MESSAGES,
            ChannelSpec::messages_delta(10).with_max_supersteps_since_snapshot(0),
        )
        .err();
    assert_eq!(
        err,
        Some(antler_graph::BuildError::InvalidSuperstepBound {
            channel: "messages".into()
        })
    );
}

/// A child made from an interrupted checkpoint without finishing its step (new input that
/// abandons the step, or an update) snapshots its delta channels: a resume addressed to the
/// older checkpoint later stores the re-run task's writes there, and the child's history walk
/// passes through it (runtime-spec §5.4: writes a branch never applied must not leak into its
/// walk). Before, a cold read of the child showed the answer given on the other branch. On the
/// in-process checkpointer and on SQLite through the saver adapter.
#[tokio::test]
async fn a_late_resume_of_an_older_checkpoint_does_not_leak_into_its_children() {
    use antler_graph::Command;
    for (sqlite, by_update) in [(false, false), (true, false), (false, true), (true, true)] {
        let store = delta_store(sqlite, 50).await;
        let graph = asking().compile().unwrap().with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        let p = graph
            .invoke(human(0), &cfg)
            .await
            .unwrap()
            .checkpoint_id
            .unwrap();
        // The child: new input that abandons the interrupted step, or an update on it.
        let child = if by_update {
            graph.update_state(&cfg, human(1), None).await.unwrap()
        } else {
            graph
                .invoke(human(1), &cfg)
                .await
                .unwrap()
                .checkpoint_id
                .unwrap()
        };
        let at = cfg.clone().with_checkpoint(child.clone());
        let before = graph
            .get_state(&at)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned();
        // A late answer on the older checkpoint: `ask` re-runs there and stores its reply.
        let other = graph
            .invoke(
                Command::resume(serde_json::json!("cy")),
                &cfg.clone().with_checkpoint(p),
            )
            .await
            .unwrap();
        assert!(
            other
                .values
                .get(&MESSAGES)
                .unwrap()
                .iter()
                .any(|m| m.content.text().contains("cy")),
            "the late answer's own branch has it"
        );
        let cold = asking()
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let got = cold
            .get_state(&at)
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned();
        assert_eq!(
            got, before,
            "sqlite: {sqlite}, update: {by_update}: a cold read of the child"
        );
        let history = cold.get_state_history(&cfg).await.unwrap();
        let listed = history
            .iter()
            .find(|s| s.checkpoint_id == child)
            .map(|s| s.values.get(&MESSAGES).cloned());
        assert_eq!(
            listed,
            Some(before),
            "sqlite: {sqlite}, update: {by_update}: the history"
        );
    }
}

/// `update_state` on an addressed checkpoint leaves the input stored there out (a command's
/// update, which the branch that continued from it applied), and its delta channels snapshot,
/// so the update's history walk, which passes through that checkpoint, does not replay it
/// either. On the in-process checkpointer and on SQLite through the saver adapter.
#[tokio::test]
async fn an_update_on_an_addressed_checkpoint_does_not_replay_its_stored_input() {
    use antler_graph::Command;
    for sqlite in [false, true] {
        let store = delta_store(sqlite, 50).await;
        let build = || {
            let mut g = chat(50, true);
            g.channel(&crate::common::LAST, ChannelSpec::last_value())
                .unwrap();
            g.compile().unwrap()
        };
        let graph = build().with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        let head = graph
            .invoke(human(0), &cfg)
            .await
            .unwrap()
            .checkpoint_id
            .unwrap();
        // A command on the finished head runs nothing: its update stays stored there.
        graph
            .invoke(Command::new().update(human(9)), &cfg)
            .await
            .unwrap();
        let fork = graph
            .update_state(
                &cfg.clone().with_checkpoint(head),
                // An update that leaves `messages` alone: only the snapshot forced for the
                // input it does not apply keeps the walk from replaying that input.
                Update::new().set(&crate::common::LAST, "note".to_owned()),
                Some("reply".into()),
            )
            .await
            .unwrap();
        let cold = build()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let got = cold
            .get_state(&cfg.clone().with_checkpoint(fork))
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned()
            .unwrap();
        let ids: Vec<_> = got.iter().filter_map(|m| m.id.clone()).collect();
        // The head's state (`h-0`, the reply), without the command's `h-9`.
        assert_eq!(
            ids,
            ["h-0", "ai-1"],
            "sqlite: {sqlite}: the fork, read cold"
        );
    }
}

/// A resume with a `goto`, addressed to an older checkpoint whose step already finished on
/// another branch, answers no interrupt: it forks like time travel, so the new task's writes
/// do not land on that checkpoint, whose existing child's history walk would replay them.
/// Before, a cold read of that child showed the new task's message.
#[tokio::test]
async fn a_resume_with_goto_on_a_finished_older_checkpoint_forks() {
    use antler_graph::Command;
    let build = || {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(100))
            .unwrap();
        for name in ["a", "b"] {
            g.add_node(name, move |s: State, _c| async move {
                let n = s.get(&MESSAGES).map_or(0, Vec::len);
                let id = format!("{name}-{n}");
                Ok(Update::new().set(&MESSAGES, vec![ai(Some(&id), name)]))
            });
        }
        g.add_edge("__start__", "a")
            .add_edge("a", "b")
            .add_edge("b", "__end__");
        g.compile().unwrap()
    };
    for sqlite in [false, true] {
        let store = delta_store(sqlite, 100).await;
        let graph = build().with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        graph.invoke(human(0), &cfg).await.unwrap();
        let history = graph.get_state_history(&cfg).await.unwrap();
        // `c`: the checkpoint with `b` next; `c1`: its child, after `b` ran.
        let c = history
            .iter()
            .find(|s| s.next.iter().any(|n| n.as_str() == "b"))
            .unwrap();
        let c1 = history
            .iter()
            .find(|s| s.parent_id.as_ref() == Some(&c.checkpoint_id))
            .unwrap();
        let before = c1.values.get(&MESSAGES).cloned();
        graph
            .invoke(
                Command::resume(serde_json::Value::Null).goto("a"),
                &cfg.clone().with_checkpoint(c.checkpoint_id.clone()),
            )
            .await
            .unwrap();
        let cold = build()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let got = cold
            .get_state(&cfg.clone().with_checkpoint(c1.checkpoint_id.clone()))
            .await
            .unwrap()
            .unwrap()
            .values
            .get(&MESSAGES)
            .cloned();
        assert_eq!(got, before, "sqlite: {sqlite}: the older child, read cold");
    }
}

/// `update_state` with no values as `__end__` clears the pending step (the reference's
/// branch of its update for it): the interrupted task will not run, the finished sibling's
/// result is applied, and what that result triggers is next. On a delta `messages` channel,
/// through both stores; a cold read shows what the live graph shows. Values as `__end__`
/// are refused, and a clear on a fresh thread stores an empty update checkpoint. Before, every
/// `__end__` update was refused as an unknown node.
#[tokio::test]
async fn an_update_as_end_without_values_clears_the_pending_step() {
    use antler_graph::{Context, Error};
    let build = || {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(2))
            .expect("declared once");
        g.add_node("a", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(Some("a"), "from a")]))
        });
        g.add_node("after_a", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(Some("after"), "after a")]))
        });
        g.add_node("ask", |_s: State, ctx: Context| async move {
            let answer = ctx.interrupt(serde_json::json!("go on?"))?;
            Ok(Update::new().set(&MESSAGES, vec![ai(Some("asked"), &answer.to_string())]))
        });
        g.add_edge("__start__", "a")
            .add_edge("__start__", "ask")
            .add_edge("a", "after_a")
            .add_edge("after_a", "__end__")
            .add_edge("ask", "__end__");
        g
    };
    let ids = |s: &antler_graph::StateSnapshot| -> Vec<String> {
        s.values
            .get(&MESSAGES)
            .map(|m| m.iter().filter_map(|m| m.id.clone()).collect())
            .unwrap_or_default()
    };
    for store in both_stores(2) {
        let graph = build().compile().unwrap().with_checkpointer(store.clone());
        let cfg = RunConfig::new("t");
        let out = graph.invoke(human(0), &cfg).await.unwrap();
        assert_eq!(out.interrupts.len(), 1);
        let end = Some(antler_graph::NodeId::from("__end__"));
        let refused = graph
            .update_state(&cfg, human(1), end.clone())
            .await
            .unwrap_err();
        // As the reference, which finds no node `__end__` to take values
        // (`InvalidUpdateError`).
        assert!(
            matches!(&refused, Error::UnknownNode { node } if node == "__end__"),
            "{refused}"
        );
        graph
            .update_state(&cfg, Update::new(), end.clone())
            .await
            .unwrap();
        let cleared = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(ids(&cleared), ["h-0", "a"]);
        assert_eq!(cleared.next, [antler_graph::NodeId::from("after_a")]);
        assert!(cleared.tasks.iter().all(|t| t.interrupts.is_empty()));
        let cold = build()
            .compile()
            .unwrap()
            .with_checkpointer(store.clone())
            .with_hot_cache(false);
        let read = cold.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!((ids(&read), read.next), (ids(&cleared), cleared.next));
        // The run goes on from the cleared step: `after_a` runs, `ask` does not.
        let done = graph.invoke(Input::Continue, &cfg).await.unwrap();
        assert!(done.interrupts.is_empty());
        let last = graph.get_state(&cfg).await.unwrap().unwrap();
        assert_eq!(ids(&last), ["h-0", "a", "after"]);
        assert!(last.next.is_empty());
        // A fresh thread: an empty update checkpoint, nothing next.
        let fresh = RunConfig::new("fresh");
        graph
            .update_state(&fresh, Update::new(), end)
            .await
            .unwrap();
        let s = graph.get_state(&fresh).await.unwrap().unwrap();
        assert!(ids(&s).is_empty() && s.next.is_empty());
    }
}

/// The two checkpointers answer alike for ids that name no stored checkpoint: a read finds
/// nothing (an id in another spelling than the stored one included), and a write or a history
/// walk addressed to one is `CheckpointNotFound`. Before 2026-12-01 the saver adapter failed
/// every read of an unparseable id with a storage error, found a checkpoint under an uppercase
/// spelling of its id, and reported an unknown checkpoint of a write or walk as a storage error.
#[tokio::test]
async fn both_checkpointers_answer_alike_for_ids_that_name_no_checkpoint() {
    use antler_graph::{CheckpointId, ErrorKind, Scope};
    for store in both_stores(10) {
        let (graph, cfg, head) = chat_thread(store.clone(), 10, 1).await;
        let scope = Scope::root("t");
        let upper = CheckpointId::new(head.as_str().to_uppercase());
        for id in [CheckpointId::new("nope"), upper] {
            assert!(
                store.get_tuple(&scope, Some(&id)).await.unwrap().is_none(),
                "{id}"
            );
            let e = store
                .put_writes(
                    &scope,
                    &id,
                    &antler_graph::TaskId::new("x"),
                    "",
                    vec![("messages".to_owned(), serde_json::json!([]))],
                )
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotFound, "{id}: {e}");
            let e = store
                .delta_history(&scope, &id, &["messages".to_owned()])
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotFound, "{id}: {e}");
            let e = graph
                .get_state(&cfg.clone().with_checkpoint(id.clone()))
                .await;
            assert!(
                matches!(
                    e,
                    Ok(None) | Err(antler_graph::Error::CheckpointNotFound { .. })
                ),
                "{id}: {e:?}"
            );
        }
        // An unknown id in the stored spelling.
        let missing = CheckpointId::new("1f0d5a3e-0000-7000-8000-000000000000");
        let e = store
            .delta_history(&scope, &missing, &["messages".to_owned()])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    }
}

/// A history bound (`HistoryQuery::before`) not spelled as the runtime spells ids is refused
/// as input on both checkpointers, with and without a limit: an upper-case spelling of a
/// real id and text that is no id. Before 2026-12-01 the upper-case spelling paged
/// differently with and without a limit, and other text was a storage error with one.
#[tokio::test]
async fn a_history_bound_in_another_spelling_is_refused_alike() {
    use antler_graph::{CheckpointId, Error, ErrorKind, HistoryQuery};
    for store in both_stores(10) {
        let (graph, cfg, head) = chat_thread(store.clone(), 10, 1).await;
        let upper = CheckpointId::new(head.as_str().to_uppercase());
        for id in [CheckpointId::new("nope"), upper] {
            for query in [HistoryQuery::default(), HistoryQuery::limit(2)] {
                let e = graph
                    .get_state_history_with(&cfg, &query.before(id.clone()))
                    .await
                    .unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Input, "{id}: {e}");
                assert!(matches!(e, Error::InvalidCheckpointId { .. }), "{e:?}");
            }
        }
        // The stored spelling bounds as before.
        let older = graph
            .get_state_history_with(&cfg, &HistoryQuery::default().before(head.clone()))
            .await
            .unwrap();
        assert!(
            older
                .iter()
                .all(|s| s.checkpoint_id.as_str() < head.as_str())
        );
        assert!(!older.is_empty());
    }
}

/// `g` compiled over the SQLite file at `path`, opened with `config`.
async fn on_file(
    g: StateGraph,
    path: &std::path::Path,
    config: antler_checkpoint::StoreConfig,
) -> antler_graph::CompiledGraph {
    let saver = Arc::new(
        antler_checkpoint::SqliteSaver::open(path, config)
            .await
            .expect("the store opens"),
    );
    g.compile()
        .expect("a valid graph")
        .with_checkpointer(Arc::new(antler_graph::SaverCheckpointer::new(saver)))
}

/// A fresh SQLite file path for a migration test.
fn migration_store(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("antler-graph-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("store.db");
    let _ = std::fs::remove_file(&path);
    path
}

/// Delta mode at F = 3, taking over a full-mode store.
fn migrating_delta() -> antler_checkpoint::StoreConfig {
    antler_checkpoint::StoreConfig::delta(
        antler_checkpoint::SnapshotFrequency::new(3).expect("a positive frequency"),
    )
    .allow_full_to_delta_migration()
}

/// Each message's text and id.
fn texts_and_ids(list: Option<&Vec<Message>>) -> Vec<(String, Option<String>)> {
    list.expect("a message list")
        .iter()
        .map(|m| (m.content.text(), m.id.clone()))
        .collect()
}

/// Two cold reads of thread `t`, each through a graph built by `delta` on a freshly opened
/// store, show the messages `live` shows, ids included.
async fn cold_reads_show<F, Fut>(delta: F, live: &[(String, Option<String>)])
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = antler_graph::CompiledGraph>,
{
    assert!(live.iter().all(|(_, id)| id.is_some()), "{live:?}");
    for _ in 0..2 {
        let read = delta()
            .await
            .get_state(&RunConfig::new("t"))
            .await
            .expect("the read succeeds")
            .expect("the thread has a head");
        assert_eq!(texts_and_ids(read.values.get(&MESSAGES)), live);
    }
}

/// A stored task write whose messages have no ids (full mode stores writes as the node
/// returned them) gets its ids stamped when a delta-mode run applies it, and the checkpoint
/// that step stores is a snapshot: every later read shows the ids the run returned. Before, the
/// checkpoint stored no snapshot, so each cold read replayed the id-less write and stamped new
/// random ids (kernel-spec R41: stamped ids persist).
#[tokio::test]
async fn a_stored_write_without_ids_applied_in_delta_mode_keeps_the_ids_it_was_given() {
    use antler_graph::NodeError;
    use std::sync::atomic::{AtomicBool, Ordering};

    let path = migration_store("ids");
    // START → {a, b}: `a` returns a message without an id, `b` fails while `fail` is set.
    let fail = Arc::new(AtomicBool::new(true));
    let fan_out = |delta: bool| {
        let mut g = StateGraph::new();
        let spec = if delta {
            ChannelSpec::messages_delta(3)
        } else {
            ChannelSpec::messages()
        };
        g.channel(&MESSAGES, spec).unwrap();
        g.add_node("a", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(None, "from a")]))
        });
        let fail = fail.clone();
        g.add_node("b", move |_s: State, _c| {
            let fail = fail.load(Ordering::SeqCst);
            async move {
                if fail {
                    return Err(NodeError::failed("b fails once"));
                }
                Ok(Update::new().set(&MESSAGES, vec![ai(Some("b-1"), "from b")]))
            }
        });
        g.add_edge("__start__", "a")
            .add_edge("__start__", "b")
            .add_edge("a", "__end__")
            .add_edge("b", "__end__");
        g
    };
    let cfg = RunConfig::new("t");
    on_file(
        fan_out(false),
        &path,
        antler_checkpoint::StoreConfig::full(),
    )
    .await
    .invoke(human(0), &cfg)
    .await
    .unwrap_err();
    fail.store(false, Ordering::SeqCst);
    let delta = || on_file(fan_out(true), &path, migrating_delta());
    let out = delta().await.invoke(Input::Continue, &cfg).await.unwrap();
    let live = texts_and_ids(out.values.get(&MESSAGES));
    assert_eq!(live.len(), 3, "{live:?}");
    cold_reads_show(delta, &live).await;
    let _ = std::fs::remove_file(&path);
}

/// The same for a stored value without ids (full mode stores an Overwrite's list as given):
/// the delta channel's first write after the migration stamps ids on it, and its checkpoint is
/// a snapshot, so every later read shows the ids the run returned.
#[tokio::test]
async fn a_stored_value_without_ids_keeps_the_ids_its_first_delta_write_stamps() {
    let path = migration_store("base-ids");
    let reset = |delta: bool| {
        let mut g = StateGraph::new();
        let spec = if delta {
            ChannelSpec::messages_delta(3)
        } else {
            ChannelSpec::messages()
        };
        g.channel(&MESSAGES, spec).unwrap();
        g.add_node("reply", move |_s: State, _c| async move {
            Ok(if delta {
                Update::new().set(&MESSAGES, vec![ai(Some("later"), "later")])
            } else {
                Update::new().overwrite(&MESSAGES, vec![ai(None, "reset")])
            })
        });
        g.add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        g
    };
    let cfg = RunConfig::new("t");
    let out = on_file(reset(false), &path, antler_checkpoint::StoreConfig::full())
        .await
        .invoke(human(0), &cfg)
        .await
        .unwrap();
    let list = out.values.get(&MESSAGES).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, None, "an Overwrite's list is stored as given");
    let delta = || on_file(reset(true), &path, migrating_delta());
    let out = delta().await.invoke(human(1), &cfg).await.unwrap();
    cold_reads_show(delta, &texts_and_ids(out.values.get(&MESSAGES))).await;
    let _ = std::fs::remove_file(&path);
}

/// A saver whose history walk leaves a requested channel out fails the read with a typed
/// `Corrupt` error instead of showing the channel empty (before 2026-12-02 the adapter took
/// the missing history as an empty channel: a cold `get_state` showed no messages).
#[tokio::test]
async fn a_history_walk_that_leaves_a_channel_out_fails_closed() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;
    let inner: Arc<dyn cp::Saver> = Arc::new(cp::MemorySaver::new(cp::StoreConfig::delta(
        cp::SnapshotFrequency::new(10).unwrap(),
    )));
    let counting = Arc::new(Counting::new(inner));
    let build = || {
        let mut g = StateGraph::new();
        g.channel(&MESSAGES, ChannelSpec::messages_delta(10))
            .unwrap();
        g.add_node("reply", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(None, "r")]))
        });
        g.add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        g.compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(counting.clone())))
    };
    let cfg = RunConfig::new("t");
    let graph = build();
    for i in 0..3 {
        graph.invoke(human(i), &cfg).await.unwrap();
    }
    let want = build().get_state(&cfg).await.unwrap().expect("a state");
    assert_eq!(want.values.get(&MESSAGES).map(Vec::len), Some(6));
    counting
        .forget_histories
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let err = build().get_state(&cfg).await.unwrap_err();
    assert_eq!(err.checkpoint_kind(), Some(cp::ErrorKind::Corrupt), "{err}");
    assert!(err.to_string().contains("left the channel out"), "{err}");
}

/// R32: every checkpoint a delta-mode store receives through the adapter carries the delta
/// marker, snapshots included (whose counters are reset, so only the marker tells a full-mode
/// reader that the thread is delta); a full-mode store's carry none.
#[tokio::test]
async fn r32_every_checkpoint_through_the_adapter_carries_the_mode_marker() {
    use antler_checkpoint as cp;
    use antler_graph::SaverCheckpointer;
    for (config, marked) in [
        (
            cp::StoreConfig::delta(cp::SnapshotFrequency::new(2).unwrap()),
            true,
        ),
        (cp::StoreConfig::full(), false),
    ] {
        let saver = Arc::new(cp::MemorySaver::new(config));
        let mut g = StateGraph::new();
        let spec = if marked {
            ChannelSpec::messages_delta(2)
        } else {
            ChannelSpec::messages()
        };
        g.channel(&MESSAGES, spec).unwrap();
        g.add_node("reply", |_s: State, _c| async {
            Ok(Update::new().set(&MESSAGES, vec![ai(None, "r")]))
        });
        g.add_edge("__start__", "reply")
            .add_edge("reply", "__end__");
        let graph = g
            .compile()
            .unwrap()
            .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
        let cfg = RunConfig::new("t");
        for i in 0..4 {
            graph.invoke(human(i), &cfg).await.unwrap();
        }
        let all = cp::Saver::list_without_values(&*saver, &cp::ListQuery::thread("t"))
            .await
            .unwrap();
        assert!(all.len() >= 12);
        for t in &all {
            assert_eq!(
                cp::mode::metadata_uses_delta(&t.metadata),
                marked,
                "{:?}",
                t.metadata
            );
            assert_eq!(
                t.metadata.channel_mode == Some(cp::ChannelMode::Delta),
                marked
            );
        }
    }
}

/// `update_state` on a head that stores a command's input (an update that ran no node)
/// counts the channels that input moves for the delta counters, as a run on the head does
/// (before 2026-12-02 only the update's own channels counted, and the snapshot after such an
/// input came one update late).
#[tokio::test]
async fn update_state_counts_the_stored_input_it_applies() {
    use antler_graph::Command;
    const OTHER: Key<i64> = Key::from_static("other");
    let store = Arc::new(Recording::default());
    let mut g = StateGraph::new();
    g.channel(&MESSAGES, ChannelSpec::messages_delta(50))
        .unwrap();
    g.channel(&OTHER, ChannelSpec::last_value()).unwrap();
    g.add_node("reply", |_s: State, _c| async { Ok(Update::new()) });
    g.add_edge("__start__", "reply")
        .add_edge("reply", "__end__");
    let graph = g.compile().unwrap().with_checkpointer(store.clone());
    let cfg = RunConfig::new("t");
    graph.invoke(human(0), &cfg).await.unwrap();
    let mut m = Message::new(MessageType::Human, "stored");
    m.id = Some("stored".into());
    graph
        .invoke(
            antler_graph::Input::Command(
                Command::new().update(Update::new().set(&MESSAGES, vec![m])),
            ),
            &cfg,
        )
        .await
        .unwrap();
    let updates_of = |r: &antler_graph::CheckpointRecord| r.counters.get("messages").map(|c| c.0);
    let before = store.puts().last().and_then(updates_of).unwrap_or(0);
    graph
        .update_state(&cfg, Update::new().set(&OTHER, 1), Some("reply".into()))
        .await
        .unwrap();
    let after = store.puts().last().and_then(updates_of).unwrap_or(0);
    assert_eq!(after, before + 1, "the stored input moved `messages`");
    let state = graph.get_state(&cfg).await.unwrap().expect("a state");
    assert_eq!(state.values.get(&MESSAGES).map(Vec::len), Some(2));
}
