//! Releases beyond the shaper's horizon ([`Scheduler::file`]): filed at the horizon's end and
//! again until their time. A host that sleeps past that time must find them released at once,
//! not hopping one horizon at a time through the wheel in the `dequeue` that wakes it.

use super::*;
use crate::builder::{NodeSpec, SchedConfig, ShaperConfig, TreeBuilder};
use crate::policy::PolicyKind;
use crate::units::Rate;

const MS: u64 = 1_000_000;
const START: u64 = 1_000_000_000;

/// 1024 slots of 1024 ns: a horizon of about 1 ms.
fn short_horizon() -> SchedConfig {
    SchedConfig {
        capacity: 16,
        flows: 4,
        shaper: ShaperConfig {
            slot_ns: 1024,
            slots: 1024,
            ..ShaperConfig::default()
        },
        ..SchedConfig::default()
    }
}

fn packet(token: u64, len: u32) -> Packet {
    Packet {
        token,
        len,
        flow: 1,
        ..Packet::default()
    }
}

/// Sends three 1500 B packets through `s`, whose one gate limits them to 1 Mbit/s (12 ms
/// each), waking 1 s after the first: the second leaves then, and the third, whose time (12 ms
/// after the second's own) has come too. Returns how many items the shaper was given.
fn oversleep(mut s: Scheduler) -> u64 {
    for t in 0..3 {
        s.enqueue(START, &packet(t, 1500)).expect("room for three");
    }
    assert_eq!(s.dequeue(START).map(|d| d.token), Some(0));
    let late = START + 1000 * MS;
    assert_eq!(s.dequeue(late).map(|d| d.token), Some(1));
    // The third is stamped from the second's time, not from the late wake-up: it is due at
    // once.
    assert_eq!(s.dequeue(late).map(|d| d.token), Some(2));
    assert_eq!(s.dequeue(late), None);
    // Both waited beyond the horizon from their predecessor's time.
    assert_eq!(s.stats().clamped, 2, "{:?}", s.stats());
    s.shaper.stats().pushed
}

#[test]
fn a_flow_gate_release_is_not_refiled_past_a_late_wake_up() {
    let mut b = TreeBuilder::new(short_horizon());
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo);
    leaf.flow_rate = Some(Rate::mbit(1));
    let leaf = b.root(leaf);
    b.default_leaf(leaf);
    let pushed = oversleep(b.build().expect("a valid tree"));
    // Each filed once at the horizon's end. (They hopped a horizon at a time: 24 pushes.)
    assert_eq!(pushed, 2);
}

#[test]
fn a_node_gate_release_is_not_refiled_past_a_late_wake_up() {
    let mut b = TreeBuilder::new(short_horizon());
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
    let n = b.child(
        root,
        NodeSpec::new("n", PolicyKind::Fifo).rate(Rate::mbit(1), 0),
    );
    b.default_leaf(n);
    let pushed = oversleep(b.build().expect("a valid tree"));
    assert_eq!(pushed, 2);
}

/// Woken before the release's time but many horizons after it was filed, the host finds it
/// filed once more, from the present (it hopped from where it was filed, one horizon at a
/// time), and it leaves at its time.
#[test]
fn a_release_still_ahead_is_refiled_from_the_present() {
    let mut b = TreeBuilder::new(short_horizon());
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo);
    leaf.flow_rate = Rate::new(10_000); // 1.2 s per 1500 B packet
    let leaf = b.root(leaf);
    b.default_leaf(leaf);
    let mut s = b.build().expect("a valid tree");
    s.enqueue(START, &packet(0, 1500)).expect("room");
    s.enqueue(START, &packet(1, 1500)).expect("room");
    assert_eq!(s.dequeue(START).map(|d| d.token), Some(0));
    let due = START + 1200 * MS;
    assert_eq!(s.dequeue(due - 100 * MS), None);
    assert_eq!(s.shaper.stats().pushed, 2, "{:?}", s.shaper.stats());
    // Filed again at the horizon's end from the present: the host wakes a horizon later.
    let wake = s.next_event(due - 100 * MS).expect("a release is waiting");
    assert!(wake <= due - 100 * MS + 1024 * 1024, "woken at {wake}");
    let mut now = wake;
    let sent = loop {
        if let Some(d) = s.dequeue(now) {
            break (d.token, now);
        }
        now = s
            .next_event(now)
            .expect("a release is waiting")
            .max(now + 1);
    };
    assert_eq!(sent.0, 1);
    assert!(sent.1 <= due && sent.1 + 1024 > due, "left at {}", sent.1);
}
