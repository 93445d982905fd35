//! End-to-end tests through the facade: an agent (middleware) on the graph
//! runtime, persisted by a real SQLite saver in delta mode.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;

use antler::checkpoint::{ErrorKind, SnapshotFrequency, SqliteSaver, StoreConfig};
use antler::graph::{BoxError, ChannelSpec, RunConfig, SaverCheckpointer, Update};
use antler::middleware::{AgentGraph, ChainBuilder, ChatModel, MESSAGES, ModelRequest};
use antler::state_reducers::Message;

/// Answers with the number of messages it saw.
struct Counting;

#[async_trait::async_trait]
impl ChatModel for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    async fn invoke(&self, request: &ModelRequest) -> Result<Message, BoxError> {
        Ok(Message::ai(format!("seen {}", request.messages.len())))
    }
}

fn agent(saver: SqliteSaver, frequency: u32) -> antler::graph::CompiledGraph {
    AgentGraph::new(ChainBuilder::new().build().unwrap(), Arc::new(Counting))
        .with_messages_channel(move || ChannelSpec::messages_delta(frequency))
        .build()
        .unwrap()
        .compile()
        .unwrap()
        .with_checkpointer(Arc::new(SaverCheckpointer::new(Arc::new(saver))))
}

#[tokio::test(flavor = "current_thread")]
async fn a_delta_mode_agent_survives_reopening_its_sqlite_store() {
    let path = std::env::temp_dir().join(format!("antler-e2e-{}.db", std::process::id()));
    remove_db(&path);
    let config = StoreConfig::delta(SnapshotFrequency::new(3).unwrap());
    let thread = RunConfig::new("e2e");
    {
        let graph = agent(SqliteSaver::open(&path, config).await.unwrap(), 3);
        for turn in 0..7 {
            let input = Update::new().set(&MESSAGES, vec![Message::human(format!("turn {turn}"))]);
            graph.invoke(input, &thread).await.unwrap();
        }
    }
    // A fresh process: reopen the file, read the head, continue the thread.
    let graph = agent(SqliteSaver::open(&path, config).await.unwrap(), 3);
    let state = graph.get_state(&thread).await.unwrap().unwrap();
    let messages = state.values.get(&MESSAGES).unwrap();
    assert_eq!(messages.len(), 14);
    assert_eq!(messages[13].content.text(), "seen 13");
    let before: Vec<_> = messages.iter().map(|m| m.id.clone().unwrap()).collect();
    let input = Update::new().set(&MESSAGES, vec![Message::human("after reopen")]);
    let out = graph.invoke(input, &thread).await.unwrap();
    let after: Vec<_> = out
        .values
        .get(&MESSAGES)
        .unwrap()
        .iter()
        .map(|m| m.id.clone().unwrap())
        .collect();
    // Ids stamped before the restart are the persisted ones.
    assert_eq!(&after[..14], &before[..]);
    assert_eq!(after.len(), 16);

    // The store recorded delta mode: opening it in full mode fails closed at open time, as
    // the mode mismatch of kernel-spec R34.
    let err = SqliteSaver::open(&path, StoreConfig::full())
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::ModeMismatch);
    assert!(err.to_string().contains("requires delta mode"), "{err}");
    remove_db(&path);
}

/// Removes a SQLite file and its WAL sidecars.
fn remove_db(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}
