//! Durations on the command line: a non-negative integer and a unit (`500ms`, `60s`, `1m`), in
//! milliseconds — `consume --window-size`, and the window sizes and grace of
//! `sample windowed-count`.

const EXPECTED: &str = "expected a positive integer and a unit (ms, s, m, h or d), like 500ms \
                        or 60s";

/// Parses a duration given as a positive integer and a unit: `ms`, `s`, `m`, `h` or `d`
/// (`500ms`, `60s`, `1m`); in milliseconds.
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
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: i64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(EXPECTED.to_owned()),
    };
    let number: i64 = number.parse().map_err(|_| EXPECTED.to_owned())?;
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("more than {} ms", i64::MAX))
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
        ] {
            assert_eq!(parse_duration_ms(text), Ok(ms), "{text}");
            assert_eq!(parse_duration_or_zero_ms(text), Ok(ms), "{text}");
        }
        for text in ["", "60", "s", "0s", "-1s", "1.5s", "1 s", "1min", "10us"] {
            assert!(parse_duration_ms(text).is_err(), "{text}");
        }
        assert!(
            parse_duration_ms("9223372036854775807d")
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
