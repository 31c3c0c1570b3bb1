//! How lean is the BinaryHeap baseline? Times, in one run, the hold workload on a bare
//! `BinaryHeap<Reverse<u64>>` of ranks alone (no FIFO tie-break, no items, no handles) and on
//! `BinaryHeapQueue` (the contract: ranks, FIFO ties, items, removable handles).
//! Usage: bare_heap [N ...]
use sluice_queue::BinaryHeapQueue;
use sluice_queue::workload::{self, Rng, Workload};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let ns: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ns = if ns.is_empty() {
        vec![1_000, 1_000_000]
    } else {
        ns
    };
    let range = Workload::Hold.range();
    let ops = 1_000_000;
    for n in ns {
        let mut rng = Rng::new(3);
        let mut bare: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(n);
        for _ in 0..n {
            bare.push(Reverse(rng.next_u64() & (range - 1)));
        }
        let mut q = BinaryHeapQueue::<u32>::new(n).expect("capacity");
        workload::fill(&mut q, n, range, &mut rng);
        let (mut t_bare, mut t_q) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..ops {
                let Reverse(r) = bare.pop().unwrap_or(Reverse(0));
                bare.push(Reverse(r + (rng.next_u64() & (range - 1))));
            }
            t_bare.push(t.elapsed().as_nanos() as f64 / ops as f64);
            let t = Instant::now();
            black_box(workload::hold(&mut q, ops, range, &mut rng));
            t_q.push(t.elapsed().as_nanos() as f64 / ops as f64);
        }
        t_bare.sort_by(f64::total_cmp);
        t_q.sort_by(f64::total_cmp);
        let (b, c) = (t_bare[2], t_q[2]);
        println!(
            "n={n}: bare BinaryHeap<u64> {b:.1} ns/op, BinaryHeapQueue {c:.1} ns/op, ratio {:.2}",
            c / b
        );
    }
}
