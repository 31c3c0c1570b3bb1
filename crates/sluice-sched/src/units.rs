//! Units with their names on them: rates in bit/s, sizes in bytes, times in nanoseconds, and
//! the human spellings used in policy files (`10Mbit`, `1.5Gbit`, `64KiB`, `10ms`).
//!
//! Transmission times are computed in 32.32 fixed-point nanoseconds with 128-bit arithmetic:
//! exact to 2^-32 ns per packet at any rate up to 2^63 bit/s, so a limiter never drifts with
//! the rate (BESS's limiter diverged above 68 Gbit/s from exactly this kind of rounding).
//! Gates, which time every packet, multiply by a 63-bit reciprocal of the rate instead of
//! dividing ([`Rate::tx_time_fp_of`]): rounded up, never shorter, within a unit of 2^-32 ns
//! per packet at realistic rates.

use std::fmt;
use std::num::NonZeroU64;

/// A rate in bits per second, at least 1 and below 2^63. (Never zero, so an `Option<Gate>` in
/// a flow's record costs no tag.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(NonZeroU64);

/// `bps` as a rate; the caller has checked `1 <= bps <= MAX_RATE_BPS`.
const fn checked(bps: u64) -> Rate {
    match NonZeroU64::new(bps) {
        Some(r) => Rate(r),
        None => panic!("a rate must be positive"),
    }
}

/// Largest rate accepted: 2^63 - 1 bit/s.
pub const MAX_RATE_BPS: u64 = (1 << 63) - 1;

/// Why a value could not be read or accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a number with a known unit.
    #[error("`{text}` is not a {what}; expected {expected}")]
    Malformed {
        /// The text given.
        text: String,
        /// What was being read.
        what: &'static str,
        /// An example of the expected form.
        expected: &'static str,
    },
    /// A number outside what the quantity allows.
    #[error("{what} `{text}` is out of range: {why}")]
    OutOfRange {
        /// The text given.
        text: String,
        /// What was being read.
        what: &'static str,
        /// The limit broken.
        why: &'static str,
    },
}

impl Rate {
    /// A rate of `bps` bits per second, if `1 <= bps < 2^63` (no allocation: for hot paths).
    #[inline]
    pub fn new(bps: u64) -> Option<Rate> {
        match NonZeroU64::new(bps) {
            Some(r) if bps <= MAX_RATE_BPS => Some(Rate(r)),
            _ => None,
        }
    }

    /// A rate of `bps` bits per second; errors for 0 and for 2^63 or more.
    pub fn from_bps(bps: u64) -> Result<Rate, UnitError> {
        if bps == 0 {
            return Err(UnitError::OutOfRange {
                text: "0".into(),
                what: "rate",
                why: "a rate must be positive",
            });
        }
        if bps > MAX_RATE_BPS {
            return Err(UnitError::OutOfRange {
                text: bps.to_string(),
                what: "rate",
                why: "rates must be below 2^63 bit/s",
            });
        }
        Ok(checked(bps))
    }

    /// Megabits per second (for tests and examples); panics on 0 (a programming error).
    pub const fn mbit(m: u64) -> Rate {
        assert!(m > 0 && m <= MAX_RATE_BPS / 1_000_000);
        checked(m * 1_000_000)
    }

    /// Gigabits per second (for tests and examples); panics on 0 (a programming error).
    pub const fn gbit(g: u64) -> Rate {
        assert!(g > 0 && g <= MAX_RATE_BPS / 1_000_000_000);
        checked(g * 1_000_000_000)
    }

    /// Bits per second.
    pub fn bps(self) -> u64 {
        self.0.get()
    }

    /// Time to send `bytes` at this rate, in 32.32 fixed-point nanoseconds.
    #[inline]
    pub fn tx_time_fp(self, bytes: u64) -> u128 {
        if bytes == 0 {
            return 0; // a gate without burst: no 128-bit division
        }
        let bits = u128::from(bytes) * 8_000_000_000; // < 2^97
        let bps = u128::from(self.0.get());
        if bytes >> 32 == 0 {
            return (bits << 32) / bps; // < 2^97: the shift keeps every bit
        }
        // A size of 4 GiB or more (a burst, say): shifting first could drop high bits, so
        // divide first and saturate a time that 128 bits cannot hold.
        let (whole, rest) = (bits / bps, bits % bps);
        whole
            .checked_mul(1 << 32)
            .map_or(u128::MAX, |w| w + (rest << 32) / bps)
    }

