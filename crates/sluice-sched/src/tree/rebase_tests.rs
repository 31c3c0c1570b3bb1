//! The virtual-time rebase of fair policies ([`Policy::rebase`]): a scheduler whose virtual
//! clocks start just below [`REBASE_AT`] must rebase and then send exactly what one starting
//! at 0 sends, packet for packet.

use super::*;
use crate::builder::{NodeSpec, SchedConfig, TreeBuilder};
use crate::classify::Match;
use crate::policy::{MemberCfg, PolicyKind};

/// Where the clocks start in the shifted runs: multiples of every queue's granularity, so
/// bucket boundaries fall at the same places as in the run from 0. Just below the threshold,
/// and as far up as a clock can be (the fair tags of one packet above it still fit).
const STARTS: [u64; 2] = [REBASE_AT - (1 << 34), 0u64.wrapping_sub(1 << 35)];

/// A builder with room for the six flows of [`run`].
fn builder() -> TreeBuilder {
    TreeBuilder::new(SchedConfig {
        capacity: 64,
        flows: 16,
        ..SchedConfig::default()
    })
}

/// Two WFQ leaves under a WFQ root with weights 1 and 3.
fn wfq_tree() -> Scheduler {
    let mut b = builder();
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
    let a = b.child(root, NodeSpec::new("a", PolicyKind::Wfq).weight(1));
    let c = b.child(root, NodeSpec::new("c", PolicyKind::Wfq).weight(3));
    b.rule(vec![Match::Class(1)], c);
    b.default_leaf(a);
    b.build().expect("a valid tree")
}

/// hClock over flows (reservations and shares) under an HTB root.
fn rls_tree() -> Scheduler {
    let mut b = builder();
    let root = b.root(NodeSpec::new("root", PolicyKind::Htb));
    let mut h = NodeSpec::new("h", PolicyKind::HClock)
        .weight(1)
        .reservation(Rate::gbit(2));
    h.flows = MemberCfg {
        weight: 2,
        reservation: Some(Rate::mbit(500)),
        ..MemberCfg::default()
    };
    let h = b.child(root, h);
    let f = b.child(
        root,
        NodeSpec::new("f", PolicyKind::Fifo)
            .weight(4)
            .reservation(Rate::gbit(1)),
    );
    b.rule(vec![Match::Class(1)], f);
    b.default_leaf(h);
    b.build().expect("a valid tree")
}

/// Six flows (three in class 1), two packets each queued at all times, on a 10 Gbit/s link
/// for `packets` packets: the tokens in the order they left (flow * 2^32 + sequence).
fn run(s: &mut Scheduler, packets: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(packets);
    run_into(s, packets, &mut out);
    out
}

/// [`run`] into `out`, whose room it does not exceed.
fn run_into(s: &mut Scheduler, packets: usize, out: &mut Vec<u64>) {
    let pkt = |flow: u64, seq: u64| Packet {
        token: flow << 32 | seq,
        len: if flow % 2 == 0 { 1500 } else { 700 },
        flow: 1000 + flow,
        class: Some(u32::from(flow >= 3)),
        ..Packet::default()
    };
    let mut next = [2u64; 6];
    for flow in 0..6 {
        for seq in 0..2 {
            s.enqueue(0, &pkt(flow, seq))
                .expect("room for every packet");
        }
    }
    let mut now = 0u64;
    while out.len() < packets {
        let Some(d) = s.dequeue(now) else {
            now = s.next_event(now).expect("packets held").max(now + 1);
            continue;
        };
        out.push(d.token);
        now += u64::from(d.len) * 8 / 10;
        let flow = d.token >> 32;
        s.enqueue(now, &pkt(flow, next[flow as usize]))
            .expect("room for every packet");
        next[flow as usize] += 1;
    }
}

fn start_clocks_at(s: &mut Scheduler, v: u64) {
    for node in &mut s.nodes {
        if node.policy.virtual_time().is_some() {
            assert!(node.policy.set_param("virtual_time", v));
        }
    }
}

