//! Releases beyond the shaper's horizon ([`Scheduler::file`]): held in time order outside
//! the wheel, which holds one wake for them at the horizon's end. A host that sleeps past
//! their times must find them released at once, in the order of their times, each filed in
//! the wheel once, not hopping one horizon at a time through it in the `dequeue` that wakes
//! it.

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
    // Each filed once, at its time, and the wake once for each. (They hopped a horizon at a
    // time: 24 pushes.)
    assert_eq!(pushed, 4);
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
    assert_eq!(pushed, 4);
}

/// Woken before the release's time but many horizons after it was filed, the host finds the
/// wake filed once more, from the present; and as nothing else is in the shaper, it is told
/// to sleep until the release's time, when the packet leaves. (The release itself hopped from
/// where it was filed, one horizon at a time, and the host was woken every horizon.)
#[test]
fn a_release_still_ahead_wakes_the_host_at_its_time() {
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
    // The wake, filed twice.
    assert_eq!(s.shaper.stats().pushed, 2, "{:?}", s.shaper.stats());
    // Due at the start of its time's slot, as a release in the wheel is.
    let slot_start = due - due % 1024;
    assert_eq!(s.next_event(due - 100 * MS), Some(slot_start));
    assert_eq!(s.dequeue(slot_start - 1), None);
    assert_eq!(s.dequeue(slot_start).map(|d| d.token), Some(1));
    assert_eq!(s.next_event(due), None);
}

/// A scheduler whose one gate, a flow's pacing rate (`flow_gate`; the flow's packets carry
/// it) or a node's limit, lets a 1500 B packet through every 12 s (1 kbit/s), far beyond its
/// 1 ms horizon; and the node whose gate it is, or whose flow's.
fn slow_gate(flow_gate: bool) -> (Scheduler, NodeId) {
    let mut b = TreeBuilder::new(short_horizon());
    let n = if flow_gate {
        b.root(NodeSpec::new("leaf", PolicyKind::Fifo))
    } else {
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
        let limit = Rate::from_bps(1_000).expect("a rate");
        b.child(root, NodeSpec::new("n", PolicyKind::Fifo).rate(limit, 0))
    };
    b.default_leaf(n);
    (b.build().expect("a valid tree"), n)
}

/// A packet that waits beyond the horizon keeps the release time it was given when its gate's
/// rate changes, as every release given does, and what the gate owes is paid at the new rate
/// ([`Gate::set_rate`]). (Lowered to 500 bit/s, a flow's gate let its packet due 12 s later
/// go at the horizon's end, 1 ms after the one before: the gate took the packet's time from
/// its rate, which had changed.)
#[test]
fn a_release_beyond_the_horizon_keeps_its_time_when_the_rate_changes() {
    const SLOT: u64 = 1024;
    for flow_gate in [true, false] {
        // The new rate, and the time from the second packet to the third: at the change, the
        // gate owes 3000 B (the first packet's and the second's), 48 s at 500 bit/s; raised to
        // 1 Gbit/s, 1500 B after the second leaves.
        for (bps, gap) in [(500, 36_000 * MS), (1_000_000_000, 12_000)] {
            let (mut s, n) = slow_gate(flow_gate);
            for t in 0..3 {
                let mut p = packet(t, 1500);
                if flow_gate {
                    p.fields.pacing_bps = 1_000;
                }
                s.enqueue(START, &p).expect("room for three");
            }
            assert_eq!(s.dequeue(START).map(|d| d.token), Some(0));
            let rate = Rate::from_bps(bps).expect("a rate");
            if flow_gate {
                assert!(s.set_flow_rate(START, n, 1, Some(rate)));
            } else {
                s.set_rate(START, n, Some(rate), 0);
            }
            let mut now = START;
            let mut sent = Vec::new();
            while sent.len() < 2 {
                match s.dequeue(now) {
                    Some(d) => sent.push((d.token, now - START)),
                    None => now = s.next_event(now).expect("a release").max(now + 1),
                }
            }
            let case = format!("flow gate {flow_gate}, {bps} bit/s: {sent:?}");
            assert_eq!((sent[0].0, sent[1].0), (1, 2), "{case}");
            assert!(sent[0].1.abs_diff(12_000 * MS) < SLOT, "{case}");
            assert!((sent[1].1 - sent[0].1).abs_diff(gap) < SLOT, "{case}");
            assert_eq!(s.dequeue(now + 100_000 * MS), None, "{case}");
        }
    }
}

