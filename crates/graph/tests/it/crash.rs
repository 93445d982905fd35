//! Fault test: a child process running a graph on SQLite is SIGKILLed after its k-th store
//! operation, for every k; reopening the database and resuming must give the same final state
//! as an uninterrupted run. Over a full-mode and a delta-mode store (a `messages` channel that
//! snapshots every 2 updates) and every durability mode.
//!
//! A second pass kills the child while its k-th store operation runs: the child is let into the
//! operation and killed after a delay that varies with k (from none to a few milliseconds), so
//! kills land before, inside and after the operation's transaction.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command as Proc, Stdio};
use std::sync::Arc;

use antler_graph::{
    ChannelSpec, CheckpointId, CheckpointRecord, CheckpointTuple, Checkpointer, CompiledGraph,
    Durability, Input, Result, RunConfig, SaverCheckpointer, State, TaskId, Update,
};
use antler_state_reducers::Message;
use serde_json::Value as Json;

use crate::common::{LOG, N, graph, log};

const CHILD_ENV: &str = "ANTLER_GRAPH_CRASH_CHILD";
const CHILD_DURABILITY_ENV: &str = "ANTLER_GRAPH_CRASH_DURABILITY";
const CHILD_MODE_ENV: &str = "ANTLER_GRAPH_CRASH_MODE";
/// Set: the child announces each store operation before it starts instead of after it ends.
const CHILD_BEFORE_ENV: &str = "ANTLER_GRAPH_CRASH_BEFORE";

/// How long after letting the child into its k-th operation the mid-operation pass kills it
/// (indexed by k modulo the length): a SQLite put here takes about 0.1–1 ms.
const MID_OP_DELAYS_US: [u64; 6] = [0, 50, 200, 500, 1_000, 3_000];

const MESSAGES: antler_graph::Key<Vec<Message>> = antler_graph::Key::from_static("messages");

/// The store and channel mode of a run: `full` (messages as an ordinary reducer channel) or
/// `delta` (a delta channel snapshotting every 2 updates, on a delta store).
fn delta_mode(mode: &str) -> bool {
    mode == "delta"
}

fn build(cp: Arc<dyn Checkpointer>, mode: &str) -> CompiledGraph {
    let mut g = graph();
    let spec = if delta_mode(mode) {
        ChannelSpec::messages_delta(2)
    } else {
        ChannelSpec::messages()
    };
    g.channel(&MESSAGES, spec).expect("declared once");
    for name in ["a", "b", "c", "d", "e"] {
        g.add_node(name, move |_s: State, _c| async move {
            let mut m = Message::ai(format!("from {name}"));
            m.id = Some(format!("m-{name}"));
            Ok(Update::new()
                .set(&LOG, log(&[name]))
                .set(&N, 1)
                .set(&MESSAGES, vec![m]))
        });
    }
    // a and b run in parallel (a mid-step kill lands between their writes), join into c, then d, e.
    g.add_edge("__start__", "a").add_edge("__start__", "b");
    g.add_join(["a", "b"], "c");
    g.add_edge("c", "d")
        .add_edge("d", "e")
        .add_edge("e", "__end__");
    g.compile().expect("valid graph").with_checkpointer(cp)
}

async fn sqlite(path: &str, mode: &str) -> Arc<dyn Checkpointer> {
    let config = if delta_mode(mode) {
        antler_checkpoint::StoreConfig::delta(
            antler_checkpoint::SnapshotFrequency::new(2).expect("a valid frequency"),
        )
    } else {
        antler_checkpoint::StoreConfig::full()
    };
    let saver = antler_checkpoint::SqliteSaver::open(path, config)
        .await
        .expect("SQLite opens");
    Arc::new(SaverCheckpointer::new(Arc::new(saver)))
}

/// Announces every store operation on stdout (after it completes, or before it starts with
/// `before`) and waits for the parent's go-ahead.
struct Announcing(Arc<dyn Checkpointer>, bool);

