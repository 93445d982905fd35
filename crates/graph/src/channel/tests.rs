//! Unit tests of the channel kinds (runtime-spec §3).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;

fn v(x: i64) -> Write {
    Write::Value(Arc::new(x))
}

fn get(c: &dyn Channel) -> Option<i64> {
    c.get().and_then(|v| v.downcast_ref::<i64>()).copied()
}

#[test]
fn last_value_rejects_two_writes_in_one_step() {
    let mut c = LastValue {
        name: Arc::from("x"),
        value: None,
    };
    assert!(c.update(&[&v(1)]).unwrap());
    let err = c.update(&[&v(2), &v(3)]).unwrap_err();
    assert!(matches!(err, Error::InvalidConcurrentUpdate { ref channel } if channel == "x"));
    assert!(
        !c.update(&[]).unwrap(),
        "update([]) leaves a last value alone"
    );
    assert_eq!(get(&c), Some(1));
}

#[test]
fn ephemeral_is_cleared_by_empty_update_and_that_is_a_change() {
    let mut c = Ephemeral {
        name: Arc::from("e"),
        value: None,
        guard: false,
        untracked: false,
    };
    assert!(c.update(&[&v(1), &v(2)]).unwrap());
    assert_eq!(get(&c), Some(2), "unguarded keeps the last of many");
    assert!(c.update(&[]).unwrap());
    assert_eq!(get(&c), None);
    assert!(!c.update(&[]).unwrap());
}

#[test]
fn reducer_overwrite_drops_other_writes_and_only_one_per_step() {
    let reduce: ReduceFn = Arc::new(|acc: Val, batch: &[Val], _aux: &mut Aux| {
        let mut s = *acc.downcast_ref::<i64>().ok_or("type")?;
        for b in batch {
            s += *b.downcast_ref::<i64>().ok_or("type")?;
        }
        Ok(Arc::new(s) as Val)
    });
    let mut c = Reducer {
        name: Arc::from("n"),
        value: Arc::new(0i64),
        reduce,
        aux: None,
    };
    assert!(c.update(&[&v(1), &v(2)]).unwrap());
    assert_eq!(get(&c), Some(3));
    let ow = Write::Overwrite(Arc::new(10i64));
    assert!(c.update(&[&v(5), &ow, &v(7)]).unwrap());
    assert_eq!(get(&c), Some(10));
    let err = c.update(&[&ow, &ow]).unwrap_err();
    assert!(matches!(err, Error::MultipleOverwrites { .. }));
}

#[test]
fn barrier_needs_every_name_and_resets_on_consume() {
    let names: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
    let mut c = Barrier {
        name: Arc::from("join:a+b:c"),
        names: Arc::new(names),
        seen: BTreeSet::new(),
        after_finish: false,
        finished: false,
        unit: Arc::new(()),
    };
    let a = Write::Value(Arc::new("a".to_owned()));
    let b = Write::Value(Arc::new("b".to_owned()));
    assert!(c.update(&[&a]).unwrap());
    assert!(c.get().is_none());
    assert!(!c.update(&[&a]).unwrap(), "a name seen twice is no change");
    assert!(
        !c.update(&[]).unwrap(),
        "update([]) keeps a partial barrier"
    );
    assert!(c.update(&[&b]).unwrap());
    assert!(c.get().is_some());
    assert!(c.consume());
    assert!(c.get().is_none());
    let x = Write::Value(Arc::new("x".to_owned()));
    assert!(c.update(&[&x]).is_err());
}

/// A barrier restored with a name the join does not have (foreign or damaged stored data) is
/// not complete until every one of its own sources has written: the sets are compared, not
/// their sizes (before 2026-12-02, `["a", "zz"]` opened the join `a+b`).
#[test]
fn a_restored_barrier_with_a_foreign_name_is_not_complete() {
    let names: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
    let mut c = Barrier {
        name: Arc::from("join:a+b:c"),
        names: Arc::new(names),
        seen: ["a".to_owned(), "zz".to_owned()].into(),
        after_finish: false,
        finished: false,
        unit: Arc::new(()),
    };
    assert!(c.get().is_none());
    let b = Write::Value(Arc::new("b".to_owned()));
    assert!(c.update(&[&b]).unwrap());
    assert!(c.get().is_some());
}

#[test]
fn after_finish_is_readable_only_after_finish() {
    let mut c = AfterFinish {
        value: None,
        finished: false,
    };
    assert!(c.update(&[&v(1)]).unwrap());
    assert!(c.get().is_none());
    assert!(!c.consume());
    assert!(c.finish());
    assert!(c.get().is_some());
    assert!(c.consume());
    assert!(c.get().is_none());
}

