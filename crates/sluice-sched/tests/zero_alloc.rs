//! The scheduler does not allocate after construction: packets, flows, shaper records and every
//! queue are reserved up front. A counting global allocator watches a long random run.

use sluice_queue::Overflow;
use sluice_sched::classify::Match;
use sluice_sched::{
    NodeSpec, Packet, PolicyKind, Rate, RejectReason, SchedConfig, ShaperConfig, TreeBuilder,
};
#[path = "support/alloc_count.rs"]
mod alloc_count;
use alloc_count::{allocations_in, count_this_thread};

#[test]
fn no_allocation_per_packet_after_construction() {
    count_this_thread();
    // Every kind of node: per-packet internal WFQ with a limited class, per-flow FQ with pacing,
    // hClock dual queues, pFabric, an internal LSTF node on an approximate queue (a leaf's
    // would be a cFFS) over an EDF leaf.
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 4096,
        flows: 256,
        max_packet: 9000,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::gbit(10), 30_000));
    let mut fq = NodeSpec::new("fq", PolicyKind::Fq);
    fq.flow_rate = Some(Rate::mbit(200));
    let lstf = b.child(root, NodeSpec::new("lstf", PolicyKind::Lstf));
    let leaves = [
        b.child(root, fq),
        b.child(
            root,
            NodeSpec::new("hclock", PolicyKind::HClock).rate(Rate::gbit(2), 9000),
        ),
        b.child(root, NodeSpec::new("pfabric", PolicyKind::Pfabric)),
        b.child(lstf, NodeSpec::new("edf", PolicyKind::Edf)),
    ];
    for (i, &l) in leaves.iter().enumerate() {
        b.rule(vec![Match::Class(i as u32)], l);
    }
    let mut s = b.build().unwrap();
    assert!(
        s.describe()
            .contains("lstf per-packet, queue circular_approx")
    );
    let mut rng = sluice_queue::workload::Rng::new(5);
    let mut now = 1_000_000_000u64;
    let mut run = |s: &mut sluice_sched::Scheduler, steps: u64| {
        for token in 0..steps {
            let mut p = Packet {
                token,
                len: 64 + (rng.next_u64() % 9000) as u32,
                flow: rng.next_u64() % 300,
                class: Some((rng.next_u64() % 4) as u32),
                ..Packet::default()
            };
            p.fields.remaining = 1 + rng.next_u64() % 10_000_000;
            p.fields.slack = rng.next_u64() % 1_000_000;
            p.fields.deadline = now + rng.next_u64() % 1_000_000;
            let _ = s.enqueue(now, &p);
            for _ in 0..2 {
                let _ = s.dequeue(now);
            }
            // Below the root's 10 Gbit/s on average, so that the hClock leaf's 2 Gbit/s limit
            // does not fill the buffer and turn most packets away: 1200 flow keys go through
            // 256 slots, reclaimed on almost every new flow.
            now += rng.next_u64() % 10_000;
        }
    };
    // Warm up: let every slab and table reach its steady use.
    run(&mut s, 20_000);
    let made = allocations_in(|| run(&mut s, 100_000));
    assert_eq!(
        made, 0,
        "allocations during 100k enqueues and 200k dequeues"
    );
    assert!(s.stats().enqueued > 100_000);
    assert!(s.stats().flows_reclaimed > 50_000);
}

/// The paths a plain run seldom takes do not allocate either: releases beyond the shaper's
/// horizon (filed at its end again and again, or refused), pacing rates that come with the
/// packets, and rates, weights, reservations and flow rates changed at run time.
#[test]
fn no_allocation_beyond_the_horizon_or_on_run_time_changes() {
    count_this_thread();
    for beyond_horizon in [Overflow::Clamp, Overflow::Reject] {
        // A 1 ms horizon: a 1500 B packet at under 12 Mbit/s waits beyond it.
        let mut b = TreeBuilder::new(SchedConfig {
            capacity: 1024,
            flows: 64,
            max_packet: 9000,
            shaper: ShaperConfig {
                slot_ns: 1024,
                slots: 1024,
                beyond_horizon,
                ..ShaperConfig::default()
            },
        });
        let root = b.root(NodeSpec::new("root", PolicyKind::Htb).rate(Rate::gbit(1), 30_000));
        let mut fq = NodeSpec::new("fq", PolicyKind::Fq);
        fq.flow_rate = Some(Rate::mbit(50));
        let mut hclock = NodeSpec::new("hclock", PolicyKind::HClock).rate(Rate::mbit(5), 1500);
        hclock.member.reservation = Some(Rate::mbit(2));
        hclock.flows.reservation = Rate::new(500_000);
        let leaves = [
            b.child(root, fq),
            b.child(root, hclock),
            b.child(root, NodeSpec::new("wfq", PolicyKind::Wfq).weight(2)),
        ];
        for (i, &l) in leaves.iter().enumerate() {
            b.rule(vec![Match::Class(i as u32)], l);
        }
        let mut s = b.build().unwrap();
        let mut rng = sluice_queue::workload::Rng::new(9);
        let mut now = 1_000_000_000u64;
        let mut run = |s: &mut sluice_sched::Scheduler, steps: u64| {
            for token in 0..steps {
                let class = (rng.next_u64() % 3) as u32;
                let mut p = Packet {
                    token,
                    len: 64 + (rng.next_u64() % 3000) as u32,
                    flow: rng.next_u64() % 100,
                    class: Some(class),
                    ..Packet::default()
                };
                // Some flows paced by their packets, from 100 kbit/s (120 ms per 1500 B).
                if p.flow % 3 == 0 {
                    p.fields.pacing_bps = 100_000 + rng.next_u64() % 20_000_000;
                }
                let _ = s.enqueue(now, &p);
                let _ = s.dequeue(now);
                let leaf = leaves[class as usize];
                let rate = Rate::new(100_000 + rng.next_u64() % 100_000_000);
                match token % 500 {
                    0 => s.set_rate(now, leaf, rate, rng.next_u64() % 20_000),
                    100 => {
                        s.set_weight(leaf, 1 + (rng.next_u64() % 8) as u32);
                    }
                    200 => {
                        s.set_reservation(now, leaf, rate);
                    }
                    300 => {
                        s.set_flow_rate(now, leaf, p.flow, rate);
                    }
                    400 => s.set_rate(now, root, Rate::new(rng.next_u64() % 2_000_000_000), 30_000),
                    _ => {}
                }
                now += rng.next_u64() % 200_000;
            }
        };
        run(&mut s, 20_000);
        let made = allocations_in(|| run(&mut s, 100_000));
        assert_eq!(
            made, 0,
            "{beyond_horizon:?}: allocations during 100k packets"
        );
        let stats = s.stats();
        assert!(stats.clamped > 1000, "{beyond_horizon:?}: {stats:?}");
        let refused = stats.rejected[RejectReason::BeyondHorizon as usize];
        assert_eq!(refused > 0, beyond_horizon == Overflow::Reject, "{stats:?}");
        assert!(stats.dequeued > 50_000, "{beyond_horizon:?}: {stats:?}");
    }
}
