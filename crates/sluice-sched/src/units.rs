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
    /// The largest rate: [`MAX_RATE_BPS`].
    pub const MAX: Rate = checked(MAX_RATE_BPS);

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

    /// A time `fp` (32.32 fixed-point ns) that this rate takes to send some bytes, as the time
    /// `to` takes to send them: `fp * self / to`, rounded down, saturated at `u128::MAX >> 1`
    /// (what a rate changed at run time still owes, paid at the new rate).
    pub fn retime(self, fp: u128, to: Rate) -> u128 {
        // In two steps that cannot overflow below a saturated result.
        let (old, new) = (u128::from(self.bps()), u128::from(to.bps()));
        (fp / new)
            .checked_mul(old)
            .and_then(|q| q.checked_add(fp % new * old / new))
            .map_or(u128::MAX >> 1, |t| t.min(u128::MAX >> 1))
    }

    /// Time to send `bytes` at this rate, in whole nanoseconds (rounded down; `u64::MAX` for
    /// a time beyond it, 4 GB at 1 bit/s).
    pub fn tx_time_ns(self, bytes: u64) -> u64 {
        u64::try_from(self.tx_time_fp(bytes) >> 32).unwrap_or(u64::MAX)
    }

    /// Bytes sent in `ns` nanoseconds at this rate (rounded down; `u64::MAX` for more, 47
    /// years at 100 Gbit/s).
    pub fn bytes_in(self, ns: u64) -> u64 {
        u64::try_from(u128::from(ns) * u128::from(self.0.get()) / 8_000_000_000).unwrap_or(u64::MAX)
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
        // Units in any case, the `/s` or `ps` too (`10MBITPS` as `10MBIT`).
        let lower = text.trim().to_ascii_lowercase();
        let lower = lower
            .strip_suffix("/s")
            .or_else(|| lower.strip_suffix("ps"))
            .unwrap_or(&lower)
            .trim_end();
        let (number, scale) = [
            ("tbit", 1_000_000_000_000),
            ("gbit", 1_000_000_000),
            ("mbit", 1_000_000),
            ("kbit", 1_000),
            ("bit", 1),
        ]
        .iter()
        .find_map(|&(unit, scale)| lower.strip_suffix(unit).map(|n| (n.trim(), scale)))
        .ok_or_else(malformed)?;
        let out_of_range = |why| UnitError::OutOfRange {
            text: text.into(),
            what: "rate",
            why,
        };
        let bps = match read_number(number, scale).ok_or_else(malformed)? {
            Number::Exact(x) => {
                if x.whole == Some(0) {
                    // Below 1 bit/s: zero is not a rate at all, and a fraction of a bit is
                    // refused rather than rounded up to 1 (as the f64 parser did).
                    return Err(out_of_range(if x.inexact {
                        "rates must be at least 1 bit/s"
                    } else {
                        "a rate must be positive"
                    }));
                }
                // Nearest bit/s; a whole part beyond u128 is far beyond the limit anyway.
                x.whole
                    .and_then(|w| w.checked_add(u128::from(x.half_up)))
                    .unwrap_or(u128::MAX)
            }
            Number::Float(bps) => {
                if bps <= 0.0 {
                    return Err(out_of_range("a rate must be positive"));
                }
                if bps < 1.0 {
                    return Err(out_of_range("rates must be at least 1 bit/s"));
                }
                // Saturates: an infinite product (`1e309bit`) is simply too large.
                bps.round() as u128
            }
        };
        match u64::try_from(bps) {
            Ok(bps) if bps <= MAX_RATE_BPS => Rate::from_bps(bps),
            _ => Err(out_of_range("rates must be below 2^63 bit/s")),
        }
    }
}

/// Decimal units of a rate, largest first, with their size in bit/s.
const RATE_UNITS: [(&str, u64); 5] = [
    ("Tbit", 1_000_000_000_000),
    ("Gbit", 1_000_000_000),
    ("Mbit", 1_000_000),
    ("kbit", 1_000),
    ("bit", 1),
];

/// Digits printed after the point at most, so that `1.5Gbit` reads as such and not as
/// `1500000000bit`, while an odd rate still prints exactly (`1234.567kbit`).
pub const RATE_DECIMALS: u32 = 3;

