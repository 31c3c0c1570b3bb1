//! How fast this machine is right now, for the reports whose absolute figures move with it.
//!
//! On a shared machine the same code takes different times from one hour to the next: memory
//! slows down when neighbours load it, and the core itself when they share it. The reports print
//! ratios for that reason, but a ratio moves too, when one side is bound by memory and the other
//! by instructions (the heap baselines of `bench sched` at a million flows against Sluice). So a
//! report opens with numbers measured just before it, to compare runs by:
//! - **random loads**: one step of a pointer chase through a random cycle, over 1 MiB (within a
//!   core's own caches, which a neighbour on its other hardware thread shares) and over 64 MiB,
//!   twice the last level cache of these machines (a miss to memory and, on 4 KiB pages, a
//!   page walk: what a cold flow costs);
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

/// Whether memory from the allocator comes on huge pages in this process: an 8 MiB block,
/// touched, and the `AnonHugePages` of its mapping in `/proc/self/smaps`; `None` if that
/// cannot be read. (Asked with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` on Debian 12's glibc
/// 2.36, the allocator passed the request on to the kernel in some runs and not in others,
/// having read the same THP mode each time: 4 runs of 6 under strace.)
pub fn huge_pages_granted() -> Option<bool> {
    let block = black_box(vec![1u8; 8 << 20]);
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let kib = huge_kib_at(&smaps, block.as_ptr() as usize)?;
    Some(kib > 0)
}

/// The `AnonHugePages` (KiB) of the mapping that holds `addr`, from the text of a smaps file.
fn huge_kib_at(smaps: &str, addr: usize) -> Option<u64> {
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
        if let Some((start, end)) = range {
            if let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                inside = (start..end).contains(&addr);
                continue;
            }
        }
        if let Some(v) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            return v.trim().trim_end_matches("kB").trim().parse().ok();
        }
    }
    None
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
    fn huge_pages_are_read_from_the_mapping_that_holds_the_block() {
        let smaps = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
AnonHugePages:         0 kB
7fb6b0e00000-7fb6e8400000 rw-p 00000000 00:00 0 
Size:             907264 kB
AnonHugePages:    307200 kB
THPeligible:    1
7ffd1000000-7ffd1021000 rw-p 00000000 00:00 0                          [stack]
AnonHugePages:         0 kB
";
        assert_eq!(huge_kib_at(smaps, 0x7fb6_c000_0000), Some(307_200));
        assert_eq!(huge_kib_at(smaps, 0x55d0_c000_0010), Some(0));
        assert_eq!(huge_kib_at(smaps, 0x1000), None, "in no mapping");
        // This process's own smaps has the block's mapping.
        if std::path::Path::new("/proc/self/smaps").exists() {
            assert!(huge_pages_granted().is_some());
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