fn rebases(s: &Scheduler) -> Vec<u64> {
    s.nodes.iter().map(|n| n.stats.rebases).collect()
}

fn check_rebase_changes_nothing(build: fn() -> Scheduler) {
    let mut from_zero = build();
    let a = run(&mut from_zero, 20_000);
    assert!(rebases(&from_zero).iter().all(|&r| r == 0));
    for start in STARTS {
        let mut shifted = build();
        start_clocks_at(&mut shifted, start);
        let b = run(&mut shifted, 20_000);
        for (node, r) in shifted.nodes.iter().zip(rebases(&shifted)) {
            let Some(v) = node.policy.virtual_time() else {
                continue;
            };
            assert!(r >= 1, "{} never rebased from {start}", node.name);
            assert!(v < REBASE_AT, "{} still at {v}", node.name);
        }
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        assert_eq!(
            first, None,
            "from {start}, the runs part at packet {first:?}"
        );
    }
}

#[test]
fn wfq_rebases_and_sends_exactly_what_it_would_have() {
    check_rebase_changes_nothing(wfq_tree);
}

#[test]
fn hclock_and_htb_rebase_and_send_exactly_what_they_would_have() {
    check_rebase_changes_nothing(rls_tree);
}

/// A rebase empties and refills its node's queues through a list reserved at construction:
/// nothing is allocated, as nothing is on any other packet's way (`tests/zero_alloc.rs`,
/// which cannot bring a clock to a rebase: that takes 2^46 bytes at weight 1).
#[test]
fn a_rebase_allocates_nothing() {
    use crate::alloc_count::{allocations_in, count_this_thread};
    count_this_thread();
    for build in [wfq_tree, rls_tree] {
        let mut s = build();
        start_clocks_at(&mut s, STARTS[0]);
        let mut out = Vec::with_capacity(20_000);
        let made = allocations_in(|| run_into(&mut s, 20_000, &mut out));
        assert_eq!(made, 0);
        let vt_nodes = s.nodes.iter().filter(|n| n.policy.virtual_time().is_some());
        assert!(vt_nodes.clone().count() > 0);
        for node in vt_nodes {
            assert!(node.stats.rebases >= 1, "{} never rebased", node.name);
        }
    }
}

#[test]
fn rebase_offsets_are_aligned_and_leave_the_clock_small() {
    use crate::policy::{REBASE_ALIGN, rebase_offset};
    for v in [
        REBASE_AT,
        REBASE_AT + 12_345,
        u64::MAX / 2 + 7,
        u64::MAX - 5,
    ] {
        let d = rebase_offset(v);
        assert_eq!(d % REBASE_ALIGN, 0);
        assert!((REBASE_ALIGN..2 * REBASE_ALIGN).contains(&(v - d)), "{v}");
    }
}

/// A rebase lowers the finish tag that an idle period brings the virtual time to with the
/// virtual time itself: a flow that sends one packet per busy period rebases once, and its
/// clock stays low after. (Left at the old scale, the next busy period began a whole offset
/// ahead and rebased again.)
#[test]
fn a_rebase_lowers_the_clock_an_idle_period_brings_back() {
    let mut b = builder();
    let leaf = b.root(NodeSpec::new("leaf", PolicyKind::Wfq));
    b.default_leaf(leaf);
    let mut s = b.build().expect("a valid tree");
    start_clocks_at(&mut s, REBASE_AT - 1000);
    for token in 0..4 {
        let p = Packet {
            token,
            len: 1500,
            flow: 1,
            ..Packet::default()
        };
        s.enqueue(token, &p).expect("room");
        assert_eq!(s.dequeue(token).map(|d| d.token), Some(token));
        assert!(s.is_empty());
    }
    assert_eq!(rebases(&s), [1]);
    let v = s.nodes[0].policy.virtual_time().unwrap();
    assert!(v < 2 * crate::policy::REBASE_ALIGN, "{v}");
}