impl Announcing {
    fn announce(&self, what: &str, before: bool) {
        if before != self.1 {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "OP {what}");
        let _ = out.flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
}

/// Every method is passed on, so the child runs exactly what the store's own checkpointer
/// does (its encoded lists, pages, version marks), only announcing the writes.
#[async_trait::async_trait]
impl Checkpointer for Announcing {
    async fn get_tuple(
        &self,
        thread: &antler_graph::Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.0.get_tuple(thread, id).await
    }
    async fn head(
        &self,
        thread: &antler_graph::Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.0.head(thread, id).await
    }
    fn accepts_encoded_lists(&self) -> bool {
        self.0.accepts_encoded_lists()
    }
    async fn list_ids(
        &self,
        thread: &antler_graph::Scope,
        before: Option<&CheckpointId>,
        limit: Option<usize>,
    ) -> Result<Vec<CheckpointId>> {
        self.0.list_ids(thread, before, limit).await
    }
    async fn list_page(
        &self,
        thread: &antler_graph::Scope,
        before: Option<&CheckpointId>,
        limit: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        self.0.list_page(thread, before, limit).await
    }
    async fn max_version(&self, thread: &antler_graph::Scope) -> Result<u64> {
        self.0.max_version(thread).await
    }
    async fn delta_history(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, antler_graph::DeltaHistory>> {
        self.0.delta_history(thread, checkpoint, channels).await
    }
    async fn list(&self, thread: &antler_graph::Scope) -> Result<Vec<CheckpointTuple>> {
        self.0.list(thread).await
    }
    async fn put(&self, thread: &antler_graph::Scope, checkpoint: CheckpointRecord) -> Result<()> {
        self.announce("put", true);
        self.0.put(thread, checkpoint).await?;
        self.announce("put", false);
        Ok(())
    }
    async fn put_writes(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        self.announce("put_writes", true);
        self.0
            .put_writes(thread, checkpoint, task_id, task_path, writes)
            .await?;
        self.announce("put_writes", false);
        Ok(())
    }
}

fn input() -> Update {
    Update::new().set(&LOG, log(&["in"]))
}

/// Entry point of the child process (does nothing unless started by the parent test with `CHILD_ENV`).
#[test]
fn crash_child_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mode = std::env::var(CHILD_MODE_ENV).unwrap_or_default();
        let before = std::env::var_os(CHILD_BEFORE_ENV).is_some();
        let cp: Arc<dyn Checkpointer> = Arc::new(Announcing(sqlite(&path, &mode).await, before));
        let graph = build(cp, &mode);
        let durability = match std::env::var(CHILD_DURABILITY_ENV).as_deref() {
            Ok("async") => Durability::Async,
            Ok("exit") => Durability::Exit,
            _ => Durability::Sync,
        };
        let cfg = RunConfig::new("t").with_durability(durability);
        graph.invoke(input(), &cfg).await.expect("child run");
        println!("OP done");
    });
}

/// What a run of the graph ends with: its log, counter and message ids.
type Final = (Option<Vec<String>>, Option<i64>, Option<Vec<String>>);

fn final_state(out: &antler_graph::RunOutcome) -> Final {
    (
        out.values.get(&LOG).cloned(),
        out.values.get(&N).copied(),
        out.values
            .get(&MESSAGES)
            .map(|m| m.iter().filter_map(|m| m.id.clone()).collect::<Vec<_>>()),
    )
}