/// Exact, so that `Rate::parse(&rate.to_string()) == Ok(rate)` for every rate: the largest unit
/// not above the rate in which it has at most [`RATE_DECIMALS`] decimals (`1.5Gbit`, `10Mbit`),
/// else a smaller one (`1234.567kbit`, never a rounded `1.235Mbit`); `bit` always fits.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.get();
        let step = |unit: u64| (unit / 10u64.pow(RATE_DECIMALS)).max(1);
        let (name, unit) = RATE_UNITS
            .iter()
            .copied()
            .find(|&(_, unit)| unit <= b && b % step(unit) == 0)
            .unwrap_or(("bit", 1));
        let (whole, rest) = (b / unit, b % unit);
        if rest == 0 {
            return write!(f, "{whole}{name}");
        }
        // Only units of 1000 bit/s or more leave a remainder, a multiple of `unit / 1000`:
        // three decimals, printed without trailing zeros (`1.5`, not `1.500`).
        let digits = format!("{:03}", rest / step(unit));
        write!(f, "{whole}.{}{name}", digits.trim_end_matches('0'))
    }
}

/// A number as [`read_number`] found it, multiplied by its unit.
enum Number {
    /// A plain decimal (`1500`, `1.5`, `.25`), multiplied exactly.
    Exact(Exact),
    /// Any other form Rust reads (`1e9`, `-5`), multiplied in floating point: perhaps
    /// negative or infinite (`1e309`), never NaN.
    Float(f64),
}

/// The exact product of a plain decimal and a whole unit, split at the point.
struct Exact {
    /// The whole part; `None` beyond u128, which is beyond every limit here.
    whole: Option<u128>,
    /// The fractional part is at least one half (for rounding to nearest).
    half_up: bool,
    /// There is a fractional part.
    inexact: bool,
}

/// `number * scale`, or `None` if `number` is not a number. Plain decimals are read exactly
/// (f64 would turn 2^63 - 1 into 2^63, and 2^53 + 1 into 2^53), of any length, and so are
/// exponent forms of them up to `e±64` (`1001e-3KB` is 1001 B; through f64 it was refused as
/// fractional, and `9007199254740993e0B` read as one byte less). Signs and larger exponents
/// go through f64. NaN and infinity spelled out (`nan`, `inf`, which Rust's f64 parser
/// accepts) are not numbers here.
fn read_number(number: &str, scale: u64) -> Option<Number> {
    let plain = number.strip_prefix('+').unwrap_or(number);
    let (mantissa, exponent) = match plain.split_once(['e', 'E']) {
        // Not `abs()`: i32::MIN has none (it overflowed, and wrapped past the bound).
        Some((m, e)) => (m, e.parse::<i32>().ok().filter(|e| (-64..=64).contains(e))),
        None => (plain, Some(0)),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if let (true, Some(exponent)) = (
        digits(int) && digits(frac) && !(int.is_empty() && frac.is_empty()),
        exponent,
    ) {
        let (int, frac) = shift_point(int, frac, exponent);
        return Some(Number::Exact(scale_decimal(&int, &frac, scale)));
    }
    // Only digits, signs, points and exponents: this keeps out `nan`, `inf` and `infinity`.
    if !number
        .bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    // An exponent far below -64 underflows to 0: a nonzero mantissa is still a number above
    // 0 (no whole number of bytes, no rate of 1 bit/s), not 0 (`1e-400B` was a burst of 0).
    let tiny = value == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
    let value = if tiny {
        f64::MIN_POSITIVE.copysign(value)
    } else {
        value
    };
    Some(Number::Float(value * scale as f64))
}

/// The digits of `int.frac * 10^exponent`, split at the point again.
fn shift_point(int: &str, frac: &str, exponent: i32) -> (String, String) {
    let digits = format!("{int}{frac}");
    // Where the point falls among `digits`, padded with zeros on the side it moved past.
    let point = int.len() as i64 + i64::from(exponent);
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        (String::new(), format!("{zeros}{digits}"))
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        (format!("{digits}{zeros}"), String::new())
    } else {
        let (i, f) = digits.split_at(point as usize);
        (i.to_string(), f.to_string())
    }
}

