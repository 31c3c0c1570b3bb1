//! The figures of one `sluice bench dp` run, computed from raw samples (pure functions).
//!
//! **Bytes on the wire.** A shaper charges every segment its Ethernet frame length (14 + 20 +
//! 20 + 12 header bytes, TCP with timestamps, plus the payload; Linux's `qdisc_pkt_len`, and
//! Sluice's `wire_bytes`), however many segments a GSO super-frame carries. Interface counters
//! count a super-frame as one packet of its length, i.e. with one set of headers; so from the
//! receiving interface's `rx_bytes` and `rx_packets`:
//!
//! ```text
//! payload = rx_bytes - rx_packets * HEADER_BYTES          (each skb has one header set)
//! wire    = payload * (mss + HEADER_BYTES) / mss          (every full segment adds one)
//! ```
//!
//! exact for full-sized segments; a short segment is charged a fraction of its headers (bulk
//! TCP sends almost only full segments: HTB's own count differs by about 0.02%). Frames that
//! are not TCP segments (ARP, the ping probes) are counted as if they were; the probes carry
//! about 10 kB/s.
//!
//! | figure | definition |
//! |---|---|
//! | achieved rate | wire bytes over the window / its length, bit/s |
//! | conformance error | mean over the 100 ms samples of \|rate - target\| / target, each weighted by its length, percent |
//! | Jain's index | (sum x)^2 / (n sum x^2) over the flows' received bytes |
//! | RTT p50, p99 | nearest-rank percentiles of the ping round trips |
//! | CPU per Gbit | CPU seconds over the window / wire gigabits over the window |

/// Header bytes of a TCP/IPv4 segment with the timestamp option, on Ethernet: 14 + 20 + 32.
pub const HEADER_BYTES: u64 = 14 + 20 + 20 + 12;

/// Counters of the receiving interface at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When, ns since the start of the window.
    pub t_ns: u64,
    /// Bytes received, as the interface counts them.
    pub rx_bytes: u64,
    /// Packets (skbs) received.
    pub rx_packets: u64,
}

/// Wire bytes of what arrived between samples `a` and `b`, for segments of `mss` payload
/// bytes (see the module notes).
pub fn wire_bytes_between(a: &Sample, b: &Sample, mss: u64) -> f64 {
    let bytes = b.rx_bytes.saturating_sub(a.rx_bytes);
    let packets = b.rx_packets.saturating_sub(a.rx_packets);
    let payload = bytes.saturating_sub(packets.saturating_mul(HEADER_BYTES)) as f64;
    payload * (mss + HEADER_BYTES) as f64 / mss.max(1) as f64
}

/// The rate of each interval between consecutive samples, bit/s, with the time its interval
/// ended, ns (intervals of zero length are skipped).
pub fn interval_rates(samples: &[Sample], mss: u64) -> Vec<(u64, f64)> {
    samples
        .windows(2)
        .filter(|w| w[1].t_ns > w[0].t_ns)
        .map(|w| {
            let bps = wire_bytes_between(&w[0], &w[1], mss) * 8e9 / (w[1].t_ns - w[0].t_ns) as f64;
            (w[1].t_ns, bps)
        })
        .collect()
}

/// The mean rate from the first to the last sample, bit/s (0 with fewer than two samples).
pub fn mean_rate(samples: &[Sample], mss: u64) -> f64 {
    match (samples.first(), samples.last()) {
        (Some(a), Some(b)) if b.t_ns > a.t_ns => {
            wire_bytes_between(a, b, mss) * 8e9 / (b.t_ns - a.t_ns) as f64
        }
        _ => 0.0,
    }
}

/// Mean absolute deviation from `target_bps` of the rates of the intervals between
/// consecutive samples, each weighted by its length, in percent of the target (0 for no
/// intervals). With samples every 100 ms this is the plain mean over the samples; a sample
/// read late (its thread preempted past the next instant) is followed by one read at once,
/// and the microseconds between them, whose rate is 0 or many times the target, count for
/// their length instead of as much as a whole 100 ms.
pub fn conformance_err_pct(samples: &[Sample], mss: u64, target_bps: f64) -> f64 {
    if target_bps <= 0.0 {
        return 0.0;
    }
    let (mut weighted, mut total_ns) = (0.0, 0.0);
    for w in samples.windows(2).filter(|w| w[1].t_ns > w[0].t_ns) {
        let ns = (w[1].t_ns - w[0].t_ns) as f64;
        let bps = wire_bytes_between(&w[0], &w[1], mss) * 8e9 / ns;
        weighted += (bps - target_bps).abs() * ns;
        total_ns += ns;
    }
    if total_ns <= 0.0 {
        return 0.0;
    }
    weighted / total_ns / target_bps * 100.0
}

