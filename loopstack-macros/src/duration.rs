//! The duration rule of `after = ".."`: `<integer><unit>` pairs, as in `"48h"`,
//! `"1h30m"`, `"90s"` or `"500ms"`.

/// The units, largest first, with their length in milliseconds.
const UNITS: [(&str, u64); 5] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)];

const FORM: &str = "write `<integer><unit>` pairs such as `\"48h\"`, `\"1h30m\"` or `\"500ms\"` (units `ms`, `s`, `m`, \
                    `h`, `d`)";

/// The duration `text` stands for, in milliseconds, or why it is not one. Units go from
/// largest to smallest, each at most once (`"1h30m"`, not `"30m1h"`), without spaces;
/// the total is more than zero and fits in a `u64` of milliseconds.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Err(format!("`after` is empty; {FORM}"));
    }
    let not_a_duration = |why: String| format!("`after = \"{text}\"` is not a duration: {why}; {FORM}");
    let too_long = || format!("`after = \"{text}\"` is too long: the most is `u64::MAX` milliseconds");
    let mut rest = text;
    let mut total: u64 = 0;
    // The index in `UNITS` of the last unit seen.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let letters_at = &rest[digits..];
        let letters = letters_at.len() - letters_at.trim_start_matches(char::is_alphabetic).len();
        let (number, unit) = (&rest[..digits], &letters_at[..letters]);
        if number.is_empty() {
            return Err(match rest.chars().next() {
                Some(c) if c.is_alphabetic() => not_a_duration(format!("`{unit}` has no number before it")),
                Some(c) => not_a_duration(format!("unexpected `{c}`")),
                None => unreachable!("the loop runs while text is left"),
            });
        }
        if unit.is_empty() {
            return Err(match letters_at.chars().next() {
                None => not_a_duration(format!("`{number}` has no unit")),
                Some(c) => not_a_duration(format!("unexpected `{c}` after `{number}`")),
            });
        }
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(format!(
                "unknown unit `{unit}` in `after = \"{text}\"`; the units are `ms`, `s`, `m`, `h` and `d`"
            ));
        };
        if last.is_some_and(|l| l >= index) {
            return Err(format!(
                "`after = \"{text}\"`: units go from largest to smallest, each once, as in `\"1h30m\"`"
            ));
        }
        last = Some(index);
        let n: u64 = number.parse().map_err(|_| too_long())?;
        total = n.checked_mul(UNITS[index].1).and_then(|ms| total.checked_add(ms)).ok_or_else(too_long)?;
        rest = &letters_at[letters..];
    }
    if total == 0 {
        return Err(format!(
            "`after = \"{text}\"` is zero; a timer transition waits for a positive duration (one that fires at once \
             needs no `after`)"
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, ms) in [
            ("48h", 48 * 3_600_000),
            ("1h30m", 90 * 60_000),
            ("90s", 90_000),
            ("500ms", 500),
            ("2d", 2 * 86_400_000),
            ("1d2h3m4s5ms", 86_400_000 + 2 * 3_600_000 + 3 * 60_000 + 4000 + 5),
            ("90m", 90 * 60_000),
            ("1h0m", 3_600_000),
            ("0001s", 1000),
            ("18446744073709551615ms", u64::MAX),
        ] {
            assert_eq!(parse_millis(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn mistakes() {
        let err = |text: &str| parse_millis(text).unwrap_err();
        assert!(err("").starts_with("`after` is empty;"));
        for (text, why) in [
            ("48", "`48` has no unit"),
            ("h", "`h` has no number before it"),
            ("1h30", "`30` has no unit"),
            ("1.5h", "unexpected `.` after `1`"),
            (" 48h", "unexpected ` `"),
            ("1h 30m", "unexpected ` `"),
            ("-1h", "unexpected `-`"),
            ("48h!", "unexpected `!`"),
        ] {
            let e = err(text);
            assert!(e.starts_with(&format!("`after = \"{text}\"` is not a duration: {why}; write")), "{e}");
        }
        assert_eq!(err("2w"), "unknown unit `w` in `after = \"2w\"`; the units are `ms`, `s`, `m`, `h` and `d`");
        assert!(err("1H").starts_with("unknown unit `H`"));
        assert!(err("5min").starts_with("unknown unit `min`"));
        assert!(err("30m1h").contains("units go from largest to smallest"));
        assert!(err("1h1h").contains("units go from largest to smallest"));
        assert!(err("0s").contains("is zero"));
        assert!(err("0h0m").contains("is zero"));
        assert!(err("18446744073709551616ms").contains("is too long"));
        assert!(err("18446744073709551615ms1").contains("has no unit"));
        assert!(err("213503982335d").contains("is too long"));
        assert!(err("18446744073709551615s").contains("is too long"));
    }
}
