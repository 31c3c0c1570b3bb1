//! Small helpers every `sluice bench` report uses: counts on the command line, picking cases
//! by name, medians and labels.

/// Parse counts like `1000`, `1e6`, `1_000_000`.
pub fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    // One decimal number, exponent and all, so that it is rounded once: a mantissa times a
    // power of ten (1.1 * 1e5) is not always whole.
    let v = t
        .parse::<f64>()
        .map_err(|_| format!("`{s}` is not a count"))?;
    if !(v >= 1.0 && v.fract() == 0.0) {
        return Err(format!("`{s}` must be a whole number, at least 1"));
    }
    // Each report then applies its own, lower, limit and names it.
    if v > 1e10 {
        return Err(format!("`{s}` is more than 1e10"));
    }
    Ok(v as usize)
}

/// Most timed repeats per cell: a median of a thousand is as good as any, and the bound keeps a
/// mistyped count from reserving memory for its samples that the machine does not have.
pub const MAX_REPEATS: usize = 1000;

/// Parse `--repeats`: a count ([`parse_count`]) of at most [`MAX_REPEATS`].
pub fn parse_repeats(s: &str) -> Result<usize, String> {
    let n = parse_count(s)?;
    if n > MAX_REPEATS {
        return Err(format!(
            "`{s}` is more than the {MAX_REPEATS} repeats supported"
        ));
    }
    Ok(n)
}

/// An error naming `flag` if `values` names one value twice: a report measures each once, and
/// its tables and ratios look cells up by value.
pub fn no_duplicates<T: PartialEq + std::fmt::Display>(
    values: &[T],
    flag: &str,
) -> anyhow::Result<()> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            anyhow::bail!("{flag} names `{v}` twice");
        }
    }
    Ok(())
}

/// The items of `all` named in `names` (all of them if `names` is empty), in the order named,
/// or an error naming the unknown one (a `what`) and listing the known ones, or one named twice.
pub fn pick<T: Copy>(
    names: &[String],
    all: &[T],
    name: impl Fn(T) -> &'static str,
    what: &str,
) -> anyhow::Result<Vec<T>> {
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    no_duplicates(names, &format!("--{what}"))?;
    names
        .iter()
        .map(|s| {
            all.iter()
                .copied()
                .find(|&k| name(k) == s.as_str())
                .ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|&k| name(k)).collect();
                    anyhow::anyhow!(
                        "unknown {what} `{s}`; expected one of: {}",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

/// The median of a non-empty sample (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A size as a table label: `1e3` for a power of ten from a thousand on, else the number.
pub fn fmt_n(n: usize) -> String {
    let e = (n as f64).log10();
    if e.fract() == 0.0 && n >= 1000 {
        format!("1e{}", e as u32)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_in_every_spelling() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("1e6"), Ok(1_000_000));
        assert_eq!(parse_count("1_000"), Ok(1000));
        assert_eq!(parse_count("2.5e3"), Ok(2500));
        assert!(parse_count("0").is_err());
        assert!(parse_count("1.5").is_err());
        assert!(parse_count("ten").is_err());
        assert!(parse_count("1e99").is_err());
        assert_eq!(
            parse_count("-5"),
            Err("`-5` must be a whole number, at least 1".into())
        );
        assert_eq!(
            parse_count("nan"),
            Err("`nan` must be a whole number, at least 1".into())
        );
        assert_eq!(parse_count("2e10"), Err("`2e10` is more than 1e10".into()));
    }

    /// A mantissa times a power of ten in floating point is not always whole (1.1 * 1e5 is
    /// 110000.00000000001), so counts written so must be read as one decimal number.
    #[test]
    fn decimal_mantissas_with_an_exponent_are_whole_counts() {
        assert_eq!(parse_count("1.1e5"), Ok(110_000));
        assert_eq!(parse_count("2.2e2"), Ok(220));
        assert_eq!(parse_count("4.1e6"), Ok(4_100_000));
        assert_eq!(parse_count("1.15E2"), Ok(115));
        assert_eq!(
            parse_count("1.5e0"),
            Err("`1.5e0` must be a whole number, at least 1".into())
        );
    }

    #[test]
    fn repeats_are_bounded_and_spelled_like_counts() {
        assert_eq!(parse_repeats("1e3"), Ok(1000));
        assert_eq!(parse_repeats("5"), Ok(5));
        assert!(parse_repeats("0").is_err());
        assert_eq!(
            parse_repeats("18446744073709551615"),
            Err("`18446744073709551615` is more than 1e10".into())
        );
        assert_eq!(
            parse_repeats("1001"),
            Err("`1001` is more than the 1000 repeats supported".into())
        );
    }

    #[test]
    fn a_value_named_twice_is_refused_with_its_flag() {
        assert!(no_duplicates(&[1, 2, 3], "--flows").is_ok());
        let err = no_duplicates(&[100, 200, 100], "--flows").unwrap_err();
        assert_eq!(err.to_string(), "--flows names `100` twice");
        let all = [1u8, 2];
        let name = |k: u8| ["one", "two"][usize::from(k - 1)];
        let err = pick(&["one".into(), "one".into()], &all, name, "case").unwrap_err();
        assert_eq!(err.to_string(), "--case names `one` twice");
    }

    #[test]
    fn n_labels() {
        assert_eq!(fmt_n(1000), "1e3");
        assert_eq!(fmt_n(1_000_000), "1e6");
        assert_eq!(fmt_n(1500), "1500");
        assert_eq!(fmt_n(100), "100");
    }

    #[test]
    fn names_pick_in_order_and_unknown_ones_are_listed() {
        let all = [1u8, 2, 3];
        let name = |k: u8| ["one", "two", "three"][usize::from(k - 1)];
        assert_eq!(pick(&[], &all, name, "case").unwrap(), vec![1, 2, 3]);
        assert_eq!(
            pick(&["three".into(), "one".into()], &all, name, "case").unwrap(),
            vec![3, 1]
        );
        let err = pick(&["four".into()], &all, name, "case")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "unknown case `four`; expected one of: one, two, three");
    }

    #[test]
    fn median_is_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 4.0);
    }
}
