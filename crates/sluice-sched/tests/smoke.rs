use sluice_sched::classify::Match;
use sluice_sched::*;

fn pkt(token: u64, class: u32, flow: u64, len: u32) -> Packet {
    Packet {
        token,
        len,
        flow,
        class: Some(class),
        ..Packet::default()
    }
}

#[test]
fn fifo_and_prio_and_rate() {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 1000,
        flows: 100,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Prio));
    let hi = b.child(root, NodeSpec::new("hi", PolicyKind::Fifo).priority(0));
    let lo = b.child(root, NodeSpec::new("lo", PolicyKind::Fifo).priority(1));
    b.rule(vec![Match::Class(1)], hi);
    b.default_leaf(lo);
    let mut s = b.build().unwrap();
    for i in 0..5 {
        s.enqueue(0, &pkt(i, 2, i, 100)).unwrap();
    }
    for i in 5..10 {
        s.enqueue(0, &pkt(i, 1, i, 100)).unwrap();
    }
    let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(0).map(|d| d.token)).collect();
    assert_eq!(order, vec![5, 6, 7, 8, 9, 0, 1, 2, 3, 4]);
}

#[test]
fn rate_limit_spaces_packets() {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 1000,
        flows: 100,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo).rate(Rate::gbit(1), 0));
    b.default_leaf(root);
    let mut s = b.build().unwrap();
    let t0 = 1_000_000_000u64;
    for i in 0..10 {
        s.enqueue(t0, &pkt(i, 0, 1, 1500)).unwrap();
    }
    let mut times = vec![];
    let mut now = t0;
    while !s.is_empty() {
        if let Some(d) = s.dequeue(now) {
            times.push((now, d.token));
        } else {
            now = s.next_event(now).unwrap();
        }
    }
    println!("{times:?}");
    assert_eq!(times.len(), 10);
    assert!(times[9].0 - times[0].0 >= 9 * 12_000 - 2048);
}

#[test]
fn describe_prints_the_tree() {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 100,
        flows: 10,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::gbit(1), 15000));
    let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo).weight(3));
    let c = b.child(root, NodeSpec::new("c", PolicyKind::Fq));
    b.rule(vec![Match::Dscp(46)], a);
    b.default_leaf(c);
    let s = b.build().unwrap();
    println!("{}", s.describe());
}

/// A flow keeps the records of two queued packets in its own lines and the rest in the
/// scheduler's slab: its packets stay in order across both, pFabric's walk over a flow's
/// backlog sees all of them, the capacity counts both, and every record is freed.
#[test]
fn packets_of_a_flow_keep_their_order_across_its_slots_and_the_slab() {
    for policy in [PolicyKind::Fq, PolicyKind::Pfabric, PolicyKind::Fifo] {
        let mut b = TreeBuilder::new(SchedConfig {
            capacity: 6,
            flows: 4,
            ..SchedConfig::default()
        });
        let root = b.root(NodeSpec::new("root", policy));
        b.default_leaf(root);
        let mut s = b.build().unwrap();
        for round in 0..3u64 {
            // Flow 1 gets five packets (two in its slots, three in the slab), flow 2 one;
            // remaining sizes count down, as a transfer's do.
            let mut token = 100 * round;
            let mut send = |s: &mut Scheduler, flow: u64, remaining: u64| {
                token += 1;
                let p = Packet {
                    fields: Fields {
                        remaining,
                        ..Fields::default()
                    },
                    ..pkt(token, 0, flow, 100)
                };
                s.enqueue(0, &p).map(|_| token)
            };
            let mut sent: Vec<(u64, u64)> = Vec::new();
            for k in 0..5 {
                sent.push((1, send(&mut s, 1, 10_000 - 100 * k).unwrap()));
            }
            sent.push((2, send(&mut s, 2, 50_000).unwrap()));
            assert_eq!(s.len(), 6);
            let full = send(&mut s, 3, 1);
            assert_eq!(full.map_err(|r| r.reason), Err(RejectReason::BufferFull));
            let mut out: Vec<(u64, u64)> = Vec::new();
            while let Some(d) = s.dequeue(0) {
                out.push((d.flow, d.token));
            }
            assert!(s.is_empty(), "{policy}: every record freed");
            for flow in [1, 2] {
                let want: Vec<u64> = sent.iter().filter(|p| p.0 == flow).map(|p| p.1).collect();
                let got: Vec<u64> = out.iter().filter(|p| p.0 == flow).map(|p| p.1).collect();
                assert_eq!(got, want, "{policy}: flow {flow} in order, nothing lost");
            }
            if policy == PolicyKind::Pfabric {
                // Flow 1's least remaining size (9 600) is below flow 2's: all of it first.
                assert!(out[..5].iter().all(|p| p.0 == 1), "{out:?}");
            }
        }
    }
}
