//! Edges the differential tests do not reach: handles of items that left by a pop or were
//! replaced by a requeue, ranks at the top of the u64 range, a wheel advanced by many
//! horizons, large gradient indexes, and the approximate queue's bound for every alpha.

use proptest::prelude::*;
use sluice_queue::{AnyQueue, Handle, Overflow, QueueKind, QueueSpec, RankQueue};

#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    Pop,
    Remove(usize),
    Requeue(usize, u64),
    StaleRemove(usize),
    Due(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => any::<u64>().prop_map(Op::Push),
        3 => Just(Op::Pop),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(a, b)| Op::Requeue(a, b)),
        3 => any::<usize>().prop_map(Op::StaleRemove),
        1 => any::<u64>().prop_map(Op::Due),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Every kind: the handle of an item that was popped (`pop_min`, `pop_due`), removed, or
    /// moved by a `requeue` that handed back a new handle, is stale from then on, also after
    /// its slot or chunk has been reused: `rank_of` is `None` and `remove` takes nothing.
    /// (The differential tests try again only the handle of a removed item.)
    #[test]
    fn dead_handles_stay_dead(kind_i in 0usize..11, buckets in 1usize..40, cap in 1usize..30, reject: bool, ops in prop::collection::vec(op(), 1..300)) {
        let kind = QueueKind::ALL[kind_i];
        let mut spec = QueueSpec::new(kind, buckets, 3, cap);
        spec.overflow = if reject { Overflow::Reject } else { Overflow::Clamp };
        let mut q: AnyQueue<u32> = spec.build().unwrap();
        let span = 3 * buckets as u64;
        let mut live: Vec<(u32, Handle)> = Vec::new();
        let mut dead: Vec<(u32, Handle)> = Vec::new();
        let mut next = 0u32;
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Push(r) => {
                    if let Ok(h) = q.push(now + r % (3 * span), next) { live.push((next, h)); }
                    next += 1;
                }
                Op::Pop => if let Some(e) = q.pop_min() {
                    let i = live.iter().position(|l| l.0 == e.item).unwrap();
                    dead.push(live.swap_remove(i));
                }
                Op::Due(t) => { now += t % span; if let Some(e) = q.pop_due(now) {
                    let i = live.iter().position(|l| l.0 == e.item).unwrap();
                    dead.push(live.swap_remove(i));
                }}
                Op::Remove(n) => if !live.is_empty() {
                    let i = n % live.len();
                    let (item, h) = live.swap_remove(i);
                    prop_assert_eq!(q.remove(h).map(|e| e.item), Ok(item));
                    dead.push((item, h));
                }
                Op::Requeue(n, r) => if !live.is_empty() {
                    let i = n % live.len();
                    let (item, h) = live[i];
                    match q.requeue(h, now + r % (3 * span), item) {
                        Ok(h2) => { live[i] = (item, h2); if h2 != h { dead.push((item, h)); } }
                        Err(_) => { live.swap_remove(i); dead.push((item, h)); }
                    }
                }
                Op::StaleRemove(n) => if !dead.is_empty() {
                    let (item, h) = dead[n % dead.len()];
                    if live.iter().any(|l| l.1 == h) { continue; }
                    let len = q.len();
                    prop_assert_eq!(q.rank_of(h), None, "{:?}: rank_of of dead handle of item {}", kind, item);
                    let r = q.remove(h);
                    prop_assert!(r.is_err(), "{:?}: stale handle of item {} removed {:?}", kind, item, r);
                    prop_assert_eq!(q.len(), len);
                }
            }
            prop_assert_eq!(q.len(), live.len());
        }
        let mut n = 0;
        while let Some(e) = q.pop_min() { prop_assert!(live.iter().any(|l| l.0 == e.item)); n += 1; }
        prop_assert_eq!(n, live.len());
    }
}

fn drain(q: &mut AnyQueue<u32>) -> Vec<(u64, u32)> {
    std::iter::from_fn(|| q.pop_min().map(|e| (e.rank, e.item))).collect()
}

