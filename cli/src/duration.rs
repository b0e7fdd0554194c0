//! Durations on the command line: a non-negative integer and a unit (`500ms`, `60s`, `1m`), in
//! milliseconds — `consume --window-size`, and the window sizes and grace of
//! `sample windowed-count`. Parsed by `humantime`, which also takes its other integer forms
//! (`1m 30s`, `2min`); fractions (`1.5s`) are refused, as before, and a duration must come to a
//! whole number of milliseconds.

const EXPECTED: &str = "expected a positive integer and a unit (ms, s, m, h or d), like 500ms \
                        or 60s";

/// Parses a duration given as a positive integer and a unit: `ms`, `s`, `m`, `h` or `d`
/// (`500ms`, `60s`, `1m`), or any other form `humantime` reads (`1m 30s`); in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let ms = parse(text)?;
    if ms == 0 {
        return Err(format!("must be positive; {EXPECTED}"));
    }
    Ok(ms)
}

/// [`parse_duration_ms`], also taking zero (`0`, `0s`, `0ms`): for a grace period.
pub fn parse_duration_or_zero_ms(text: &str) -> Result<i64, String> {
    if text == "0" {
        return Ok(0);
    }
    parse(text)
}

fn parse(text: &str) -> Result<i64, String> {
    if text.contains('.') {
        return Err(format!("{EXPECTED} (not a fraction)"));
    }
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => format!("more than {} ms", i64::MAX),
        e => format!("{EXPECTED} ({e})"),
    })?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("not a whole number of milliseconds; {EXPECTED}"));
    }
    i64::try_from(duration.as_millis()).map_err(|_| format!("more than {} ms", i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::{parse_duration_ms, parse_duration_or_zero_ms};

    #[test]
    fn durations_have_a_unit_and_are_positive() {
        for (text, ms) in [
            ("500ms", 500),
            ("60s", 60_000),
            ("1m", 60_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            // humantime's other forms.
            ("1 s", 1_000),
            ("1min", 60_000),
            ("1m 30s", 90_000),
        ] {
            assert_eq!(parse_duration_ms(text), Ok(ms), "{text}");
            assert_eq!(parse_duration_or_zero_ms(text), Ok(ms), "{text}");
        }
        for text in ["", "60", "s", "0s", "-1s", "1.5s", "10us", "1.0005s"] {
            assert!(parse_duration_ms(text).is_err(), "{text}");
        }
        assert!(
            parse_duration_ms("9223372036854775807d")
                .expect_err("overflow")
                .contains("more than")
        );
        assert!(
            parse_duration_ms("106751991167301d")
                .expect_err("overflow")
                .contains("more than")
        );
    }

    #[test]
    fn a_grace_period_may_be_zero() {
        for text in ["0", "0s", "0ms", "0m"] {
            assert_eq!(parse_duration_or_zero_ms(text), Ok(0), "{text}");
        }
        for text in ["", "60", "-1s", "1.5s", "00"] {
            assert!(parse_duration_or_zero_ms(text).is_err(), "{text}");
        }
    }
}
