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
