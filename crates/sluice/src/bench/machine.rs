//! How fast this machine is right now, for the reports whose absolute figures move with it.
//!
//! On a shared machine the same code takes different times from one hour to the next: memory
//! slows down when neighbours load it, and the core itself when they share it. The reports print
//! ratios for that reason, but a ratio moves too, when one side is bound by memory and the other
//! by instructions (the heap baselines of `bench sched` at a million flows against Sluice). So a
//! report opens with numbers measured just before it, to compare runs by:
//! - **random loads**: one step of a pointer chase through a random cycle, over 1 MiB (within a
//!   core's own caches; a neighbour on its other hardware thread, which shares them, makes
//!   these miss) and over 64 MiB, twice the last level cache of these machines (a miss to
//!   memory and, on 4 KiB pages, a page walk: what a cold flow costs);
//! - **an integer step**: one round of xorshift (three shifts and three xors, each waiting for
//!   the one before), alone, which the clock decides, and as one of eight independent rounds at
//!   once, which the core's issue slots decide (shared with a neighbour on its other hardware
//!   thread).
//!
//! They tell a slow spell, not how slow a report gets in it: in three runs of `sluice bench
//! sched --quick --flows 1e2 --case eiffel_fig47 --repeats 3` minutes apart, Sluice took 237,
//! 260 and then 438 ns per packet, while the wide step went from 0.48 to 0.62 ns.

use sluice_queue::workload::Rng;
use std::hint::black_box;
use std::time::Instant;

/// Entries of the chases: 256 Ki and 16 Mi `u32`s, 1 MiB and 64 MiB.
const NEAR_ENTRIES: usize = 1 << 18;
const FAR_ENTRIES: usize = 1 << 24;
/// Steps timed for each number; the best of [`ROUNDS`] is kept (the least disturbed).
const STEPS: u64 = 1 << 21;
const ROUNDS: usize = 3;
/// Independent xorshift streams of the wide step.
const LANES: usize = 8;

/// The numbers, in ns per step.
#[derive(Clone, Copy, Debug)]
pub struct Speed {
    /// A random load over [`NEAR_ENTRIES`].
    pub near_load_ns: f64,
    /// A random load over [`FAR_ENTRIES`].
    pub far_load_ns: f64,
    /// A dependent xorshift step.
    pub step_ns: f64,
    /// An xorshift step of [`LANES`] independent ones at once.
    pub wide_step_ns: f64,
}

/// Measure now (about a second).
pub fn measure() -> Speed {
    let mut rng = Rng::new(0x5eed);
    let near = cycle(NEAR_ENTRIES, &mut rng);
    let far = cycle(FAR_ENTRIES, &mut rng);
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
        near_load_ns: best(&|| u64::from(chase(&near, STEPS))),
        far_load_ns: best(&|| u64::from(chase(&far, STEPS))),
        step_ns: best(&|| spin(STEPS)),
        // STEPS steps in all, LANES per round.
        wide_step_ns: best(&|| spin_wide(STEPS / LANES as u64)),
    }
}

/// The report's line.
pub fn line(s: Speed) -> String {
    format!(
        "machine now: a random load {:.1} ns over 1 MiB, {:.1} ns over 64 MiB; an integer step {:.2} ns alone, {:.2} ns each of {LANES} at once (compare runs by these)",
        s.near_load_ns, s.far_load_ns, s.step_ns, s.wide_step_ns
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

/// `steps` rounds of [`LANES`] independent xorshift streams.
fn spin_wide(steps: u64) -> u64 {
    let mut x: [u64; LANES] = black_box(std::array::from_fn(|i| 0x9e37_79b9_7f4a_7c15 + i as u64));
    for _ in 0..steps {
        for v in &mut x {
            *v ^= *v >> 12;
            *v ^= *v << 25;
            *v ^= *v >> 27;
        }
    }
    x.iter().fold(0, |a, v| a ^ v)
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
    fn the_line_names_every_number() {
        let l = line(Speed {
            near_load_ns: 4.56,
            far_load_ns: 95.04,
            step_ns: 2.0,
            wide_step_ns: 0.5,
        });
        assert!(
            l.contains("load 4.6 ns over 1 MiB, 95.0 ns over 64 MiB"),
            "{l}"
        );
        assert!(
            l.contains("step 2.00 ns alone, 0.50 ns each of 8 at once"),
            "{l}"
        );
    }
}
