//! A delay line per port, for RTT emulation (this kernel has no netem): every frame leaving the
//! port waits `delay` plus a jitter drawn uniformly from `[0, jitter]` before it is written.
//!
//! Frames never overtake each other: a frame's release is at least the release of the frame
//! before it (netem reorders under jitter; TCP then sees spurious retransmissions that the
//! path does not cause). Each engine has its own line per port: a flow stays on one engine, so
//! its frames keep their order; frames of flows on different engines keep none between them.
//! Time is passed in.

use std::collections::VecDeque;

/// A FIFO of frames (buffer indices) with release times.
#[derive(Debug)]
pub struct DelayLine {
    delay_ns: u64,
    jitter_ns: u64,
    queue: VecDeque<(u64, u32)>,
    last_release: u64,
    rng: u64,
}

impl DelayLine {
    /// A delay line adding `delay_ns` plus up to `jitter_ns`.
    pub fn new(delay_ns: u64, jitter_ns: u64, seed: u64) -> Self {
        DelayLine {
            delay_ns,
            jitter_ns,
            queue: VecDeque::new(),
            last_release: 0,
            rng: seed | 1,
        }
    }

    /// Whether it delays at all.
    pub fn is_active(&self) -> bool {
        self.delay_ns > 0 || self.jitter_ns > 0
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn jitter(&mut self) -> u64 {
        if self.jitter_ns == 0 {
            return 0;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % (self.jitter_ns + 1)
    }

    /// Frame `buf` is ready to leave at `now`: hold it.
    pub fn push(&mut self, now: u64, buf: u32) {
        let release = (now + self.delay_ns + self.jitter()).max(self.last_release);
        self.last_release = release;
        self.queue.push_back((release, buf));
    }

    /// The next frame due at `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<u32> {
        match self.queue.front() {
            Some(&(t, buf)) if t <= now => {
                self.queue.pop_front();
                Some(buf)
            }
            _ => None,
        }
    }

    /// When the next frame is due.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.front().map(|&(t, _)| t)
    }

    /// Drain everything (at shutdown).
    pub fn drain(&mut self) -> impl Iterator<Item = u32> + '_ {
        self.queue.drain(..).map(|(_, b)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeping the order never holds a frame past its own `delay + jitter` (a frame waits for
    /// the one before it only when that one was due later, and it was pushed no later), and
    /// the jitter is drawn over its range: spaced-out frames spread over `[delay, delay +
    /// jitter]`, and each release is a time at which it was due.
    #[test]
    fn jitter_spreads_within_its_bound_and_ordering_never_adds_to_it() {
        let (delay, jitter) = (5_000_000u64, 2_000_000u64);
        for gap in [1_000u64, 10_000_000] {
            let mut d = DelayLine::new(delay, jitter, 42);
            for i in 0..1000u32 {
                d.push(u64::from(i) * gap, i);
            }
            let mut waits = Vec::new();
            let mut expected = 0u32;
            while let Some(t) = d.next_due() {
                assert_eq!(d.pop_due(t - 1), None, "not before it is due");
                let b = d.pop_due(t).unwrap();
                assert_eq!(b, expected, "in order");
                expected += 1;
                waits.push(t - u64::from(b) * gap);
            }
            assert_eq!(expected, 1000);
            assert!(
                waits.iter().all(|&w| (delay..=delay + jitter).contains(&w)),
                "gap {gap}: {:?}",
                waits.iter().max()
            );
            if gap > jitter {
                // Frames further apart than the jitter never wait for each other.
                let low = waits.iter().filter(|&&w| w < delay + jitter / 4).count();
                let high = waits
                    .iter()
                    .filter(|&&w| w > delay + jitter * 3 / 4)
                    .count();
                assert!(low > 150 && high > 150, "low {low}, high {high}");
            }
        }
    }

    #[test]
    fn delays_and_never_reorders() {
        let mut d = DelayLine::new(5_000_000, 2_000_000, 7);
        for i in 0..100u32 {
            d.push(u64::from(i) * 10_000, i);
        }
        assert_eq!(d.pop_due(4_999_999), None);
        let mut now = 0;
        let mut out = Vec::new();
        while let Some(t) = d.next_due() {
            now = now.max(t);
            while let Some(b) = d.pop_due(now) {
                out.push((now, b));
            }
        }
        assert_eq!(
            out.iter().map(|x| x.1).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        for (t, b) in &out {
            let sent = u64::from(*b) * 10_000;
            assert!(*t >= sent + 5_000_000, "frame {b} early");
        }
    }
}