/// One FIFO leaf, the root, behind the short horizon; its flows are paced by their packets.
fn fifo_leaf() -> Scheduler {
    let mut b = TreeBuilder::new(short_horizon());
    let leaf = b.root(NodeSpec::new("leaf", PolicyKind::Fifo));
    b.default_leaf(leaf);
    b.build().expect("a valid tree")
}

/// Two 1500 B packets of `flow` at `now`, paced at `bps`: tokens `10 * flow` and one more.
fn send_two(s: &mut Scheduler, now: u64, flow: u64, bps: u64) {
    for round in 0..2 {
        let mut p = packet(10 * flow + round, 1500);
        p.flow = flow;
        p.fields.pacing_bps = bps;
        s.enqueue(now, &p).expect("room");
    }
}

/// Several releases beyond the horizon that come due while the host sleeps leave in the order
/// of their times, not in the order they were filed: three flows paced at 1, 2 and 0.5 Mbit/s
/// (their second packets due 12, 6 and 24 ms after their first, every one beyond the 1 ms
/// horizon), found by a host that wakes 1 s later.
#[test]
fn releases_beyond_the_horizon_due_at_once_leave_in_the_order_of_their_times() {
    let mut s = fifo_leaf();
    for (flow, bps) in [(1, 1_000_000), (2, 2_000_000), (3, 500_000)] {
        send_two(&mut s, START, flow, bps);
    }
    let first: Vec<u64> = (0..3)
        .filter_map(|_| s.dequeue(START))
        .map(|d| d.token)
        .collect();
    assert_eq!(first, [10, 20, 30]);
    assert_eq!(s.dequeue(START), None);
    let late = START + 1000 * MS;
    let second: Vec<u64> = (0..3)
        .filter_map(|_| s.dequeue(late))
        .map(|d| d.token)
        .collect();
    // 2 Mbit/s's first (6 ms), then 1 Mbit/s's (12 ms), then 0.5 Mbit/s's (24 ms).
    assert_eq!(second, [21, 11, 31]);
    assert_eq!(s.stats().clamped, 3, "{:?}", s.stats());
}

/// Releases many horizons apart, found by a host that slept past them all: they leave in the
/// order of their times, and each goes into the wheel once. Three flows paced at 1, 2 and
/// 3 bit/s (their second 1500 B packets due 12 000, 6000 and 4000 s after their first), found
/// a day later: the wheel's 1 ms horizon fits 12 million times into the latest. (Hopping a
/// horizon at a time, this `dequeue` took minutes.)
#[test]
fn releases_hours_apart_found_a_day_later_go_into_the_wheel_once() {
    let mut s = fifo_leaf();
    for flow in 1..=3 {
        send_two(&mut s, START, flow, flow);
    }
    for token in [10, 20, 30] {
        assert_eq!(s.dequeue(START).map(|d| d.token), Some(token));
    }
    let first = START + 4000 * 1000 * MS;
    assert_eq!(s.next_event(START), Some(first - first % 1024));
    let day = START + 86_400 * 1000 * MS;
    let second: Vec<u64> = (0..4)
        .filter_map(|_| s.dequeue(day))
        .map(|d| d.token)
        .collect();
    assert_eq!(second, [31, 21, 11]);
    // The wake at the first's horizon's end, then each release at its time, the wake again
    // after each of the first two.
    assert_eq!(s.shaper.stats().pushed, 6, "{:?}", s.shaper.stats());
    assert_eq!(s.stats().clamped, 3, "{:?}", s.stats());
    assert_eq!(s.next_event(day), None);
}

