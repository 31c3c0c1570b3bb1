//! What a node's fan-out costs: a WFQ root over `K` FIFO children (weights 1 to 4), each sent
//! to by one `class = i` rule, every child kept backlogged with four packets, one enqueue per
//! dequeue. Its instructions per packet are what `auto`'s choice of a heap for a node of a few
//! children and the classifier's rule index were measured by (docs/benchmarks.md):
//!
//! ```sh
//! cargo build --release -p sluice-sched --example fanout_probe
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     ./target/release/examples/fanout_probe 8 binary_heap 100000
//! # again with 200000 packets: the difference over 100000 is the cost per packet
//! ```
//!
//! Arguments: children K (1 to 4096), the root's queue (`auto` or a kind name such as `cffs`
//! or `binary_heap`), packets. Prints a checksum of the departures, so that two builds can be
//! checked to serve the same packets.

use sluice_queue::QueueKind;
use sluice_sched::classify::Match;
use sluice_sched::{NodeSpec, Packet, PolicyKind, QueueChoice, SchedConfig, TreeBuilder};
use std::process::exit;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: fanout_probe CHILDREN auto|QUEUE_KIND PACKETS";
    let (Some(k), Some(queue), Some(packets)) = (
        args.get(1)
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|k| (1..=4096).contains(k)),
        args.get(2).and_then(|s| match s.as_str() {
            "auto" => Some(QueueChoice::Auto),
            name => QueueKind::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .map(|kind| QueueChoice::Kind {
                    kind,
                    buckets: None,
                    granularity: None,
                }),
        }),
        args.get(3).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        exit(2);
    };
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 4 * 4096,
        flows: 4096,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).queue(queue));
    for i in 0..k {
        let mut child = NodeSpec::new(&format!("c{i}"), PolicyKind::Fifo);
        child.member.weight = 1 + i % 4;
        let leaf = b.child(root, child);
        b.rule(vec![Match::Class(i)], leaf);
    }
    let mut s = match b.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fanout_probe: {e}");
            exit(1);
        }
    };
    let packet = |token: u64, class: u32| Packet {
        token,
        len: 1500,
        flow: u64::from(class),
        class: Some(class),
        ..Packet::default()
    };
    let (mut now, mut token, mut sum) = (0u64, 0u64, 0u64);
    for class in 0..k {
        for _ in 0..4 {
            if s.enqueue(now, &packet(token, class)).is_err() {
                eprintln!("fanout_probe: a packet was refused while filling");
                exit(1);
            }
            token += 1;
        }
    }
    for _ in 0..packets {
        let Some(d) = s.dequeue(now) else {
            eprintln!("fanout_probe: nothing to send with every child backlogged");
            exit(1);
        };
        sum = sum.wrapping_mul(31).wrapping_add(d.flow);
        now += 120; // 1500 B at 100 Gbit/s
        if s.enqueue(now, &packet(token, d.flow as u32)).is_err() {
            eprintln!("fanout_probe: a packet was refused");
            exit(1);
        }
        token += 1;
    }
    println!("{k} children, {packets} packets: checksum {sum:x}");
}