#[test]
fn topic_is_not_accumulating() {
    let mut t = Topic::default();
    assert!(t.update(&[&v(1), &v(2)]).unwrap());
    assert_eq!(t.packets().len(), 2);
    assert!(t.update(&[&v(3)]).unwrap());
    assert_eq!(t.packets().len(), 1);
    assert!(t.update(&[]).unwrap(), "clearing is a change");
    assert!(t.get().is_none());
    assert!(!t.update(&[]).unwrap());
}

fn msgs(ids: &[&str]) -> Write {
    Write::Value(Arc::new(
        ids.iter()
            .map(|i| Message::human(format!("{i}?")).with_id(*i))
            .collect::<Vec<_>>(),
    ))
}

fn ids_of(c: &dyn Channel) -> Vec<String> {
    c.get()
        .and_then(|v| v.downcast_ref::<Vec<Message>>())
        .map(|l| l.iter().filter_map(|m| m.id.clone()).collect())
        .unwrap_or_default()
}

/// The messages channel keeps its id index between steps; an Overwrite must drop it, or a later
/// replace-by-id would miss an id the overwrite moved and append a duplicate.
#[test]
fn messages_channel_index_is_dropped_by_an_overwrite() {
    const M: crate::Key<Vec<Message>> = crate::Key::from_static("messages");
    for delta in [false, true] {
        let spec = if delta {
            crate::ChannelSpec::messages_delta(10)
        } else {
            crate::ChannelSpec::messages()
        };
        let mut c = crate::schema::ErasedSpec::new(&M, spec)
            .channel(None)
            .unwrap();
        c.update(&[&msgs(&["a", "b"])]).unwrap();
        c.update(&[&msgs(&["c"])]).unwrap();
        assert_eq!(ids_of(c.as_ref()), ["a", "b", "c"]);
        let Write::Value(v) = msgs(&["b", "y", "c"]) else {
            unreachable!()
        };
        c.update(&[&Write::Overwrite(v)]).unwrap();
        c.update(&[&msgs(&["b"])]).unwrap();
        assert_eq!(ids_of(c.as_ref()), ["b", "y", "c"], "delta: {delta}");
        // And a copy of the channel (a fork) merges independently of the original.
        let mut fork = c.box_clone();
        fork.update(&[&msgs(&["z"])]).unwrap();
        c.update(&[&msgs(&["y"])]).unwrap();
        assert_eq!(ids_of(fork.as_ref()), ["b", "y", "c", "z"]);
        assert_eq!(ids_of(c.as_ref()), ["b", "y", "c"]);
    }
}

/// Writes before a step's Overwrite go through the reducer of an ordinary reducer channel
/// (the reference's `BinaryOperatorAggregate` folds them before the overwrite replaces the
/// result), so one the reducer refuses fails the step; the delta channel drops them unread
/// (runtime-spec §5.1). Writes after the Overwrite are ignored by both.
#[test]
fn writes_before_an_overwrite_are_folded_except_by_the_delta_channel() {
    const M: crate::Key<Vec<Message>> = crate::Key::from_static("messages");
    let removal = Write::Value(Arc::new(vec![Message::remove("ghost")]));
    let Write::Value(list) = msgs(&["x"]) else {
        unreachable!()
    };
    let overwrite = Write::Overwrite(list);
    for delta in [false, true] {
        let mut c = crate::schema::ErasedSpec::new(&M, spec_of(delta))
            .channel(None)
            .unwrap();
        c.update(&[&msgs(&["a"])]).unwrap();
        let before = c.update(&[&removal, &overwrite]);
        if delta {
            assert!(before.unwrap());
            assert_eq!(ids_of(c.as_ref()), ["x"]);
        } else {
            let err = before.unwrap_err();
            assert!(matches!(err, Error::Reducer { .. }), "{err}");
            assert!(err.to_string().contains("ghost"), "{err}");
        }
        let mut c = crate::schema::ErasedSpec::new(&M, spec_of(delta))
            .channel(None)
            .unwrap();
        c.update(&[&msgs(&["a"])]).unwrap();
        assert!(c.update(&[&overwrite, &removal]).unwrap(), "after: ignored");
        assert_eq!(ids_of(c.as_ref()), ["x"], "delta: {delta}");
        // In write order: the refused write fails before a second Overwrite would.
        let err = c.update(&[&removal, &overwrite, &overwrite]).unwrap_err();
        if delta {
            assert!(matches!(err, Error::MultipleOverwrites { .. }), "{err}");
        } else {
            assert!(matches!(err, Error::Reducer { .. }), "{err}");
        }
    }
}

fn spec_of(delta: bool) -> crate::ChannelSpec<Vec<Message>> {
    if delta {
        crate::ChannelSpec::messages_delta(10)
    } else {
        crate::ChannelSpec::messages()
    }
}