/// One pass over every kill point of a `mode`/`durability` run: a child is killed after its
/// k-th store operation (`mid`: while it runs), for k = 1, 2, … until a child finishes; each
/// killed store is reopened and resumed and must end as `reference`. Returns the number of
/// kill points.
fn kill_pass(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    (mode, durability): (&str, &str),
    mid: bool,
    reference: &Final,
) -> usize {
    let exe = std::env::current_exe().expect("test binary");
    let pass = if mid { "mid" } else { "after" };
    let mut kill_points = 0;
    for k in 1.. {
        let path = dir.join(format!("kill-{mode}-{durability}-{pass}-{k}.db"));
        let path_s = path.to_str().expect("utf-8 path").to_owned();
        let mut cmd = Proc::new(&exe);
        cmd.args([
            "--exact",
            "crash::crash_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path_s)
        .env(CHILD_DURABILITY_ENV, durability)
        .env(CHILD_MODE_ENV, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if mid {
            cmd.env(CHILD_BEFORE_ENV, "1");
        }
        let mut child = cmd.spawn().expect("child starts");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut ops = 0;
        let mut finished = false;
        for line in stdout.lines() {
            let line = line.expect("child output");
            // libtest may print its own prefix on the same line.
            let Some(pos) = line.find("OP ") else {
                continue;
            };
            if &line[pos + 3..] == "done" {
                finished = true;
                break;
            }
            ops += 1;
            if ops == k {
                if mid {
                    // Into the operation, then the kill after this k's delay.
                    writeln!(stdin, "go").expect("child reads");
                    let delay = MID_OP_DELAYS_US[k % MID_OP_DELAYS_US.len()];
                    std::thread::sleep(std::time::Duration::from_micros(delay));
                }
                break;
            }
            writeln!(stdin, "go").expect("child reads");
        }
        if finished {
            let _ = child.wait();
            // The run that was not killed: every operation it reported was a kill point.
            assert_eq!(
                kill_points, ops,
                "{mode}/{durability}/{pass}: a kill at each of the run's {ops} store operations"
            );
            break;
        }
        // A child that stopped before its k-th operation died on its own: no kill point.
        if ops != k {
            let out = child.wait_with_output().expect("child output");
            panic!(
                "{mode}/{durability}/{pass}: the child stopped after {ops} of {k} operations: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // SIGKILL on Unix: the child cannot clean up.
        child.kill().expect("kill child");
        let _ = child.wait();
        kill_points += 1;
        let resumed = rt.block_on(async {
            let graph = build(sqlite(&path_s, mode).await, mode);
            let cfg = RunConfig::new("t");
            let out = match graph
                .get_state(&cfg)
                .await
                .expect("readable after the crash")
            {
                Some(_) => graph.invoke(Input::Continue, &cfg).await,
                None => graph.invoke(input(), &cfg).await,
            }
            .expect("resume finishes");
            final_state(&out)
        });
        assert_eq!(
            &resumed, reference,
            "{mode}/{durability}/{pass}: kill at store operation {k}"
        );
    }
    kill_points
}

#[test]
fn sigkill_mid_run_on_sqlite_then_resume_gives_the_uninterrupted_final_state() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("antler-graph-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (mode, durability) in [
        ("full", "sync"),
        ("full", "async"),
        ("full", "exit"),
        ("delta", "sync"),
        ("delta", "async"),
        ("delta", "exit"),
    ] {
        // Reference: the uninterrupted run.
        let reference = rt.block_on(async {
            let path = dir.join(format!("reference-{mode}.db"));
            let _ = std::fs::remove_file(&path);
            let graph = build(sqlite(path.to_str().expect("utf-8 path"), mode).await, mode);
            let out = graph
                .invoke(input(), &RunConfig::new("t"))
                .await
                .expect("reference run");
            final_state(&out)
        });
        assert_eq!(reference.0, Some(log(&["in", "a", "b", "c", "d", "e"])));
        // Exit durability stores the run once at its end (a checkpoint and its writes).
        let least = if durability == "exit" { 1 } else { 8 };
        for mid in [false, true] {
            let kill_points = kill_pass(&rt, &dir, (mode, durability), mid, &reference);
            assert!(
                kill_points >= least,
                "{mode}/{durability} (mid: {mid}): a run of at least {least} store operations ({kill_points})"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
