//! The delta messages channel: cadence counters, snapshot decisions, the append fast path
//! against the batch reducer, and materialisation equal to the live value.

use antler_checkpoint::delta::{
    DeltaMessages, DeltaWrite, SnapshotDecision, materialize, read_counters, write_counters,
};
use antler_checkpoint::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, DeltaCounters, MemorySaver,
    Saver, SnapshotFrequency, StoreConfig, TaskId, TaskPath,
};
use antler_state_reducers::{Message, MessageWrite, merge_message_writes};

fn f(n: u32) -> SnapshotFrequency {
    SnapshotFrequency::new(n).unwrap()
}

fn msg(id: &str) -> Message {
    Message::human(format!("text of {id}")).with_id(id)
}

#[test]
fn counters_follow_the_reference_example_and_reset_on_snapshot() {
    // Two checkpoints per invoke (input, then loop after the node): with F = 3 the third
    // node step snapshots (runtime-spec §5.3).
    let mut ch = DeltaMessages::new(f(3));
    let mut seen = Vec::new();
    for turn in 0..4 {
        let d = ch.on_checkpoint(false);
        seen.push((ch.counters().updates, ch.counters().supersteps, d));
        ch.update(vec![vec![msg(&format!("{turn}"))].into()])
            .unwrap();
        let d = ch.on_checkpoint(true);
        seen.push((ch.counters().updates, ch.counters().supersteps, d));
    }
    use SnapshotDecision::{Frequency, Skip};
    assert_eq!(
        seen,
        vec![
            (0, 1, Skip),
            (1, 2, Skip),
            (1, 3, Skip),
            (2, 4, Skip),
            (2, 5, Skip),
            (0, 0, Frequency),
            (0, 1, Skip),
            (1, 2, Skip)
        ]
    );
}

#[test]
fn superstep_bound_and_never_written_channels() {
    let mut unwritten = DeltaMessages::new(f(2)).with_max_supersteps(2);
    for _ in 0..5 {
        assert_eq!(
            unwritten.on_checkpoint(true),
            SnapshotDecision::Skip,
            "an unwritten channel never snapshots"
        );
    }
    let mut ch = DeltaMessages::new(f(100)).with_max_supersteps(3);
    ch.update(vec![vec![msg("a")].into()]).unwrap();
    assert_eq!(ch.on_checkpoint(true), SnapshotDecision::Skip);
    assert_eq!(ch.on_checkpoint(false), SnapshotDecision::Skip);
    assert_eq!(ch.on_checkpoint(false), SnapshotDecision::SuperstepBound);
    assert_eq!(ch.counters(), DeltaCounters::default());
}