/// A host whose `now` goes back may give a release beyond the horizon from that `now` that is
/// due before the wake filed from a later one: the wake is filed again, earlier, and the
/// release is not held until the old wake. Flow 1, paced at 1 kbit/s, waits 12 s from
/// `START`; flow 2, paced at 3 Mbit/s and given 5 ms earlier, waits 4 ms from there, until
/// 1 ms before `START`, beyond the horizon from its `now` but before the wake filed at
/// `START`'s horizon's end.
#[test]
fn a_release_from_an_earlier_now_is_not_held_until_a_later_wake() {
    let mut s = fifo_leaf();
    for (now, flow, bps) in [(START, 1, 1_000), (START - 5 * MS, 2, 3_000_000)] {
        send_two(&mut s, now, flow, bps);
        assert_eq!(s.dequeue(now).map(|d| d.token), Some(10 * flow));
    }
    // Due at once: the shaper's front is at `START` already, where it stays.
    assert_eq!(s.dequeue(START).map(|d| d.token), Some(21));
    let next = START + 12_000 * MS;
    assert_eq!(s.next_event(START), Some(next - next % 1024));
    assert_eq!(s.stats().clamped, 2, "{:?}", s.stats());
}

/// A host whose `now` went back by more than the horizon files the wake at the shaper's front
/// (a wheel's front never moves back), past the release it is for: `next_event` names the
/// wake's time, not the release's, and a host that sleeps until each answer gets the packet
/// there. (It named the release's, earlier than the front: the host found nothing and was
/// told the same time again, for ever.) Flow 2's second packet, given 5 ms before `START`,
/// is due 1 ms before it.
#[test]
fn after_a_step_back_the_host_is_told_when_the_wake_can_come() {
    let mut s = fifo_leaf();
    let earlier = START - 5 * MS;
    for (now, flow, bps) in [(START, 1, 1_000), (earlier, 2, 3_000_000)] {
        send_two(&mut s, now, flow, bps);
        assert_eq!(s.dequeue(now).map(|d| d.token), Some(10 * flow));
    }
    assert_eq!(s.shaper.len(), 1, "only the wake is in the shaper");
    let mut now = earlier;
    let sent = loop {
        if let Some(d) = s.dequeue(now) {
            break d.token;
        }
        let t = s.next_event(now).expect("packets held");
        assert!(t > now, "found nothing at {now}, told {t}");
        now = t;
    };
    assert_eq!(sent, 21);
    // At the front's slot, where `START` put it.
    assert_eq!(now, START - START % 1024);
}

/// A wheel whose horizon is exactly u64::MAX ns (3 slots of u64::MAX / 3) is still a wheel:
/// its window ends one slot short of u64::MAX at time 0, so a release at the end of time (a
/// stamp saturates there: 4 GiB at 1 bit/s) waits beyond it until then. (Its horizon read as
/// that of an exact structure, which holds any time: the release went into the wheel, which
/// clamped it to its last slot, 195 years early.) A wheel that spans every time (2 slots of
/// u64::MAX - 1 ns) holds it in the wheel. (Made a nanosecond shorter too, its horizon ended
/// in the present slot, and the wake for the release was due as soon as it was filed, again
/// and again: `dequeue` never returned.)
#[test]
fn a_wheel_whose_horizon_is_u64_max_holds_a_release_at_the_end_of_time_until_then() {
    for (slot_ns, slots) in [(u64::MAX / 3, 3), (u64::MAX - 1, 2)] {
        let cfg = SchedConfig {
            capacity: 4,
            flows: 2,
            shaper: ShaperConfig {
                slot_ns,
                slots,
                ..ShaperConfig::default()
            },
            ..SchedConfig::default()
        };
        let mut b = TreeBuilder::new(cfg);
        let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo);
        leaf.flow_rate = Rate::new(1);
        let leaf = b.root(leaf);
        b.default_leaf(leaf);
        let mut s = b.build().expect("a valid tree");
        s.enqueue(0, &packet(0, u32::MAX)).expect("room");
        s.enqueue(0, &packet(1, u32::MAX)).expect("room");
        assert_eq!(s.dequeue(0).map(|d| d.token), Some(0));
        let mut now = 0;
        while let Some(t) = s.next_event(now) {
            now = t;
            if let Some(d) = s.dequeue(now) {
                assert_eq!(d.token, 1);
                break;
            }
        }
        // At the start of its slot, as every release in the wheel.
        let due = u64::MAX - u64::MAX % slot_ns;
        assert_eq!(now, due, "{slots} x {slot_ns} ns: released before its time");
    }
}
