//! The shared ring pool under concurrency: engines on several threads take and give rings as
//! fast as they can; no ring is ever held by two of them, none is lost, and per-flow queues on
//! a shared pool keep their order.

use sluice_flow::dpfq::{Dpfq, RingPool};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn no_ring_is_ever_taken_twice() {
    let pool = RingPool::new(64, 4, 1 << 20).unwrap();
    let owned: Arc<Vec<AtomicBool>> = Arc::new((0..64).map(|_| AtomicBool::new(false)).collect());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let pool = pool.clone();
            let owned = owned.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut x = 0x9E37_79B9u64 ^ t;
                for _ in 0..1_000_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if x % 2 == 0 || mine.is_empty() {
                        if let Some(r) = pool.take() {
                            assert!(
                                !owned[r as usize].swap(true, Ordering::AcqRel),
                                "ring {r} taken twice"
                            );
                            mine.push(r);
                        }
                    } else {
                        let r = mine.swap_remove(x as usize % mine.len());
                        owned[r as usize].store(false, Ordering::Release);
                        pool.give(r);
                    }
                }
                for r in mine {
                    owned[r as usize].store(false, Ordering::Release);
                    pool.give(r);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(pool.free_rings(), 64, "every ring came back");
    let mut all: Vec<u32> = std::iter::from_fn(|| pool.take()).collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..64).collect::<Vec<_>>(),
        "each ring exactly once on the stack"
    );
}

#[test]
fn engines_share_memory_and_keep_order() {
    let pool = RingPool::new(256, 8, 1000).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut q = Dpfq::new(pool, 16);
                let mut next_in = [0u32; 16];
                let mut next_out = [0u32; 16];
                let mut x = 12345u64 + t;
                let mut refused = 0;
                for _ in 0..300_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let f = (x % 16) as u32;
                    if x % 3 != 0 {
                        if q.push(f, next_in[f as usize]).is_ok() {
                            next_in[f as usize] += 1;
                        } else {
                            refused += 1;
                        }
                    } else if let Some(v) = q.pop(f) {
                        assert_eq!(v, next_out[f as usize], "flow {f} out of order");
                        next_out[f as usize] += 1;
                    }
                    assert!(q.pool().packets() <= 1000, "bound exceeded");
                }
                drop(q);
                refused
            })
        })
        .collect();
    let refused: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(refused > 0, "the run reached the shared bound");
    assert_eq!(pool.packets(), 0);
    assert_eq!(pool.free_rings(), 256);
}

#[test]
fn engines_that_went_idle_keep_no_budget_from_the_others() {
    // A bound of 2048 packets shared by 64 engines (a datapath's links share one pool): batches
    // of 32. Each engine queues one packet and passes it on. An idle engine used to keep the
    // batch it had reserved for its next packets, so 64 idle engines held the whole bound with
    // not one packet queued anywhere: a burst on one engine was refused after its own 32, and
    // an engine with no reserve of its own could not queue a single packet, for good (lossless
    // mode refuses with backpressure until packets leave, and none would).
    let pool = RingPool::new(512, 8, 2048).unwrap();
    let mut engines: Vec<Dpfq> = (0..64).map(|_| Dpfq::new(pool.clone(), 4)).collect();
    for e in &mut engines {
        e.push(0, 1).unwrap();
        assert_eq!(e.pop(0), Some(1));
    }
    assert!(engines.iter().all(|e| e.packets() == 0));
    assert_eq!(pool.packets(), 0, "idle engines hold no budget");
    let mut late = Dpfq::new(pool.clone(), 4);
    assert!(
        late.push(0, 7).is_ok(),
        "nothing is held, yet the bound is reached"
    );
    assert_eq!(late.pop(0), Some(7));
    // A burst on one engine gets the bound, less what the others may hold in reserve.
    let mut n = 0;
    while engines[0].push(n % 4, n).is_ok() {
        n += 1;
    }
    assert!(n >= 2048 - 64, "a burst got {n} of 2048");
}

#[test]
fn engines_that_went_idle_keep_no_rings_from_the_others() {
    // 64 rings of two packets shared by eight engines: each keeps up to 8 free rings in its
    // own cache. Each engine queues a burst of 18 packets of one flow (two inline, sixteen in
    // eight rings) and passes them on. Idle engines used to keep those rings cached, so the
    // eight held all 64 and a ninth engine could not queue a third packet of any flow, with
    // not one packet held anywhere.
    let pool = RingPool::new(64, 2, 64).unwrap();
    let mut engines: Vec<Dpfq> = (0..8).map(|_| Dpfq::new(pool.clone(), 2)).collect();
    for e in &mut engines {
        for i in 0..18 {
            e.push(0, i).unwrap();
        }
        for i in 0..18 {
            assert_eq!(e.pop(0), Some(i));
        }
    }
    assert_eq!(pool.free_rings(), 64, "idle engines keep no ring");
    let mut late = Dpfq::new(pool.clone(), 2);
    for i in 0..3 {
        assert!(
            late.push(1, i).is_ok(),
            "nothing is held, yet no ring is free"
        );
    }
}
