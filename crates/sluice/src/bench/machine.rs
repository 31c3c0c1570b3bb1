//! How fast this machine is right now, for the reports whose absolute figures move with it.
//!
//! On a shared machine the same code takes different times from one hour to the next: memory
//! slows down when neighbours load it, and the core itself when they share it. The reports print
//! ratios for that reason, but a ratio moves too, when one side is bound by memory and the other
//! by instructions (the heap baselines of `bench sched` at a million flows against Sluice). So a
//! report opens with two numbers measured just before it, to compare runs by:
//! - **a random load**: one step of a pointer chase through a random cycle over 64 MiB, twice
//!   the last level cache of these machines, on the report's own pages: a cache miss and, on
//!   4 KiB pages, a page walk, which is what a cold flow costs;
//! - **a dependent step**: one round of xorshift, three shifts and three xors that each wait
//!   for the one before, which the core alone decides.

use sluice_queue::workload::Rng;
use std::hint::black_box;
use std::time::Instant;

/// Entries of the chase: 16 Mi `u32`s, 64 MiB.
const CHASE_ENTRIES: usize = 1 << 24;
/// Steps timed for each number; the best of [`ROUNDS`] is kept (the least disturbed).
const STEPS: u64 = 1 << 21;
const ROUNDS: usize = 3;

/// The two numbers, in ns.
#[derive(Clone, Copy, Debug)]
pub struct Speed {
    /// One random load over [`CHASE_ENTRIES`].
    pub load_ns: f64,
    /// One dependent xorshift step.
    pub step_ns: f64,
}

/// Measure now (about half a second).
pub fn measure() -> Speed {
    let next = cycle(CHASE_ENTRIES, &mut Rng::new(0x5eed));
    let best = |f: &dyn Fn() -> u64| {
        (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                black_box(f());
                t.elapsed().as_nanos() as f64 / STEPS as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    Speed {
        load_ns: best(&|| u64::from(chase(&next, STEPS))),
        step_ns: best(&|| spin(STEPS)),
    }
}

/// The report's line.
pub fn line(s: Speed) -> String {
    format!(
        "machine now: a random load over 64 MiB {:.1} ns, a dependent integer step {:.2} ns (compare runs by these)",
        s.load_ns, s.step_ns
    )
}

/// A random permutation of `0..n` that is one cycle through every index (Sattolo's
/// algorithm), so that a chase from anywhere visits all `n` before it repeats.
fn cycle(n: usize, rng: &mut Rng) -> Vec<u32> {
    assert!(n <= u32::MAX as usize, "a u32 index per entry");
    let mut next: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = (rng.next_u64() % i as u64) as usize;
        next.swap(i, j);
    }
    next
}

/// Follow `next` for `steps` steps from 0; where it ends. Each load waits for the last.
fn chase(next: &[u32], steps: u64) -> u32 {
    let mut at = 0u32;
    for _ in 0..steps {
        at = next[at as usize];
    }
    at
}

/// `steps` dependent xorshift rounds.
fn spin(steps: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..steps {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_is_one_cycle_through_every_entry() {
        for n in [2, 3, 10, 1000] {
            let next = cycle(n, &mut Rng::new(n as u64));
            let mut seen = vec![false; n];
            let mut at = 0;
            for _ in 0..n {
                assert!(
                    !seen[at as usize],
                    "n {n}: {at} twice before the cycle closed"
                );
                seen[at as usize] = true;
                at = next[at as usize];
            }
            assert_eq!(at, 0, "n {n}: back at the start after n steps");
            assert_eq!(chase(&next, n as u64), 0);
        }
    }

    #[test]
    fn the_line_names_both_numbers() {
        let l = line(Speed {
            load_ns: 95.04,
            step_ns: 0.3,
        });
        assert!(l.contains("64 MiB 95.0 ns"), "{l}");
        assert!(l.contains("step 0.30 ns"), "{l}");
    }
}