/// `int.frac * scale` exactly, for strings of ASCII digits.
fn scale_decimal(int: &str, frac: &str, scale: u64) -> Exact {
    let scale = u128::from(scale);
    // `int * scale`, or `None` past 2^128: beyond every limit, so "too large" either way.
    let whole = int.bytes().try_fold(0u128, |acc, d| {
        acc.checked_mul(10)?.checked_add(u128::from(d - b'0'))
    });
    let whole = whole.and_then(|w| w.checked_mul(scale));
    // `0.frac * scale` by Horner's rule from the last digit, so that any number of digits fits:
    // if `q + e` (`q` whole, `0 <= e < 1`) is the product for the digits after `d`, the
    // product from `d` on is `(d * scale + q + e) / 10`, whose whole part is
    // `(d * scale + q) / 10` (below `scale`: no overflow) and whose fractional part is
    // `(remainder + e) / 10`. That is nonzero if any step left a remainder, and at least a
    // half if the last step (the first digit) left 5 or more.
    let (mut q, mut half_up, mut inexact) = (0u128, false, false);
    for d in frac.bytes().rev() {
        let n = u128::from(d - b'0') * scale + q;
        q = n / 10;
        half_up = n % 10 >= 5;
        inexact |= n % 10 != 0;
    }
    Exact {
        whole: whole.and_then(|w| w.checked_add(q)),
        half_up,
        inexact,
    }
}

/// Why [`parse_size`] refuses `1.5B`: the one [`UnitError::OutOfRange`] of a size that is not
/// about its bounds (which a caller with tighter ones states itself).
pub const NOT_WHOLE_BYTES: &str = "a size must be a whole number of bytes";

