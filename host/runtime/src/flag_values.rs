//! Parsers for flag values, one per kind of value, shared by every flag of that kind and by both
//! ways to give it: clap runs them on the command line, and the config file's `[serve]` table is
//! parsed by the same flag definitions, so a value is checked once, the same way, at start and on
//! a reload. A value that parses as a number but makes no sense for its flag — NaN, an infinity,
//! a negative rate, a zero timeout or size — is refused here rather than read as "no limit".
//!
//! Their errors never repeat the value: in a config file it may be a secret on the wrong line.

/// A duration in whole milliseconds of at least 1: a timeout, a deadline, an interval. Zero is
/// refused rather than read as "no timeout" (the flags whose 0 means "never" do not use this).
pub fn at_least_one_ms(text: &str) -> Result<u64, String> {
    let ms: u64 = whole_number(text, "milliseconds")?;
    if ms == 0 {
        return Err("must be at least 1 ms: a zero timeout is refused, not read as no timeout".into());
    }
    Ok(ms)
}

/// A count or a size of at least 1: a cap whose 0 would refuse everything or be read as "no
/// limit" (the flags whose 0 means "no limit" do not use this).
pub fn at_least_one(text: &str) -> Result<usize, String> {
    let n: usize = whole_number(text, "a count")?;
    if n == 0 {
        return Err("must be at least 1: a zero limit is refused, not read as no limit".into());
    }
    Ok(n)
}

/// A rate per second: a finite number above 0 (not NaN, not an infinity, not negative).
pub fn positive_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| "is not a number: write a rate per second such as 20 or 2.5".to_string())?;
    if !rate.is_finite() {
        return Err("must be a finite number: NaN and infinities are refused".into());
    }
    if rate <= 0.0 {
        return Err("must be above 0".into());
    }
    Ok(rate)
}

/// A whole non-negative number; `what` names its unit for the error.
fn whole_number<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("is not a whole number ({what}): write digits only, such as 1000"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_nans_infinities_and_negatives_are_refused() {
        assert_eq!(at_least_one_ms("250"), Ok(250));
        assert_eq!(at_least_one("1"), Ok(1));
        assert_eq!(positive_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "1.5", "nan", "", "sk-secret"] {
            assert!(at_least_one_ms(bad).is_err(), "{bad:?}");
            assert!(at_least_one(bad).is_err(), "{bad:?}");
        }
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "0", "-2", "1e400", "sk-secret"] {
            assert!(positive_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn errors_never_repeat_the_value() {
        let secret = "sk-live-9f8e7d6c";
        for e in [
            at_least_one_ms(secret).unwrap_err(),
            at_least_one(secret).unwrap_err(),
            positive_rate(secret).unwrap_err(),
        ] {
            assert!(!e.contains(secret), "{e}");
        }
    }
}