    /// The multiplier of [`Rate::tx_time_fp_of`]: `ceil(8e9 * 2^(31 + s) / bps)` with
    /// `s = floor(log2 bps)`, which lies in (2^62.9, 2^63.9] for every rate, so it keeps 63
    /// significant bits in a u64.
    pub fn per_byte(self) -> u64 {
        let bps = u128::from(self.0.get());
        let s = self.log2();
        // Fits: 8e9 * 2^(31 + s) <= 8e9 * 2^93 < 2^127.
        (8_000_000_000u128 << (31 + s)).div_ceil(bps) as u64
    }

    /// `floor(log2 bps)`, the shift that goes with [`Rate::per_byte`].
    #[inline]
    fn log2(self) -> u32 {
        63 - self.0.leading_zeros()
    }

    /// [`Rate::tx_time_fp`] of a packet of `len` bytes by multiplication with `per_byte` (this
    /// rate's [`Rate::per_byte`]), without the 128-bit division: what a gate does for every
    /// packet. The multiplier is rounded up, so the time is never shorter than `tx_time_fp`'s,
    /// and longer by at most `1 + 4 * len / bps` units of 2^-32 ns: one unit for a 1500-byte
    /// packet at 6 kbit/s and above, a relative 2^-62 at any rate. A gate therefore never
    /// sends faster than its rate.
    #[inline]
    pub fn tx_time_fp_of(self, len: u32, per_byte: u64) -> u128 {
        debug_assert_eq!(per_byte, self.per_byte());
        // len * per_byte < 2^96, doubled < 2^97: no overflow.
        ((u128::from(len) * u128::from(per_byte)) << 1) >> self.log2()
    }

    /// Time to send `bytes` at this rate, in whole nanoseconds (rounded down; `u64::MAX` for
    /// a time beyond it, 4 GB at 1 bit/s).
    pub fn tx_time_ns(self, bytes: u64) -> u64 {
        u64::try_from(self.tx_time_fp(bytes) >> 32).unwrap_or(u64::MAX)
    }

    /// Bytes sent in `ns` nanoseconds at this rate (rounded down).
    pub fn bytes_in(self, ns: u64) -> u64 {
        (u128::from(ns) * u128::from(self.0.get()) / 8_000_000_000) as u64
    }

    /// Parse `10Mbit`, `1.5Gbit`, `250kbit`, `1e9bit`, with an optional `/s` or `ps`.
    /// Units are decimal (k = 10^3) and count bits.
    pub fn parse(text: &str) -> Result<Rate, UnitError> {
        const EXPECTED: &str = "a rate like `10Mbit`, `1.5Gbit` or `250kbit` (bits per second)";
        let malformed = || UnitError::Malformed {
            text: text.into(),
            what: "rate",
            expected: EXPECTED,
        };
        let t = text.trim();
        let t = t
            .strip_suffix("/s")
            .or_else(|| t.strip_suffix("ps"))
            .unwrap_or(t);
        let lower = t.to_ascii_lowercase();
        let (number, scale) = [
            ("tbit", 1e12),
            ("gbit", 1e9),
            ("mbit", 1e6),
            ("kbit", 1e3),
            ("bit", 1.0),
        ]
        .iter()
        .find_map(|&(unit, scale)| lower.strip_suffix(unit).map(|n| (n.trim(), scale)))
        .ok_or_else(malformed)?;
        let value: f64 = number.parse().map_err(|_| malformed())?;
        if !value.is_finite() || value <= 0.0 {
            return Err(UnitError::OutOfRange {
                text: text.into(),
                what: "rate",
                why: "a rate must be positive",
            });
        }
        let bps = value * scale;
        if bps >= MAX_RATE_BPS as f64 {
            return Err(UnitError::OutOfRange {
                text: text.into(),
                what: "rate",
                why: "rates must be below 2^63 bit/s",
            });
        }
        if bps < 1.0 {
            return Err(UnitError::OutOfRange {
                text: text.into(),
                what: "rate",
                why: "rates must be at least 1 bit/s",
            });
        }
        Rate::from_bps(bps.round() as u64)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.get() as f64;
        let (v, u) = if b >= 1e12 {
            (b / 1e12, "Tbit")
        } else if b >= 1e9 {
            (b / 1e9, "Gbit")
        } else if b >= 1e6 {
            (b / 1e6, "Mbit")
        } else if b >= 1e3 {
            (b / 1e3, "kbit")
        } else {
            (b, "bit")
        };
        if v.fract() == 0.0 {
            write!(f, "{v:.0}{u}")
        } else {
            write!(f, "{}{u}", format!("{v:.3}").trim_end_matches('0'))
        }
    }
}