/// Ranks at and next to u64::MAX, a fixed range ending one below it, a wheel starting there,
/// granularities up to 2^63: no overflow, every item once, in bucket order.
#[test]
fn top_of_rank_space_every_kind() {
    for kind in QueueKind::ALL {
        for g in [1u64, 3, 1 << 20, u64::MAX / 2] {
            for reject in [false, true] {
                let mut spec = QueueSpec::new(kind, 8, g, 16);
                if kind == QueueKind::ApproxGradient || kind == QueueKind::CircularApprox {
                    spec.buckets = 8;
                }
                spec.overflow = if reject {
                    Overflow::Reject
                } else {
                    Overflow::Clamp
                };
                // Fixed ranges: put the range at the top.
                if !kind.moving_range() && !kind.exact() {
                    let Some(span) = 8u64.checked_mul(g) else {
                        continue;
                    };
                    spec.base = u64::MAX - span;
                }
                if kind == QueueKind::TimingWheel {
                    spec.base = u64::MAX - 5u64.saturating_mul(g);
                }
                let mut q = spec.build::<u32>().expect("valid spec");
                let ranks = [
                    u64::MAX - 1,
                    u64::MAX,
                    u64::MAX - 2 * g.min(1 << 40),
                    u64::MAX,
                ];
                let mut pushed = vec![];
                for (i, &r) in ranks.iter().enumerate() {
                    if q.push(r, i as u32).is_ok() {
                        pushed.push((r, i as u32));
                    }
                }
                let _ = q.next_deadline();
                let _ = q.peek_min();
                let due = q.pop_due(u64::MAX).map(|e| (e.rank, e.item));
                q.advance(u64::MAX);
                let _ = q.next_deadline();
                let got: Vec<_> = due.into_iter().chain(drain(&mut q)).collect();
                let mut sorted = got.clone();
                sorted.sort_unstable_by_key(|e| e.1);
                assert_eq!(sorted, pushed, "{kind:?} g={g}: each pushed item once");
                for w in got.windows(2) {
                    if kind.exact() {
                        assert!(w[0].0 <= w[1].0, "{kind:?} g={g}: {got:?}");
                    } else {
                        assert!(
                            w[0].0 / g <= w[1].0 / g || kind.approximate(),
                            "{kind:?} g={g}: {got:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A wheel advanced while empty by up to 400 000 horizons: later pushes are placed from the
/// new front (within the horizon accepted, past it rejected) and leave when due.
#[test]
fn wheel_advanced_by_many_horizons() {
    for g in [1u64, 7] {
        let mut spec = QueueSpec::new(QueueKind::TimingWheel, 8, g, 16);
        spec.overflow = Overflow::Reject;
        let mut q: AnyQueue<u32> = spec.build().unwrap();
        let mut t = 0u64;
        for round in 0..50u64 {
            t += g * (8 * round * 1000 + 3);
            q.advance(t);
            q.push(t + 7 * g, 1).unwrap();
            q.push(t + 2 * g, 2).unwrap();
            assert!(q.push(t + 8 * g, 3).is_err());
            assert_eq!(q.next_deadline(), Some((t / g + 2) * g));
            assert_eq!(q.pop_due(t + 2 * g).map(|e| e.item), Some(2));
            assert_eq!(q.pop_due(t + 6 * g), None);
            assert_eq!(q.pop_due(t + 7 * g).map(|e| e.item), Some(1));
        }
    }
}

/// The approximate index's order error stays within `error_bound` for every alpha (1 to 64),
/// over random occupancies behind a first bucket: even, sparse with a dense tail, thickening
/// towards the end (the pull of Appendix B's case 2), and random density.
#[test]
fn approx_bound_random_adversarial() {
    use sluice_queue::approx_gradient::{ApproxGradient, Window};
    use sluice_queue::fixed::BucketIndex;
    let mut rng = sluice_queue::workload::Rng::new(7);
    for alpha in 1..=64u32 {
        let w = Window::for_alpha(alpha).unwrap();
        let n = w.buckets();
        let e = w.error_bound;
        for trial in 0..60 {
            let mut idx = ApproxGradient::new(alpha, n).unwrap();
            let mut occ = vec![false; n];
            let first = (rng.next_u64() as usize) % n;
            occ[first] = true;
            let mode = trial % 4;
            // Mode 1: sparse, then dense from `tail` on.
            let tail = first + 1 + (rng.next_u64() as usize) % (n - first);
            for (j, o) in occ.iter_mut().enumerate().skip(first + 1) {
                let p = match mode {
                    0 => 50,
                    1 if j >= tail => 100,
                    1 => 3,
                    2 => ((j - first) * 100 / (n - first)) as u64,
                    _ => rng.next_u64() % 100,
                };
                *o = rng.next_u64() % 100 < p;
            }
            for (j, &o) in occ.iter().enumerate() {
                if o {
                    idx.insert(j);
                }
            }
            let got = idx.first(|j| occ[j]).unwrap();
            assert!(
                got >= first && occ[got],
                "alpha {alpha}: got {got} first {first}"
            );
            assert!(
                got - first <= e,
                "alpha {alpha}: error {} > bound {e}",
                got - first
            );
        }
    }
}

/// The exact gradient index at three and four levels (past the differential tests' 300
/// buckets), against a set, and with every bucket set (the largest curvatures).
#[test]
fn gradient_index_large_random() {
    use sluice_queue::fixed::BucketIndex;
    use sluice_queue::gradient::GradientIndex;
    use std::collections::BTreeSet;
    let mut rng = sluice_queue::workload::Rng::new(3);
    for &n in &[33usize, 1024, 1025, 32768, 32769, 100_000] {
        let mut g = GradientIndex::new(n).unwrap();
        let mut s = BTreeSet::new();
        for _ in 0..20_000 {
            let b = (rng.next_u64() % n as u64) as usize;
            if s.contains(&b) {
                g.remove(b);
                s.remove(&b);
            } else {
                g.insert(b);
                s.insert(b);
            }
            assert_eq!(g.first(|_| true), s.iter().next().copied());
        }
        for b in 0..n {
            if !s.contains(&b) {
                g.insert(b);
                s.insert(b);
            }
        }
        assert_eq!(g.first(|_| true), Some(0));
    }
}
