//! Run ids and free metadata in checkpoint metadata (runtime-spec §2.2, §2.5, §4.1).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use antler_checkpoint as cp;
use antler_graph::{
    CompiledGraph, Context, Error, ErrorKind, NodeError, RunConfig, SaverCheckpointer, State,
    Update,
};
use serde_json::json;

use crate::common::{LOG, graph, log, memory};

/// START → a → END over `saver`; `a` logs "a".
fn over(saver: Arc<dyn cp::Saver>) -> CompiledGraph {
    stored_in(Arc::new(SaverCheckpointer::new(saver)))
}

/// START → a → END over any checkpointer; `a` logs "a".
fn stored_in(store: Arc<dyn antler_graph::Checkpointer>) -> CompiledGraph {
    let mut g = graph();
    g.add_node("a", |_s: State, _c: Context| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    g.compile().expect("valid graph").with_checkpointer(store)
}

fn input(item: &str) -> Update {
    Update::new().set(&LOG, log(&[item]))
}

/// Deleting older runs of a thread the runtime wrote, in either mode, keeps what the later
/// runs' checkpoints need (the runtime's relative records name their parent; delta history
/// replays from earlier checkpoints) and deletes the rest: the head and every checkpoint left
/// read the same from a fresh process. Before, `delete_for_runs` refused (`Conflict`) and
/// deleted nothing.
#[tokio::test]
async fn deleting_an_older_run_keeps_what_the_later_runs_need() {
    for config in [
        cp::StoreConfig::full(),
        cp::StoreConfig::delta(cp::SnapshotFrequency::new(3).unwrap()),
    ] {
        let saver: Arc<dyn cp::Saver> =
            Arc::new(cp::SqliteSaver::open(":memory:", config).await.unwrap());
        let graph = over(saver.clone());
        for i in 1..=6 {
            graph
                .invoke(
                    input(&format!("in{i}")),
                    &RunConfig::new("t").with_run_id(format!("r{i}")),
                )
                .await
                .unwrap();
        }
        let before = over(saver.clone())
            .get_state(&RunConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        let count = || async { saver.list(&cp::ListQuery::thread("t")).await.unwrap().len() };
        assert_eq!(count().await, 18);
        saver
            .delete_for_runs(&[
                cp::RunId::new("r1"),
                cp::RunId::new("r2"),
                cp::RunId::new("r3"),
            ])
            .await
            .unwrap();
        let after = over(saver.clone())
            .get_state(&RunConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after.values.get(&LOG),
            before.values.get(&LOG),
            "{config:?}"
        );
        assert_eq!(after.values.get(&LOG).map(Vec::len), Some(12));
        // The runtime stores a full record every eighth: the later runs' records reach back
        // to the ninth record (r3's last), which stays; in delta mode the eight before it go.
        // A full-mode store walks the cleared channels of records without the delta marker
        // (`__start__`, branch channels) as history, as the reference's walk would take them,
        // so there the ninth record keeps r1's and r2's too (docs/checkpoint-format.md).
        let left = count().await;
        let expected = if config.mode == cp::ChannelMode::Delta {
            10
        } else {
            18
        };
        assert_eq!(left, expected, "{config:?}");
        // Every checkpoint left reads, cold.
        for t in saver.list(&cp::ListQuery::thread("t")).await.unwrap() {
            let at = RunConfig::new("t")
                .with_checkpoint(antler_graph::CheckpointId::new(t.checkpoint.id.to_string()));
            assert!(
                over(saver.clone()).get_state(&at).await.unwrap().is_some(),
                "{config:?}"
            );
        }
    }
}

/// Both checkpointers identify a pending write by its task id and index, as the savers key
/// their rows: a second regular write of the same task and index under another task path is
/// ignored, a second control write replaces the first, path and all. Before, the in-process
/// checkpointer also keyed by path and kept both.
#[tokio::test]
async fn pending_writes_are_identified_by_task_and_index_in_both_checkpointers() {
    use antler_graph::{Checkpointer, MemoryCheckpointer, Scope, TaskId};
    let stores: [Arc<dyn Checkpointer>; 2] = [
        Arc::new(MemoryCheckpointer::new()),
        Arc::new(SaverCheckpointer::new(Arc::new(cp::MemorySaver::new(
            cp::StoreConfig::full(),
        )))),
    ];
    let mut seen = Vec::new();
    for store in stores {
        stored_in(store.clone())
            .invoke(input("in"), &RunConfig::new("t"))
            .await
            .unwrap();
        let scope = Scope::root("t");
        let head = store
            .head(&scope, None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id;
        let task = TaskId::new("task");
        for (path, n) in [("~a", 1), ("~b", 2)] {
            let writes = vec![
                ("log".to_owned(), json!([format!("w{n}")])),
                ("__error__".to_owned(), json!(format!("e{n}"))),
            ];
            store
                .put_writes(&scope, &head, &task, path, writes)
                .await
                .unwrap();
        }
        let tuple = store.get_tuple(&scope, Some(&head)).await.unwrap().unwrap();
        let got: Vec<(String, String, serde_json::Value)> = tuple
            .pending_writes
            .iter()
            .filter(|w| w.task_id == task)
            .map(|w| (w.task_path.clone(), w.channel.clone(), w.value.clone()))
            .collect();
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1], "the two checkpointers agree");
    let mut got = seen[0].clone();
    got.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(
        got,
        [
            ("~a".to_owned(), "log".to_owned(), json!(["w1"])),
            ("~b".to_owned(), "__error__".to_owned(), json!("e2")),
        ]
    );
}

/// A run that holds its head for the whole run (exit durability) while `delete_for_runs`
/// deletes that head stores nothing at its exit: its record would name the deleted head as
/// the parent it is relative to. The run fails with the saver's `MissingParent` (kind
/// `NotFound`), and the thread reads as the delete left it, also from a fresh process.
/// Before, the run stored the record, and every other reader failed on the missing parent.
#[tokio::test]
async fn a_run_whose_head_was_deleted_under_it_stores_no_orphan() {
    let saver: Arc<dyn cp::Saver> = Arc::new(
        cp::SqliteSaver::open(":memory:", cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    let mut g = graph();
    let deleter = saver.clone();
    g.add_node("a", move |_s: State, c: Context| {
        let saver = deleter.clone();
        let deleting = c.run_id() == Some("r2");
        async move {
            // Nothing remaining needs run r1's checkpoints: all of them go.
            if deleting {
                saver
                    .delete_for_runs(&[cp::RunId::new("r1")])
                    .await
                    .map_err(NodeError::failed)?;
            }
            Ok(Update::new().set(&LOG, log(&["a"])))
        }
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let graph = g
        .compile()
        .expect("valid graph")
        .with_checkpointer(Arc::new(SaverCheckpointer::new(saver.clone())));
    graph
        .invoke(input("in1"), &RunConfig::new("t").with_run_id("r0"))
        .await
        .unwrap();
    graph
        .invoke(input("in2"), &RunConfig::new("t").with_run_id("r1"))
        .await
        .unwrap();
    let err = graph
        .invoke(
            input("in3"),
            &RunConfig::new("t")
                .with_run_id("r2")
                .with_durability(antler_graph::Durability::Exit),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.checkpoint_kind(),
        Some(cp::ErrorKind::NotFound),
        "{err}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");
    // Run r0's checkpoints are left (the first run deleted only r1's), and read the same from
    // a fresh process.
    let fresh = over(saver.clone());
    let head = fresh
        .get_state(&RunConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.values.get(&LOG), Some(&log(&["in1", "a"])));
    assert_eq!(head.run_id.as_deref(), Some("r0"));
    assert!(
        saver
            .list(&cp::ListQuery::thread("t"))
            .await
            .unwrap()
            .iter()
            .all(|t| t.metadata.run_id == Some(cp::RunId::new("r0")))
    );
}

/// Every checkpoint a run creates carries its run id and free metadata, where `list` filters and
/// `delete_for_runs` find them; deleting the newest run leaves the thread at the previous one.
#[tokio::test]
async fn checkpoints_carry_the_run_id_and_metadata_that_delete_for_runs_finds() {
    let saver: Arc<dyn cp::Saver> = Arc::new(
        cp::SqliteSaver::open(":memory:", cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    let graph = over(saver.clone());
    let first = RunConfig::new("t")
        .with_run_id("r1")
        .with_metadata("user", "ann");
    graph.invoke(input("in1"), &first).await.unwrap();
    graph
        .invoke(input("in2"), &RunConfig::new("t").with_run_id("r2"))
        .await
        .unwrap();

    let all = saver.list(&cp::ListQuery::thread("t")).await.unwrap();
    let runs: Vec<Option<&str>> = all
        .iter()
        .map(|t| t.metadata.run_id.as_ref().map(cp::RunId::as_str))
        .collect();
    // Newest first: input, `__start__` and `a` of each run.
    assert_eq!(
        runs,
        [Some("r2"); 3]
            .into_iter()
            .chain([Some("r1"); 3])
            .collect::<Vec<_>>()
    );
    let filtered = saver
        .list(&cp::ListQuery {
            filter: [("user".to_owned(), json!("ann"))].into_iter().collect(),
            ..cp::ListQuery::thread("t")
        })
        .await
        .unwrap();
    assert_eq!(
        filtered.len(),
        3,
        "the metadata is stored with every checkpoint of r1"
    );
    assert!(
        filtered
            .iter()
            .all(|t| t.metadata.run_id == Some(cp::RunId::new("r1")))
    );

    saver
        .delete_for_runs(&[cp::RunId::new("r2")])
        .await
        .unwrap();
    let left = saver.list(&cp::ListQuery::thread("t")).await.unwrap();
    assert_eq!(left.len(), 3);
    let fresh = over(saver.clone());
    let head = fresh
        .get_state(&RunConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.values.get(&LOG), Some(&log(&["in1", "a"])));
    // The snapshots show them too, in the history as in `get_state`.
    assert_eq!(head.run_id.as_deref(), Some("r1"));
    assert_eq!(head.metadata.get("user"), Some(&json!("ann")));
    let history = fresh.get_state_history(&RunConfig::new("t")).await.unwrap();
    assert!(history.iter().all(|s| s.run_id.as_deref() == Some("r1")));
    assert!(
        history
            .iter()
            .all(|s| s.metadata.get("user") == Some(&json!("ann")))
    );

    // `update_state` stamps its checkpoint the same way.
    fresh
        .update_state(&first, input("edit"), None)
        .await
        .unwrap();
    let newest = saver
        .list(&cp::ListQuery {
            limit: Some(1),
            ..cp::ListQuery::thread("t")
        })
        .await
        .unwrap();
    assert_eq!(newest[0].metadata.run_id, Some(cp::RunId::new("r1")));
    assert_eq!(newest[0].metadata.extra.get("user"), Some(&json!("ann")));
}

/// Runtime-spec §2.2: a run on a checkpoint that its own run id created resumes it, whatever the
/// input, so a retried run applies its input once; another run id applies it again (new input
/// abandons the failed step).
#[tokio::test]
async fn a_retried_run_resumes_instead_of_applying_its_input_again() {
    for (retry, want) in [("r1", log(&["in", "a"])), ("r2", log(&["in", "in", "a"]))] {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut g = graph();
        let seen = calls.clone();
        g.add_node("a", move |_s: State, _c: Context| {
            let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    return Err(NodeError::failed("transient"));
                }
                Ok(Update::new().set(&LOG, log(&["a"])))
            }
        });
        g.add_edge("__start__", "a").add_edge("a", "__end__");
        let graph = memory(g);
        let err = graph
            .invoke(input("in"), &RunConfig::new("t").with_run_id("r1"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Node);
        let out = graph
            .invoke(input("in"), &RunConfig::new("t").with_run_id(retry))
            .await
            .unwrap();
        assert_eq!(out.values.get(&LOG), Some(&want), "retried as {retry}");
    }
}

/// Metadata keys the runtime writes itself are refused, by runs and by `update_state`, before
/// anything is read or stored.
#[tokio::test]
async fn reserved_metadata_keys_are_refused() {
    let mut g = graph();
    g.add_node("a", |_s: State, _c: Context| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a").add_edge("a", "__end__");
    let graph = memory(g);
    for key in ["step", "run_id", "__pregel_x", "langgraph_step"] {
        let cfg = RunConfig::new("t").with_metadata(key, 1);
        let err = graph.invoke(input("in"), &cfg).await.unwrap_err();
        assert!(
            matches!(&err, Error::ReservedMetadataKey { key: k } if k == key),
            "{err}"
        );
        assert_eq!(err.kind(), ErrorKind::Input);
        let err = graph
            .update_state(&cfg, input("x"), Some("a".into()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ReservedMetadataKey { .. }), "{err}");
    }
    assert!(
        graph
            .get_state(&RunConfig::new("t"))
            .await
            .unwrap()
            .is_none(),
        "nothing was stored"
    );
}

/// `__start__` → `a` (which logs "a") over an in-process store.
fn start_then_a() -> antler_graph::CompiledGraph {
    let mut g = graph();
    g.add_node("a", |_s, _c| async {
        Ok(Update::new().set(&LOG, log(&["a"])))
    });
    g.add_edge("__start__", "a");
    memory(g)
}

/// Runs `in` through [`start_then_a`] on `cfg`'s thread, then a command updating `cmd` on the
/// finished head: it runs nothing, so its update stays stored as the head's input. Returns
/// the head's id.
async fn input_then_stored_command(
    graph: &CompiledGraph,
    cfg: &RunConfig,
) -> antler_graph::CheckpointId {
    let head = graph
        .invoke(Update::new().set(&LOG, log(&["in"])), cfg)
        .await
        .expect("the input runs")
        .checkpoint_id
        .expect("the run stored a checkpoint");
    graph
        .invoke(
            antler_graph::Command::new().update(Update::new().set(&LOG, log(&["cmd"]))),
            cfg,
        )
        .await
        .expect("the command runs");
    head
}

/// `update_state` on an addressed checkpoint does not apply the input stored there (a
/// command's update, which the branch that continued from it already applied), as the
/// reference's update applies pending writes only when no checkpoint is addressed, and as a
/// replay of the same checkpoint drops it. On the head it still does. Before, the fork carried
/// the other branch's input.
#[tokio::test]
async fn an_update_on_an_addressed_checkpoint_leaves_its_stored_input_out() {
    let graph = start_then_a();
    let cfg = RunConfig::new("t");
    let head = input_then_stored_command(&graph, &cfg).await;
    let on_head = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(on_head.checkpoint_id, head);
    let at = cfg.clone().with_checkpoint(head.clone());
    let fork = graph
        .update_state(&at, Update::new().set(&LOG, log(&["upd"])), None)
        .await
        .unwrap();
    let forked = graph
        .get_state(&cfg.clone().with_checkpoint(fork))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(forked.values.get(&LOG), Some(&log(&["in", "a", "upd"])));
    // On the head (nothing addressed) the stored input applies first.
    let cfg = RunConfig::new("t2");
    input_then_stored_command(&graph, &cfg).await;
    graph
        .update_state(&cfg, Update::new().set(&LOG, log(&["upd"])), None)
        .await
        .unwrap();
    let latest = graph.get_state(&cfg).await.unwrap().unwrap();
    assert_eq!(
        latest.values.get(&LOG),
        Some(&log(&["in", "a", "cmd", "upd"]))
    );
}

/// An update on a fresh thread is step 0, as the reference numbers it (its `step + 1` after
/// the "no checkpoint" step, -1).
#[tokio::test]
async fn an_update_on_a_fresh_thread_is_step_zero() {
    let graph = start_then_a();
    let cfg = RunConfig::new("fresh");
    graph
        .update_state(&cfg, Update::new().set(&LOG, log(&["u"])), Some("a".into()))
        .await
        .unwrap();
    assert_eq!(graph.get_state(&cfg).await.unwrap().unwrap().step, 0);
}

/// `HistoryQuery::filter` keeps the checkpoints whose metadata holds every entry, as the
/// reference's history filter does (source, step, run id, free keys; a missing key is
/// `null`), with the whole history and with pages, through a saver and in process alike; a
/// filtered page reads older pages until it has `limit` matches. Before 2026-12-02 the
/// history had no filter.
#[tokio::test]
async fn the_history_filters_on_checkpoint_metadata() {
    use antler_graph::{HistoryQuery, MemoryCheckpointer, Source};
    let saver: Arc<dyn cp::Saver> = Arc::new(
        cp::SqliteSaver::open(":memory:", cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    let in_process = stored_in(Arc::new(MemoryCheckpointer::new()));
    for graph in [over(saver), in_process] {
        for (i, run) in ["r1", "r2", "r3"].into_iter().enumerate() {
            let mut cfg = RunConfig::new("t").with_run_id(run);
            if i != 1 {
                cfg = cfg.with_metadata("user", "ann");
            }
            graph.invoke(input(&format!("in{i}")), &cfg).await.unwrap();
        }
        let cfg = RunConfig::new("t");
        let all = graph.get_state_history(&cfg).await.unwrap();
        assert_eq!(all.len(), 9, "three checkpoints a run");
        let ids = |snaps: &[antler_graph::StateSnapshot]| {
            snaps
                .iter()
                .map(|s| s.checkpoint_id.clone())
                .collect::<Vec<_>>()
        };
        let expect = |keep: &dyn Fn(&antler_graph::StateSnapshot) -> bool| {
            all.iter()
                .filter(|s| keep(s))
                .map(|s| s.checkpoint_id.clone())
                .collect::<Vec<_>>()
        };
        let query = |q: HistoryQuery| {
            let graph = &graph;
            let cfg = &cfg;
            async move { ids(&graph.get_state_history_with(cfg, &q).await.unwrap()) }
        };
        // Free key, source, step, run id; two entries at once.
        let ann = expect(&|s| s.metadata.get("user") == Some(&json!("ann")));
        assert_eq!(ann.len(), 6);
        assert_eq!(
            query(HistoryQuery::default().filter("user", "ann")).await,
            ann
        );
        let loops = expect(&|s| s.source == Source::Loop);
        assert_eq!(
            query(HistoryQuery::default().filter("source", "loop")).await,
            loops
        );
        let step = expect(&|s| s.step == 1);
        assert_eq!(query(HistoryQuery::default().filter("step", 1)).await, step);
        let r2 = expect(&|s| s.run_id.as_deref() == Some("r2"));
        assert_eq!(r2.len(), 3);
        assert_eq!(
            query(HistoryQuery::default().filter("run_id", "r2")).await,
            r2
        );
        let ann_loops =
            expect(&|s| s.source == Source::Loop && s.metadata.get("user") == Some(&json!("ann")));
        assert_eq!(
            query(
                HistoryQuery::default()
                    .filter("user", "ann")
                    .filter("source", "loop")
            )
            .await,
            ann_loops
        );
        // A key the metadata lacks compares as null: r2's checkpoints have no user.
        assert_eq!(
            query(HistoryQuery::default().filter("user", serde_json::Value::Null)).await,
            r2
        );
        // Pages: the first two matches, then the next two after the second, reading past
        // the newest run's checkpoints, none of which matches `run_id = r1`.
        let r1 = expect(&|s| s.run_id.as_deref() == Some("r1"));
        assert_eq!(
            query(HistoryQuery::limit(2).filter("run_id", "r1")).await,
            r1[..2]
        );
        assert_eq!(
            query(
                HistoryQuery::limit(2)
                    .filter("run_id", "r1")
                    .before(r1[1].clone())
            )
            .await,
            r1[2..]
        );
        assert!(
            query(HistoryQuery::limit(5).filter("run_id", "nobody"))
                .await
                .is_empty()
        );
        // Numbers compare by value, as in Python; the top level's parents are empty.
        assert_eq!(
            query(HistoryQuery::default().filter("step", 1.0)).await,
            step
        );
        assert_eq!(
            query(HistoryQuery::default().filter("parents", json!({}))).await,
            ids(&all)
        );
        // The whole history with a bound and a filter.
        assert_eq!(
            query(
                HistoryQuery::default()
                    .filter("run_id", "r1")
                    .before(r1[0].clone())
            )
            .await,
            r1[1..]
        );
        // Every filtered snapshot is the unfiltered one, also where the checkpoints between
        // the matches were left out (pages, and the whole history).
        for q in [
            HistoryQuery::limit(3).filter("source", "loop"),
            HistoryQuery::default().filter("source", "loop"),
            HistoryQuery::limit(1).filter("run_id", "r1"),
        ] {
            for snap in graph.get_state_history_with(&cfg, &q).await.unwrap() {
                let same = all
                    .iter()
                    .find(|s| s.checkpoint_id == snap.checkpoint_id)
                    .expect("in the history");
                assert_eq!(snap.values.get(&LOG), same.values.get(&LOG), "{q:?}");
                assert_eq!(snap.next, same.next, "{q:?}");
                assert_eq!(snap.tasks.len(), same.tasks.len(), "{q:?}");
            }
        }
    }
}

/// A run after `delete_for_runs` removed the thread's newest run allocates versions above
/// that run's, so values the deletion's collection left behind (a stop between its
/// transactions, or a put racing it) are never taken for the new run's. Before, the run
/// continued from the new head's versions, reused the deleted run's, and its put clashed with
/// the leftover value (`Conflict`); a delta channel listing such a version without storing a
/// value would have read the leftover one instead.
#[tokio::test]
async fn a_run_after_deleting_the_newest_run_does_not_reuse_its_versions() {
    let dir = std::env::temp_dir().join(format!("antler-graph-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("deleted-run.db");
    let _ = std::fs::remove_file(&path);
    let saver: Arc<dyn cp::Saver> = Arc::new(
        cp::SqliteSaver::open(&path, cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    let graph = over(saver.clone());
    for (item, run) in [("in1", "r1"), ("in2", "r2")] {
        graph
            .invoke(input(item), &RunConfig::new("t").with_run_id(run))
            .await
            .unwrap();
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("CREATE TABLE kept AS SELECT * FROM blobs")
        .unwrap();
    saver
        .delete_for_runs(&[cp::RunId::new("r2")])
        .await
        .unwrap();
    // What a deletion stopped after its first transaction leaves: r2's values.
    let restored = raw
        .execute("INSERT OR IGNORE INTO blobs SELECT * FROM kept", [])
        .unwrap();
    assert!(restored > 0, "r2 stored values of its own");
    raw.execute_batch("DROP TABLE kept").unwrap();
    let out = graph
        .invoke(input("in3"), &RunConfig::new("t").with_run_id("r3"))
        .await
        .unwrap();
    let want = log(&["in1", "a", "in3", "a"]);
    assert_eq!(out.values.get(&LOG), Some(&want));
    let fresh = over(saver.clone());
    let head = fresh
        .get_state(&RunConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.values.get(&LOG), Some(&want));
    // The same for `update_state` on the head after r4 is deleted the same way.
    raw.execute_batch("CREATE TABLE kept AS SELECT * FROM blobs")
        .unwrap();
    graph
        .invoke(input("in4"), &RunConfig::new("t").with_run_id("r4"))
        .await
        .unwrap();
    raw.execute_batch("DROP TABLE kept; CREATE TABLE kept AS SELECT * FROM blobs")
        .unwrap();
    saver
        .delete_for_runs(&[cp::RunId::new("r4")])
        .await
        .unwrap();
    raw.execute_batch("INSERT OR IGNORE INTO blobs SELECT * FROM kept; DROP TABLE kept")
        .unwrap();
    // Two updates: r4's first value of `LOG` is its second version (its first is the input's
    // `__start__`), which only the second update would reuse.
    for item in ["edit1", "edit2"] {
        graph
            .update_state(&RunConfig::new("t"), input(item), Some("a".into()))
            .await
            .unwrap();
    }
    let head = over(saver.clone())
        .get_state(&RunConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        head.values.get(&LOG),
        Some(&log(&["in1", "a", "in3", "a", "edit1", "edit2"]))
    );
    drop((graph, fresh, saver));
    let _ = std::fs::remove_file(&path);
}

/// A config that names a checkpoint lists only it, as the reference's savers filter `list` by
/// the config's checkpoint id: the entry the whole history has for it, or nothing when it is
/// unknown, at or after `before`, or does not pass the filter. Before 2026-12-02 the whole
/// thread came back.
#[tokio::test]
async fn a_history_of_a_config_naming_a_checkpoint_lists_only_it() {
    use antler_graph::{CheckpointId, HistoryQuery, MemoryCheckpointer};
    let saver: Arc<dyn cp::Saver> = Arc::new(
        cp::SqliteSaver::open(":memory:", cp::StoreConfig::full())
            .await
            .unwrap(),
    );
    let in_process = stored_in(Arc::new(MemoryCheckpointer::new()));
    for graph in [over(saver), in_process] {
        for run in ["r1", "r2"] {
            graph
                .invoke(input(run), &RunConfig::new("t").with_run_id(run))
                .await
                .unwrap();
        }
        let all = graph.get_state_history(&RunConfig::new("t")).await.unwrap();
        assert_eq!(all.len(), 6);
        let (newer, one) = (&all[1], &all[2]);
        let at = RunConfig::new("t").with_checkpoint(one.checkpoint_id.clone());
        let listed = graph.get_state_history(&at).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(format!("{:?}", listed[0]), format!("{one:?}"));
        let q = |q: HistoryQuery| {
            let (graph, at) = (&graph, &at);
            async move { graph.get_state_history_with(at, &q).await.unwrap().len() }
        };
        assert_eq!(q(HistoryQuery::default().filter("run_id", "r1")).await, 0);
        assert_eq!(q(HistoryQuery::default().filter("run_id", "r2")).await, 1);
        let before = |s: &antler_graph::StateSnapshot| {
            HistoryQuery::default().before(s.checkpoint_id.clone())
        };
        assert_eq!(q(before(one)).await, 0);
        assert_eq!(q(before(newer)).await, 1);
        assert_eq!(q(HistoryQuery::limit(0)).await, 0);
        let unknown = RunConfig::new("t")
            .with_checkpoint(CheckpointId::new("1f0c0000-0000-6000-8000-000000000000"));
        assert!(graph.get_state_history(&unknown).await.unwrap().is_empty());
    }
}