/// Parse a size in bytes: `1500`, `1500B`, `64KiB`, `100kB`, `1MB`, `2MiB`, `1GB`.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    const EXPECTED: &str = "a size like `1500B`, `64KiB` or `1MB`";
    let malformed = || UnitError::Malformed {
        text: text.into(),
        what: "size",
        expected: EXPECTED,
    };
    let t = text.trim();
    let units: [(&str, f64); 8] = [
        ("KiB", 1024.0),
        ("MiB", 1024.0 * 1024.0),
        ("GiB", 1024.0 * 1024.0 * 1024.0),
        ("kB", 1e3),
        ("KB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
        ("B", 1.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|&(u, s)| t.strip_suffix(u).map(|n| (n.trim(), s)))
        .unwrap_or((t, 1.0));
    let value: f64 = number.parse().map_err(|_| malformed())?;
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= 2f64.powi(63) {
        return Err(UnitError::OutOfRange {
            text: text.into(),
            what: "size",
            why: "sizes must be between 0 and 2^63 bytes",
        });
    }
    if bytes.fract() != 0.0 {
        return Err(UnitError::OutOfRange {
            text: text.into(),
            what: "size",
            why: "a size must be a whole number of bytes",
        });
    }
    Ok(bytes as u64)
}

/// Parse a duration into nanoseconds: `10ms`, `250us`, `1.5s`, `800ns`.
pub fn parse_duration(text: &str) -> Result<u64, UnitError> {
    const EXPECTED: &str = "a duration like `10ms`, `250us` or `1s`";
    let malformed = || UnitError::Malformed {
        text: text.into(),
        what: "duration",
        expected: EXPECTED,
    };
    let t = text.trim();
    let (number, scale) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|&(u, s)| t.strip_suffix(u).map(|n| (n.trim(), s)))
    .ok_or_else(malformed)?;
    let value: f64 = number.parse().map_err(|_| malformed())?;
    let ns = value * scale;
    if !ns.is_finite() || ns < 0.0 || ns >= 2f64.powi(63) {
        return Err(UnitError::OutOfRange {
            text: text.into(),
            what: "duration",
            why: "durations must be between 0 and 2^63 ns",
        });
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_human_units() {
        assert_eq!(Rate::parse("10Mbit").unwrap().bps(), 10_000_000);
        assert_eq!(Rate::parse("1.5Gbit").unwrap().bps(), 1_500_000_000);
        assert_eq!(Rate::parse("250kbit/s").unwrap().bps(), 250_000);
        assert_eq!(Rate::parse("40gbit").unwrap().bps(), 40_000_000_000);
        assert_eq!(Rate::parse("1Tbit").unwrap().bps(), 1_000_000_000_000);
        assert_eq!(Rate::parse(" 100 Mbit ").unwrap().bps(), 100_000_000);
        assert_eq!(Rate::parse("1e9bit").unwrap().bps(), 1_000_000_000);
    }

    #[test]
    fn impossible_rates_are_errors() {
        for bad in [
            "0Mbit", "-5Mbit", "fast", "10", "10MB", "NaNbit", "infGbit", "1e30bit",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
        assert!(Rate::from_bps(0).is_err());
        assert!(Rate::from_bps(1 << 63).is_err());
        assert!(Rate::from_bps(MAX_RATE_BPS).is_ok());
        let e = Rate::parse("10MB").unwrap_err().to_string();
        assert!(e.contains("expected a rate like"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        for r in ["10Mbit", "1.5Gbit", "40Gbit", "250kbit", "999bit"] {
            let rate = Rate::parse(r).unwrap();
            assert_eq!(rate.to_string(), r);
            assert_eq!(Rate::parse(&rate.to_string()).unwrap(), rate);
        }
    }

    #[test]
    fn tx_time_is_exact_at_any_rate() {
        assert_eq!(Rate::gbit(1).tx_time_ns(1500), 12_000);
        assert_eq!(Rate::gbit(40).tx_time_ns(1500), 300);
        // 68 Gbit/s and beyond: no divergence. A million 64-byte packets at 100 Gbit/s take
        // 5.12 ms; summed in fixed point they are within a nanosecond of it.
        let r = Rate::from_bps(100_000_000_000).unwrap();
        let total: u128 = (0..1_000_000).map(|_| r.tx_time_fp(64)).sum();
        assert!(5_120_000 - ((total >> 32) as u64) <= 1);
        let max = Rate::from_bps(MAX_RATE_BPS).unwrap();
        assert_eq!(max.tx_time_ns(u64::from(u32::MAX)), 3);
    }

    #[test]
    fn tx_time_of_huge_sizes_is_exact_or_saturates() {
        // 2^40 bytes at 1 Gbit/s: 8796.09 s, which shifting before dividing lost.
        let g = Rate::gbit(1);
        assert_eq!(g.tx_time_ns(1 << 40), (1u64 << 40) * 8);
        assert_eq!(g.tx_time_fp(1 << 40), u128::from((1u64 << 40) * 8) << 32);
        // u64::MAX bytes at 1 Gbit/s: within u128 in fixed point, beyond u64 in ns.
        assert_eq!(g.tx_time_fp(u64::MAX), (u128::from(u64::MAX) * 8) << 32);
        assert_eq!(g.tx_time_ns(u64::MAX), u64::MAX);
        // 4 GB at 1 bit/s is longer than u64 nanoseconds; u64::MAX bytes longer than u128
        // units of 2^-32 ns.
        let slow = Rate::from_bps(1).unwrap();
        assert_eq!(slow.tx_time_ns(4_000_000_000), u64::MAX);
        assert_eq!(slow.tx_time_fp(u64::MAX), u128::MAX);
    }

    proptest::proptest! {
        #[test]
        fn the_reciprocal_is_never_shorter_and_at_most_its_bound_longer(
            log_bps in 0u32..63,
            frac in proptest::prelude::any::<u64>(),
            len in 1u32..,
        ) {
            // Rates log-uniform over [1, 2^63): every shift the reciprocal takes.
            let bps = ((1u64 << log_bps) | (frac & ((1u64 << log_bps) - 1))).min(MAX_RATE_BPS);
            let r = Rate::from_bps(bps).unwrap();
            let exact = r.tx_time_fp(u64::from(len));
            let fast = r.tx_time_fp_of(len, r.per_byte());
            proptest::prop_assert!(fast >= exact);
            let bound = 1 + (4 * u128::from(len)).div_ceil(u128::from(bps));
            proptest::prop_assert!(fast - exact <= bound, "{fast} - {exact} > {bound}");
        }
    }

    #[test]
    fn the_reciprocal_is_exact_where_the_time_is_whole() {
        for (r, len, ns) in [
            (Rate::gbit(1), 1500, 12_000),
            (Rate::gbit(40), 1500, 300),
            (Rate::gbit(8), 64, 64),
            (Rate::mbit(10), 1500, 1_200_000),
            (Rate::from_bps(1).unwrap(), 1, 8_000_000_000),
        ] {
            assert_eq!(r.tx_time_fp_of(len, r.per_byte()) >> 32, ns, "{r} {len}");
        }
        let max = Rate::from_bps(MAX_RATE_BPS).unwrap();
        assert_eq!(max.tx_time_fp_of(u32::MAX, max.per_byte()) >> 32, 3);
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("1500B").unwrap(), 1500);
        assert_eq!(parse_size("1500").unwrap(), 1500);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("100kB").unwrap(), 100_000);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert!(parse_size("1.5B").is_err());
        assert!(parse_size("-1B").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_duration("10ms").unwrap(), 10_000_000);
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert_eq!(parse_duration("1.5s").unwrap(), 1_500_000_000);
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1ms").is_err());
    }
}