#[test]
fn overwrite_replaces_drops_the_step_and_forces_a_snapshot() {
    let mut ch = DeltaMessages::new(f(100));
    ch.update(vec![vec![msg("a"), msg("b")].into()]).unwrap();
    ch.update(vec![
        vec![msg("c")].into(),
        DeltaWrite::Overwrite(vec![msg("z")]),
        vec![msg("d")].into(),
    ])
    .unwrap();
    assert_eq!(ch.value(), &[msg("z")]);
    assert_eq!(ch.on_checkpoint(true), SnapshotDecision::Forced);
    let err = ch
        .update(vec![
            DeltaWrite::Overwrite(vec![]),
            DeltaWrite::Overwrite(vec![]),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Can receive only one Overwrite value per super-step."
    );
    assert_eq!(
        ch.value(),
        &[msg("z")],
        "a failed update leaves the value unchanged"
    );
    assert!(!ch.update(vec![]).unwrap(), "an empty batch is no change");
}

/// An Overwrite of the same length must not leave the append caches of the old list behind:
/// the snapshot would store the old bodies, and a later write of an overwritten-away id
/// would be taken for a new message.
#[test]
fn overwrite_replaces_the_cached_encoding_and_id_index() {
    let mut ch = DeltaMessages::new(f(100));
    ch.update(vec![vec![msg("a"), msg("b")].into()]).unwrap();
    let edited = Message::human("edited a").with_id("a");
    ch.update(vec![DeltaWrite::Overwrite(vec![edited.clone(), msg("b")])])
        .unwrap();
    assert_eq!(ch.on_checkpoint(true), SnapshotDecision::Forced);
    let decoded = antler_checkpoint::delta::decode_messages_value(
        &ch.snapshot_blob().unwrap(),
        &"t".into(),
        antler_checkpoint::CheckpointId::generate(),
    )
    .unwrap();
    assert_eq!(
        decoded,
        vec![edited, msg("b")],
        "the snapshot stores the overwritten list"
    );

    let mut ch = DeltaMessages::new(f(100));
    ch.update(vec![vec![msg("a"), msg("b")].into()]).unwrap();
    ch.update(vec![DeltaWrite::Overwrite(vec![msg("x")])])
        .unwrap();
    let x2 = Message::human("second x").with_id("x");
    ch.update(vec![vec![x2.clone()].into()]).unwrap();
    assert_eq!(
        ch.value(),
        &[x2],
        "a known id is replaced in place, not appended"
    );
    ch.update(vec![vec![msg("a")].into()]).unwrap();
    assert_eq!(
        ch.value().len(),
        2,
        "an id the Overwrite dropped is new again"
    );
}

/// The append fast path must agree with the batch reducer on every kind of write.
#[test]
fn fast_path_agrees_with_the_batch_reducer() {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _round in 0..40 {
        let mut ch = DeltaMessages::new(f(5));
        let mut reference: Vec<Message> = Vec::new();
        let mut fresh = 0;
        for _step in 0..30 {
            let mut batch = Vec::new();
            for _ in 0..=next(3) {
                let mut list = Vec::new();
                for _ in 0..=next(3) {
                    let m = match next(10) {
                        0 if !reference.is_empty() => Message::remove(
                            reference[next(reference.len() as u64) as usize]
                                .id
                                .clone()
                                .unwrap(),
                        ),
                        1 if !reference.is_empty() => Message::ai("replaced").with_id(
                            reference[next(reference.len() as u64) as usize]
                                .id
                                .clone()
                                .unwrap(),
                        ),
                        2 => Message::human("id-less"),
                        _ => {
                            fresh += 1;
                            msg(&format!("n{fresh}"))
                        }
                    };
                    list.push(m);
                }
                batch.push(MessageWrite::Messages(list));
            }
            // Id-less messages get random ids: assign them first, as the runtime does before persisting.
            let mut writes: Vec<DeltaWrite> = batch.into_iter().map(DeltaWrite::Write).collect();
            for w in &mut writes {
                w.assign_missing_ids();
            }
            let plain: Vec<MessageWrite> = writes
                .iter()
                .map(|w| match w {
                    DeltaWrite::Write(m) => m.clone(),
                    DeltaWrite::Overwrite(_) => unreachable!(),
                })
                .collect();
            let expected = merge_message_writes(&reference, &plain);
            let got = ch.update(writes);
            match (expected, got) {
                (Ok(e), Ok(_)) => {
                    assert_eq!(ch.value(), e.as_slice());
                    reference = e;
                }
                (Err(e), Err(g)) => assert_eq!(e.to_string(), g.to_string()),
                (e, g) => panic!("reducer and channel disagree: {e:?} vs {g:?}"),
            }
            if ch.on_checkpoint(true).is_snapshot() {
                let blob = ch.snapshot_blob().unwrap();
                let decoded = antler_checkpoint::delta::decode_messages_value(
                    &blob,
                    &"t".into(),
                    antler_checkpoint::CheckpointId::generate(),
                )
                .unwrap();
                assert_eq!(
                    decoded, reference,
                    "the cached snapshot encodes the current value"
                );
            }
        }
    }
}

#[test]
fn counters_round_trip_through_metadata() {
    let mut m = CheckpointMetadata::default();
    write_counters(
        &mut m,
        "messages",
        DeltaCounters {
            updates: 2,
            supersteps: 5,
        },
    );
    assert_eq!(
        m.to_json()["counters_since_delta_snapshot"],
        serde_json::json!({"messages": [2, 5]})
    );
    assert_eq!(
        read_counters(&m, "messages"),
        DeltaCounters {
            updates: 2,
            supersteps: 5
        }
    );
    write_counters(&mut m, "messages", DeltaCounters::default());
    assert!(
        !m.to_json().contains_key("counters_since_delta_snapshot"),
        "zero pairs are not stored"
    );
}

/// Materialising any checkpoint of a long delta thread from storage gives the value the live
/// channel had there, replaying at most F writes (R41: deterministic, ids persisted).
#[test]
fn materialisation_equals_the_live_value_at_every_checkpoint() {
    antler_checkpoint::testing::block_on(async {
        let freq = f(4);
        let saver = MemorySaver::new(StoreConfig::delta(freq));
        let mut ch = DeltaMessages::new(freq);
        let mut head = CheckpointConfig::latest("t");
        let mut expected = Vec::new();
        let mut version = 0u64;
        for turn in 0..23 {
            let mut cp = Checkpoint::empty();
            let mut nv = ChannelVersions::new();
            if ch.on_checkpoint(false).is_snapshot() {
                version += 1;
                nv.insert("messages".into(), version.into());
                cp.channel_values
                    .insert("messages".into(), ch.snapshot_blob().unwrap());
            }
            if version > 0 {
                cp.channel_versions
                    .insert("messages".into(), version.into());
            }
            let mut meta = CheckpointMetadata::default();
            write_counters(&mut meta, "messages", ch.counters());
            let input = saver.put(&head, cp, meta, &nv).await.unwrap();
            expected.push((input.clone(), ch.value().to_vec()));
            // Every third turn replaces an earlier message instead of appending.
            let mut w: DeltaWrite = if turn % 3 == 2 {
                vec![
                    Message::ai("edited").with_id("0h"),
                    Message::human("no id yet"),
                ]
                .into()
            } else {
                vec![msg(&format!("{turn}h"))].into()
            };
            w.assign_missing_ids();
            saver
                .put_writes(
                    &input,
                    vec![("messages".into(), w.to_blob().unwrap())],
                    &TaskId::new(format!("task{turn}")),
                    &TaskPath::new("~turn"),
                )
                .await
                .unwrap();
            ch.update(vec![w]).unwrap();
            version += 1;
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert("messages".into(), version.into());
            let mut nv = ChannelVersions::new();
            if ch.on_checkpoint(true).is_snapshot() {
                nv.insert("messages".into(), version.into());
                cp.channel_values
                    .insert("messages".into(), ch.snapshot_blob().unwrap());
            }
            let mut meta = CheckpointMetadata::default();
            write_counters(&mut meta, "messages", ch.counters());
            head = saver.put(&input, cp, meta, &nv).await.unwrap();
            expected.push((head.clone(), ch.value().to_vec()));
        }
        for (config, value) in &expected {
            let tuple = saver.get_tuple(config).await.unwrap().unwrap();
            let m = materialize(&saver, &tuple, "messages", freq).await.unwrap();
            assert_eq!(m.channel.value(), value.as_slice());
            assert!(
                m.replayed_writes <= freq.get() as usize,
                "replayed {} writes",
                m.replayed_writes
            );
            let again = materialize(&saver, &tuple, "messages", freq).await.unwrap();
            assert_eq!(
                again.channel.value(),
                value.as_slice(),
                "materialisation is deterministic"
            );
        }
    });
}

/// A batch the reducer refuses leaves the channel as it was: an empty channel stays
/// unavailable (before, the append fast path had already set up an empty value when it
/// handed the batch to the reducer), a filled one keeps its value.
#[test]
fn a_refused_update_leaves_the_channel_unchanged() {
    let mut ch = DeltaMessages::new(f(3));
    let removal = vec![Message::remove("ghost")];
    assert!(ch.update(vec![removal.clone().into()]).is_err());
    assert!(!ch.is_available(), "still no value");
    ch.update(vec![vec![msg("a")].into()]).unwrap();
    assert!(ch.update(vec![removal.into()]).is_err());
    assert_eq!(ch.value(), &[msg("a")]);
}

/// R43: a relative record (`RELATIVE_RECORD_V`) that does not list `messages` carries its
/// parent's version of it: materialising it walks history (the value is unknown there, not
/// empty), and gives the value the parent had after its writes were not applied on this path.
#[test]
fn a_relative_record_without_the_channel_materialises_from_history() {
    antler_checkpoint::testing::block_on(async {
        let freq = f(10);
        let saver = MemorySaver::new(StoreConfig::delta(freq));
        // Root: a snapshot of [a].
        let mut root = Checkpoint::empty();
        root.channel_versions.insert("messages".into(), 1.into());
        let mut ch = DeltaMessages::new(freq);
        ch.update(vec![vec![msg("a")].into()]).unwrap();
        root.channel_values
            .insert("messages".into(), ch.snapshot_blob().unwrap());
        let mut nv = ChannelVersions::new();
        nv.insert("messages".into(), 1.into());
        let root = saver
            .put(
                &CheckpointConfig::latest("t"),
                root,
                CheckpointMetadata::default(),
                &nv,
            )
            .await
            .unwrap();
        // Its step appends [b]: the child lists the new version, stores no value.
        let w: DeltaWrite = vec![msg("b")].into();
        saver
            .put_writes(
                &root,
                vec![("messages".into(), w.to_blob().unwrap())],
                &TaskId::new("t1"),
                &TaskPath::new("~a"),
            )
            .await
            .unwrap();
        let mut child = Checkpoint::empty();
        child.channel_versions.insert("messages".into(), 2.into());
        let child = saver
            .put(
                &root,
                child,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        // A relative record below it that changed something else: `messages` is not listed.
        let mut grandchild = Checkpoint::empty();
        grandchild.v = antler_checkpoint::RELATIVE_RECORD_V;
        grandchild.channel_versions.insert("other".into(), 3.into());
        let grandchild = saver
            .put(
                &child,
                grandchild,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        let tuple = saver.get_tuple(&grandchild).await.unwrap().unwrap();
        assert!(!tuple.checkpoint.channel_versions.contains_key("messages"));
        let m = materialize(&saver, &tuple, "messages", freq).await.unwrap();
        assert_eq!(m.channel.value(), &[msg("a"), msg("b")]);
        // A full record without the channel still has none: empty, no walk.
        let mut full = Checkpoint::empty();
        full.channel_versions.insert("other".into(), 4.into());
        let full = saver
            .put(
                &grandchild,
                full,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        let tuple = saver.get_tuple(&full).await.unwrap().unwrap();
        let m = materialize(&saver, &tuple, "messages", freq).await.unwrap();
        assert!(m.channel.value().is_empty());
        assert_eq!(m.seed_checkpoint, None);
    });
}

/// A saver whose history walk leaves the asked channel out (breaking the trait's contract):
/// the memory saver for everything else.
struct ForgetfulWalk(MemorySaver);

#[async_trait::async_trait]
impl Saver for ForgetfulWalk {
    async fn get_tuple(
        &self,
        config: &CheckpointConfig,
    ) -> antler_checkpoint::Result<Option<antler_checkpoint::CheckpointTuple>> {
        self.0.get_tuple(config).await
    }
    async fn list(
        &self,
        query: &antler_checkpoint::ListQuery,
    ) -> antler_checkpoint::Result<Vec<antler_checkpoint::CheckpointTuple>> {
        self.0.list(query).await
    }
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: &ChannelVersions,
    ) -> antler_checkpoint::Result<CheckpointConfig> {
        self.0.put(config, checkpoint, metadata, new_versions).await
    }
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(antler_checkpoint::ChannelName, antler_checkpoint::Blob)>,
        task_id: &TaskId,
        task_path: &TaskPath,
    ) -> antler_checkpoint::Result<()> {
        self.0.put_writes(config, writes, task_id, task_path).await
    }
    async fn delete_thread(
        &self,
        t: &antler_checkpoint::ThreadId,
    ) -> antler_checkpoint::Result<()> {
        self.0.delete_thread(t).await
    }
    async fn delete_for_runs(
        &self,
        runs: &[antler_checkpoint::RunId],
    ) -> antler_checkpoint::Result<()> {
        self.0.delete_for_runs(runs).await
    }
    async fn copy_thread(
        &self,
        source: &antler_checkpoint::ThreadId,
        target: &antler_checkpoint::ThreadId,
    ) -> antler_checkpoint::Result<()> {
        self.0.copy_thread(source, target).await
    }
    async fn prune(
        &self,
        threads: &[antler_checkpoint::ThreadId],
        strategy: antler_checkpoint::PruneStrategy,
    ) -> antler_checkpoint::Result<()> {
        self.0.prune(threads, strategy).await
    }
    async fn delta_channel_history(
        &self,
        _config: &CheckpointConfig,
        _channels: &[antler_checkpoint::ChannelName],
    ) -> antler_checkpoint::Result<
        std::collections::BTreeMap<
            antler_checkpoint::ChannelName,
            antler_checkpoint::DeltaChannelHistory,
        >,
    > {
        Ok(std::collections::BTreeMap::new())
    }
    fn store_config(&self) -> StoreConfig {
        self.0.store_config()
    }
}

/// Materialising through a history walk that returns no entry for the channel is a typed
/// error naming the thread and checkpoint, never an empty list (before 2026-12-02 it read as
/// empty, and the next snapshot would have stored that).
#[test]
fn a_walk_that_leaves_the_channel_out_is_an_error() {
    antler_checkpoint::testing::block_on(async {
        let freq = f(10);
        let saver = ForgetfulWalk(MemorySaver::new(StoreConfig::delta(freq)));
        let mut cp = Checkpoint::empty();
        cp.channel_versions.insert("messages".into(), 1.into());
        let stored = saver
            .put(
                &CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        let tuple = saver.get_tuple(&stored).await.unwrap().unwrap();
        let err = materialize(&saver, &tuple, "messages", freq)
            .await
            .expect_err("no history entry");
        assert_eq!(err.kind(), antler_checkpoint::ErrorKind::Corrupt, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("thread t") && text.contains(&tuple.checkpoint.id.to_string()),
            "{text}"
        );
    });
}

/// R41: a channel holding id-less messages (a migrated plain list, a stored Overwrite) gets
/// ids from the reducer at its first write, and those ids are this process's own: the next
/// checkpoint snapshots them, or a cold replay of the seed would stamp others (before
/// 2026-12-02 only a channel rebuilt by `restore` was forced, not one built from a value).
/// A write with id-less messages forces it too.
#[test]
fn ids_the_reducer_stamps_are_snapshotted_at_the_next_checkpoint() {
    let mut plain = Message::human("migrated");
    plain.id = None;
    let mut ch = DeltaMessages::from_value(f(10), vec![plain]);
    assert!(!ch.on_checkpoint(false).is_snapshot());
    ch.update(vec![DeltaWrite::Write(MessageWrite::Messages(vec![msg(
        "b",
    )]))])
    .unwrap();
    assert!(ch.value().iter().all(|m| m.id.is_some()));
    assert!(ch.on_checkpoint(true).is_snapshot());

    let mut ch = DeltaMessages::from_value(f(10), vec![msg("a")]);
    let mut idless = Message::ai("no id");
    idless.id = None;
    ch.update(vec![DeltaWrite::Write(MessageWrite::Messages(vec![
        idless,
    ]))])
    .unwrap();
    assert!(ch.on_checkpoint(true).is_snapshot());

    // With ids throughout, the cadence is the frequency's.
    let mut ch = DeltaMessages::from_value(f(10), vec![msg("a")]);
    ch.update(vec![DeltaWrite::Write(MessageWrite::Messages(vec![
        Message::remove("a"),
    ]))])
    .unwrap();
    assert!(!ch.on_checkpoint(true).is_snapshot());
}

/// Counters carried in `extra` (metadata copied key by key, in the reference's
/// `[updates, supersteps]` form) are the ones the cadence reads, as the gate takes the
/// checkpoint as delta by them (before 2026-12-02 the cadence read only the typed field and
/// restarted at zero, a snapshot up to F updates late).
#[test]
fn counters_in_extra_are_the_cadences() {
    let mut meta = CheckpointMetadata::default();
    meta.extra.insert(
        antler_checkpoint::model::COUNTERS_METADATA_KEY.into(),
        serde_json::json!({"messages": [9, 12], "odd": "x"}),
    );
    assert_eq!(
        read_counters(&meta, "messages"),
        DeltaCounters {
            updates: 9,
            supersteps: 12
        }
    );
    assert_eq!(read_counters(&meta, "odd"), DeltaCounters::default());
    let (all, complete) = antler_checkpoint::mode::all_counters(&meta);
    assert_eq!(all.len(), 1);
    assert!(!complete, "an entry of another shape is not read");
    // The typed field wins.
    write_counters(
        &mut meta,
        "messages",
        DeltaCounters {
            updates: 1,
            supersteps: 1,
        },
    );
    assert_eq!(read_counters(&meta, "messages").updates, 1);
    // A reset after a snapshot removes the pair wherever it was: the old one in `extra` does
    // not come back (before 2026-12-02 it did, and the next snapshot came one update later
    // than F after it).
    write_counters(&mut meta, "messages", DeltaCounters::default());
    assert_eq!(read_counters(&meta, "messages"), DeltaCounters::default());
    assert_eq!(
        meta.extra[antler_checkpoint::model::COUNTERS_METADATA_KEY],
        serde_json::json!({"odd": "x"}),
        "only the written channel's entry goes"
    );
    let ch = DeltaMessages::from_value(f(10), vec![msg("a")]).with_counters(DeltaCounters {
        updates: 9,
        supersteps: 9,
    });
    let mut ch = ch;
    ch.update(vec![DeltaWrite::Write(MessageWrite::Messages(vec![msg(
        "b",
    )]))])
    .unwrap();
    assert!(
        ch.on_checkpoint(true).is_snapshot(),
        "the tenth update snapshots"
    );
}

/// §5.8: a delta-marked record whose counters in `extra` are of another shape cannot say
/// which channels are delta, so `prune` keeps history for every channel it lists without a
/// value, as for an unmarked record (before 2026-12-02 it took such a record to need no
/// history, deleted the ancestors its walk replays from, and the kept head no longer read).
#[test]
fn prune_keeps_the_history_of_a_marked_record_with_unreadable_counters() {
    antler_checkpoint::testing::block_on(async {
        let saver = MemorySaver::new(StoreConfig::delta(f(10)));
        let mut parent = CheckpointConfig::latest("t");
        for i in 0..3u64 {
            let mut cp = Checkpoint::empty();
            let v = antler_checkpoint::ChannelVersion::new(i + 1);
            cp.channel_versions.insert("m".into(), v);
            let mut nv = ChannelVersions::new();
            if i == 0 {
                cp.channel_values.insert(
                    "m".into(),
                    antler_checkpoint::Blob::json(&serde_json::json!([0])).unwrap(),
                );
                nv.insert("m".into(), v);
            }
            let mut meta = CheckpointMetadata {
                channel_mode: Some(antler_checkpoint::ChannelMode::Delta),
                ..Default::default()
            };
            meta.extra.insert(
                antler_checkpoint::model::COUNTERS_METADATA_KEY.into(),
                serde_json::json!("unreadable"),
            );
            parent = saver.put(&parent, cp, meta, &nv).await.unwrap();
            saver
                .put_writes(
                    &parent,
                    vec![(
                        "m".into(),
                        antler_checkpoint::Blob::json(&serde_json::json!(i)).unwrap(),
                    )],
                    &TaskId::new("task"),
                    &TaskPath::default(),
                )
                .await
                .unwrap();
        }
        let names = [antler_checkpoint::ChannelName::new("m")];
        let before = saver.delta_channel_history(&parent, &names).await.unwrap();
        assert_eq!(before["m"].writes.len(), 2);
        saver
            .prune(
                &[antler_checkpoint::ThreadId::new("t")],
                antler_checkpoint::PruneStrategy::KeepLatest,
            )
            .await
            .unwrap();
        let after = saver.delta_channel_history(&parent, &names).await.unwrap();
        assert_eq!(after, before);
    });
}