/// Parse a size in bytes: `1500`, `1500B`, `64KiB`, `100kB`, `1MB`, `2MiB`, `1GB`.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    const EXPECTED: &str = "a size like `1500B`, `64KiB` or `1MB`";
    let malformed = || UnitError::Malformed {
        text: text.into(),
        what: "size",
        expected: EXPECTED,
    };
    let t = text.trim();
    let units: [(&str, u64); 8] = [
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("kB", 1_000),
        ("KB", 1_000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
        ("B", 1),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|&(u, s)| t.strip_suffix(u).map(|n| (n.trim(), s)))
        .unwrap_or((t, 1));
    let out_of_range = |why| UnitError::OutOfRange {
        text: text.into(),
        what: "size",
        why,
    };
    let too_large = || out_of_range("sizes must be below 2^63 bytes");
    let not_whole = || out_of_range(NOT_WHOLE_BYTES);
    let bytes = match read_number(number, scale).ok_or_else(malformed)? {
        Number::Exact(x) => {
            let bytes = x.whole.ok_or_else(too_large)?;
            // Too large before fractional: the more useful thing to hear about `1e30.5`.
            if bytes > i64::MAX as u128 {
                return Err(too_large());
            }
            if x.inexact {
                return Err(not_whole());
            }
            bytes as u64
        }
        Number::Float(bytes) => {
            if bytes < 0.0 {
                return Err(out_of_range("sizes must be between 0 and 2^63 bytes"));
            }
            if bytes >= 2f64.powi(63) {
                return Err(too_large()); // infinite too (`1e309`)
            }
            if bytes.fract() != 0.0 {
                return Err(not_whole());
            }
            bytes as u64
        }
    };
    Ok(bytes)
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
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ]
    .iter()
    .find_map(|&(u, s)| t.strip_suffix(u).map(|n| (n.trim(), s)))
    .ok_or_else(malformed)?;
    let out_of_range = |why| UnitError::OutOfRange {
        text: text.into(),
        what: "duration",
        why,
    };
    let too_long = || out_of_range("durations must be below 2^63 ns");
    match read_number(number, scale).ok_or_else(malformed)? {
        Number::Exact(x) => {
            // Nearest nanosecond.
            let ns = x
                .whole
                .and_then(|w| w.checked_add(u128::from(x.half_up)))
                .ok_or_else(too_long)?;
            if ns > i64::MAX as u128 {
                return Err(too_long());
            }
            Ok(ns as u64)
        }
        Number::Float(ns) => {
            if ns < 0.0 {
                return Err(out_of_range("durations must be between 0 and 2^63 ns"));
            }
            if ns >= 2f64.powi(63) {
                return Err(too_long()); // infinite too (`1e309s`)
            }
            Ok(ns.round() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_retimed_for_the_same_bytes_at_another_rate() {
        let (slow, fast) = (Rate::mbit(1), Rate::mbit(10));
        // 1500 B: 12 ms at 1 Mbit/s, 1.2 ms at 10 Mbit/s, either way, with its fraction.
        assert_eq!(
            slow.retime(slow.tx_time_fp(1500), fast),
            fast.tx_time_fp(1500)
        );
        assert_eq!(
            fast.retime(fast.tx_time_fp(1500), slow),
            slow.tx_time_fp(1500)
        );
        assert_eq!(slow.retime(3 << 31, fast), (3 << 31) / 10);
        assert_eq!(fast.retime(12345, fast), 12345);
        // Saturated, not wrapped: the most a time can be, from 1 bit/s to the fastest rate.
        let (one, top) = (Rate::new(1).unwrap(), Rate::new(u64::MAX >> 1).unwrap());
        assert_eq!(top.retime(u128::MAX >> 1, one), u128::MAX >> 1);
        assert_eq!(
            one.retime(u128::MAX >> 1, top),
            (u128::MAX >> 1) / (u128::MAX >> 65)
        );
    }

    #[test]
    fn rates_parse_in_human_units() {
        assert_eq!(Rate::parse("10Mbit").unwrap().bps(), 10_000_000);
        assert_eq!(Rate::parse("1.5Gbit").unwrap().bps(), 1_500_000_000);
        assert_eq!(Rate::parse("250kbit/s").unwrap().bps(), 250_000);
        assert_eq!(Rate::parse("40gbit").unwrap().bps(), 40_000_000_000);
        assert_eq!(Rate::parse("1Tbit").unwrap().bps(), 1_000_000_000_000);
        assert_eq!(Rate::parse(" 100 Mbit ").unwrap().bps(), 100_000_000);
        assert_eq!(Rate::parse("1e9bit").unwrap().bps(), 1_000_000_000);
        // Units in any case, the per-second suffix too.
        for text in ["10Mbitps", "10MBITPS", "10Mbit/S", "10mbit/s", "10 MBit PS"] {
            assert_eq!(Rate::parse(text).map(Rate::bps), Ok(10_000_000), "{text}");
        }
    }

    #[test]
    fn bytes_in_rounds_down_and_saturates() {
        // 8 Mbit/s: a byte per microsecond.
        assert_eq!(Rate::mbit(8).bytes_in(1_000_000), 1_000);
        assert_eq!(Rate::mbit(8).bytes_in(1_999_999), 1_999);
        assert_eq!(Rate::from_bps(7).unwrap().bytes_in(1_000_000_000), 0);
        assert_eq!(Rate::from_bps(9).unwrap().bytes_in(1_000_000_000), 1);
        // 2^64 ns at 2^63 - 1 bit/s is about 2^124 bytes.
        let fastest = Rate::from_bps(MAX_RATE_BPS).unwrap();
        assert_eq!(fastest.bytes_in(u64::MAX), u64::MAX);
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
        // Past the exact exponents, f64 underflows to 0; the number is still above 0.
        for tiny in ["1e-400B", "1e-400", "99E-400GB", "-1e-400B"] {
            assert!(parse_size(tiny).is_err(), "{tiny}");
        }
        assert_eq!(parse_size("0e-400B"), Ok(0));
        let why = |t: &str| match Rate::parse(t) {
            Err(UnitError::OutOfRange { why, .. }) => why,
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(why("1e-400bit"), "rates must be at least 1 bit/s");
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_duration("10ms").unwrap(), 10_000_000);
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert_eq!(parse_duration("1.5s").unwrap(), 1_500_000_000);
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1ms").is_err());
    }

    #[test]
    fn rates_parse_exactly() {
        let exact = |t: &str| Rate::parse(t).map(Rate::bps);
        // f64 made 2^63 - 1 into 2^63 (refused) and 2^63 - 513 into 2^63 - 1024.
        assert_eq!(exact("9223372036854775807bit"), Ok(MAX_RATE_BPS));
        assert_eq!(
            exact("9223372036854775295bit"),
            Ok(9_223_372_036_854_775_295)
        );
        assert_eq!(exact("9223372036854775.807kbit"), Ok(MAX_RATE_BPS));
        assert_eq!(exact("9223372036854775807.4bit"), Ok(MAX_RATE_BPS));
        assert_eq!(exact("1.000000001Gbit"), Ok(1_000_000_001));
        assert_eq!(exact("0.0000001Tbit"), Ok(100_000));
        assert_eq!(exact("+1.5kbit"), Ok(1_500));
        assert_eq!(exact(".5kbit"), Ok(500));
        assert_eq!(exact("2.kbit"), Ok(2_000));
        assert_eq!(exact("00010bit"), Ok(10));
        // The fraction of a bit rounds to nearest, however many digits it has.
        assert_eq!(exact("1.5bit"), Ok(2));
        assert_eq!(exact("1.4999999999999999999999999bit"), Ok(1));
        assert_eq!(exact("1.0000000005kbit"), Ok(1_000));
        assert_eq!(exact("1.0005kbit"), Ok(1_001));
        let long = format!("1.{}5kbit", "0".repeat(100_000));
        assert_eq!(exact(&long), Ok(1_000));
        let zeros = format!("{}7bit", "0".repeat(100_000));
        assert_eq!(exact(&zeros), Ok(7));
    }

    /// The reason a text was refused: `Ok` for a range error's, `Err` for a malformed one.
    fn why(e: UnitError) -> Result<&'static str, String> {
        match e {
            UnitError::OutOfRange { why, .. } => Ok(why),
            e @ UnitError::Malformed { .. } => Err(e.to_string()),
        }
    }

    #[test]
    fn rate_errors_say_why() {
        let why = |t: &str| why(Rate::parse(t).unwrap_err());
        let huge = format!("{}bit", "9".repeat(100_000));
        for too_large in [
            "9223372036854775808bit",
            "9223372036854775807.5bit",
            "9223372036854775.808kbit",
            "1e309bit",
            "1e30bit",
            "99999999999999999999999999999999999999999Tbit",
            &huge,
        ] {
            assert_eq!(
                why(too_large),
                Ok("rates must be below 2^63 bit/s"),
                "{too_large}"
            );
        }
        for not_positive in ["0bit", "0.0Gbit", "-5Mbit", "-1e309bit", "0e5bit"] {
            assert_eq!(
                why(not_positive),
                Ok("a rate must be positive"),
                "{not_positive}"
            );
        }
        for below_one in ["0.5bit", "0.0000000000001Tbit", "5e-1bit"] {
            assert_eq!(
                why(below_one),
                Ok("rates must be at least 1 bit/s"),
                "{below_one}"
            );
        }
        for nan in [
            "NaNbit",
            "nanGbit",
            "infbit",
            "infGbit",
            "-infbit",
            "+infinitybit",
            "INFbit",
            "bit",
            ".bit",
            "1..5bit",
            "1.5.kbit",
            "1_000bit",
            "0x10bit",
            "1 0bit",
            "e9bit",
        ] {
            let e = why(nan).unwrap_err();
            assert!(e.contains("is not a rate"), "{nan}: {e}");
        }
    }

    #[test]
    fn display_is_exact() {
        for (bps, text) in [
            (1_000_000_001, "1000000.001kbit"),
            (999_999_999, "999999.999kbit"),
            (999_999_900, "999999.9kbit"),
            (1_234_567, "1234.567kbit"),
            (1_235_000, "1.235Mbit"),
            (1_000, "1kbit"),
            (1_001, "1.001kbit"),
            (1, "1bit"),
            (1_500_000_000_000, "1.5Tbit"),
            (1_500_000_001_000, "1500000.001Mbit"),
            (MAX_RATE_BPS, "9223372036854775.807kbit"),
            (9_000_000_000_000_000_000, "9000000Tbit"),
        ] {
            let rate = Rate::from_bps(bps).unwrap();
            assert_eq!(rate.to_string(), text);
            assert_eq!(Rate::parse(text), Ok(rate));
        }
    }

    proptest::proptest! {
        #[test]
        fn every_rate_prints_and_parses_back(bps in 1u64..(1 << 63)) {
            let rate = Rate::from_bps(bps).unwrap();
            let text = rate.to_string();
            proptest::prop_assert!(!text.contains(".b") && !text.contains(".k"), "{text}");
            proptest::prop_assert_eq!(Rate::parse(&text), Ok(rate), "{}", text);
        }

        #[test]
        fn round_rates_print_and_parse_back(m in 1u64..1_000_000, zeros in 0u32..13) {
            // Uniform u64s are nearly all odd; these have the trailing zeros units are for.
            let rate = Rate::from_bps(m * 10u64.pow(zeros)).unwrap();
            let text = rate.to_string();
            proptest::prop_assert!(text.len() <= "999999Tbit".len() + 4, "{text}");
            proptest::prop_assert_eq!(Rate::parse(&text), Ok(rate), "{}", text);
        }

        /// Any spelling of a number answers, and what it accepts is what its plain decimal
        /// spelling means. (An exponent of i32::MIN panicked, or asked for 2 GiB of zeros.)
        #[test]
        fn number_spellings_answer_and_agree_with_plain_decimals(
            text in "[+-]?[0-9]{0,4}(\\.[0-9]{0,4})?([eE][+-]?([0-9]{1,3}|2147483648|2147483647))?",
            unit in proptest::sample::select(vec!["", "B", "KB", "KiB", "bit", "kbit", "ns", "us", "s"]),
        ) {
            let text = format!("{text}{unit}");
            if let Ok(bytes) = parse_size(&text) {
                proptest::prop_assert_eq!(parse_size(&bytes.to_string()), Ok(bytes), "{}", text);
            }
            if let Ok(rate) = Rate::parse(&text) {
                proptest::prop_assert_eq!(Rate::parse(&rate.to_string()), Ok(rate), "{}", text);
            }
            if let Ok(ns) = parse_duration(&text) {
                let plain = format!("{ns}ns");
                proptest::prop_assert_eq!(parse_duration(&plain), Ok(ns), "{}", text);
            }
        }
    }

    #[test]
    fn sizes_parse_exactly() {
        // f64 made 2^53 + 1 into 2^53.
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("9007199254740993B"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("9223372036854775807"), Ok(i64::MAX as u64));
        assert_eq!(parse_size("1.5MB"), Ok(1_500_000));
        assert_eq!(parse_size("1.5KiB"), Ok(1_536));
        assert_eq!(parse_size("0.0009765625KiB"), Ok(1));
        // Exponent forms too: through f64 the first was refused as fractional, the second
        // read as one byte less.
        assert_eq!(parse_size("1001e-3KB"), Ok(1001));
        assert_eq!(parse_size("9007199254740993e0B"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("90071992547409.93E2"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("1.5e3"), Ok(1500));
        assert_eq!(parse_size(".5e1KiB"), Ok(5120));
        assert_eq!(parse_size("5e-1KB"), Ok(500));
        assert!(
            matches!(parse_size("15e-1"), Err(UnitError::OutOfRange { why, .. }) if why.contains("whole"))
        );
        assert_eq!(Rate::parse("1001e-3kbit").map(|r| r.bps()), Ok(1001));
        assert_eq!(Rate::parse("1.5e-3kbit").map(|r| r.bps()), Ok(2)); // 1.5 bit/s, nearest
        // Exponents beyond ±64 go through f64, i32::MIN too (it overflowed `abs()` and asked
        // for a 2 GiB string of zeros).
        // f64 underflows to 0, but the number is above 0: no whole number of bytes.
        assert!(parse_size("1e-2147483648B").is_err());
        assert_eq!(parse_size("0e-2147483648B"), Ok(0));
        assert!(parse_size("1e-65").is_err()); // not a whole number of bytes
        assert!(Rate::parse("1e-2147483648bit").is_err());
        assert_eq!(parse_size("1.000000001GB"), Ok(1_000_000_001));
        assert_eq!(parse_size("1e3"), Ok(1_000));
        assert_eq!(parse_size("0"), Ok(0));
        let why = |t: &str| why(parse_size(t).unwrap_err());
        let huge = "9".repeat(100_000);
        for too_large in [
            "9223372036854775808",
            "8589934592GiB",
            "1e309",
            "1e19B",
            "99999999999999999999.5",
            &huge,
        ] {
            assert_eq!(
                why(too_large),
                Ok("sizes must be below 2^63 bytes"),
                "{too_large}"
            );
        }
        for fraction in ["1.1KiB", "0.5", "1.0000000001GB", "1.5e0B"] {
            assert_eq!(
                why(fraction),
                Ok("a size must be a whole number of bytes"),
                "{fraction}"
            );
        }
        assert_eq!(why("-1B"), Ok("sizes must be between 0 and 2^63 bytes"));
        for nan in [
            "NaN", "NaNB", "inf", "infinity", "-inf", "infKiB", "", "B", "1,5KiB",
        ] {
            let e = why(nan).unwrap_err();
            assert!(e.contains("is not a size"), "{nan}: {e}");
        }
    }

    #[test]
    fn durations_parse_exactly() {
        assert_eq!(parse_duration("9223372036854775807ns"), Ok(i64::MAX as u64));
        assert_eq!(
            parse_duration("9007199254740993ns"),
            Ok(9_007_199_254_740_993)
        );
        assert_eq!(parse_duration("1.0000000005s"), Ok(1_000_000_001));
        assert_eq!(parse_duration("0.4ns"), Ok(0));
        let why = |t: &str| why(parse_duration(t).unwrap_err());
        for too_long in ["9223372036854775808ns", "1e309s", "9223372037s"] {
            assert_eq!(
                why(too_long),
                Ok("durations must be below 2^63 ns"),
                "{too_long}"
            );
        }
        for nan in ["NaNs", "infs", "infinityms"] {
            let e = why(nan).unwrap_err();
            assert!(e.contains("is not a duration"), "{nan}: {e}");
        }
    }
}