/// Jain's fairness index of `xs`: 1 when all are equal, 1/n when one has everything; 0 when
/// there is nothing (no values, or all zero).
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares <= 0.0 {
        return 0.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// The nearest-rank `p`-th percentile (0 < p <= 100) of `values` (None if empty).
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// CPU seconds per gigabit carried (0 when nothing was carried).
pub fn cpu_s_per_gbit(cpu_s: f64, wire_bits: f64) -> f64 {
    if wire_bits <= 0.0 {
        0.0
    } else {
        cpu_s / (wire_bits / 1e9)
    }
}

/// Round to `digits` decimals (for the JSON lines).
pub fn round_to(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_ms: u64, rx_bytes: u64, rx_packets: u64) -> Sample {
        Sample {
            t_ns: t_ms * 1_000_000,
            rx_bytes,
            rx_packets,
        }
    }

    #[test]
    fn a_super_frame_is_charged_every_segment_header() {
        // One 45-segment super-frame: one header set counted, 45 on the wire.
        let payload = 45 * 1448;
        let a = s(0, 0, 0);
        let b = s(1, payload + HEADER_BYTES, 1);
        assert_eq!(wire_bytes_between(&a, &b, 1448), (45 * 1514) as f64);
        // The same bytes as 45 separate frames count the same.
        let c = s(1, 45 * 1514, 45);
        assert_eq!(wire_bytes_between(&a, &c, 1448), (45 * 1514) as f64);
    }

    #[test]
    fn rates_per_interval_and_overall() {
        // 1514 * 8256 bytes per 100 ms = 1 Gbit/s (to 0.01%), then half of it.
        let seg = 8256;
        let samples = [
            s(0, 0, 0),
            s(100, seg * 1514, seg),
            s(200, seg * 1514 + seg / 2 * 1514, seg + seg / 2),
        ];
        let rates = interval_rates(&samples, 1448);
        assert_eq!(rates.len(), 2);
        assert_eq!((rates[0].0, rates[1].0), (100_000_000, 200_000_000));
        assert!((rates[0].1 - 1e9).abs() / 1e9 < 1e-3, "{rates:?}");
        assert!((rates[1].1 - 0.5e9).abs() / 1e9 < 1e-3, "{rates:?}");
        let mean = mean_rate(&samples, 1448);
        assert!((mean - 0.75e9).abs() / 1e9 < 1e-3, "{mean}");
        // A repeated instant is skipped, not divided by.
        assert!(interval_rates(&[s(0, 0, 0), s(0, 10, 1)], 1448).is_empty());
        assert_eq!(mean_rate(&samples[..1], 1448), 0.0);
    }

    #[test]
    fn conformance_is_the_mean_absolute_deviation_in_percent() {
        // 1448 B segments of 1514 B on the wire: 1e6 segments in 100 ms are 12.112 Gbit/s,
        // the target here; then +2% and -4%: mean absolute 3%.
        let target = 1e6 * 1514.0 * 8.0 / 0.1;
        let samples = [
            s(0, 0, 0),
            s(100, 1_000_000 * 1514, 1_000_000),
            s(200, 2_000_000 * 1514, 2_000_000),
            s(300, 3_020_000 * 1514, 3_020_000),
            s(400, 3_980_000 * 1514, 3_980_000),
        ];
        let e = conformance_err_pct(&samples[..3], 1448, target);
        assert!(e.abs() < 1e-9, "{e}");
        let e = conformance_err_pct(&samples[2..], 1448, target);
        assert!((e - 3.0).abs() < 1e-9, "{e}");
        assert_eq!(conformance_err_pct(&samples[..1], 1448, target), 0.0);
        assert_eq!(conformance_err_pct(&[], 1448, target), 0.0);
    }

    /// A sample read late (the sampler preempted past the next instant) is followed by one
    /// read at once: a long interval and one of microseconds, whose rate is 0 or many times the
    /// target. It counts for its length, not as much as a whole 100 ms.
    #[test]
    fn a_late_sample_counts_for_its_length() {
        // 12.5 MB of wire bytes per 100 ms: 1 Gbit/s.
        let per_100ms = 8256u64; // segments of 1514 B
        let at = |t_us: u64, segs: u64| Sample {
            t_ns: t_us * 1000,
            rx_bytes: segs * 1514,
            rx_packets: segs,
        };
        let samples = [
            at(0, 0),
            at(100_000, per_100ms),
            // Late by 250 ms, then at once: 50 us and nothing new.
            at(350_000, per_100ms * 35 / 10),
            at(350_050, per_100ms * 35 / 10),
            at(400_000, per_100ms * 4),
        ];
        let e = conformance_err_pct(&samples, 1448, 1e9);
        assert!(e < 0.1, "{e}% for a machine that delivered the target");
    }

    #[test]
    fn jain_index_bounds() {
        assert!((jain(&[5.0; 10]) - 1.0).abs() < 1e-12);
        let one_has_all = jain(&[1.0, 0.0, 0.0, 0.0]);
        assert!((one_has_all - 0.25).abs() < 1e-12);
        assert!((jain(&[1.0, 3.0]) - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[]), 0.0);
        assert_eq!(jain(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn cpu_per_gbit_and_rounding() {
        assert_eq!(cpu_s_per_gbit(0.5, 2e9), 0.25);
        assert_eq!(cpu_s_per_gbit(0.5, 0.0), 0.0);
        assert_eq!(round_to(0.31449, 2), 0.31);
        assert_eq!(round_to(995.04, 1), 995.0);
    }
}
