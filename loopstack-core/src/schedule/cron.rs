//! Cron expressions: which fields a schedule's expression has, and a parse that
//! names the field and value that are wrong (croner reports only that one is).

use super::ScheduleError;

/// A field of a cron expression, as [`ScheduleError::InvalidCronField`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CronField {
    /// The seconds, first of six fields.
    Seconds,
    /// The minute.
    Minute,
    /// The hour.
    Hour,
    /// The day of the month.
    DayOfMonth,
    /// The month.
    Month,
    /// The day of the week (0 and 7 are Sunday).
    DayOfWeek,
}

impl CronField {
    /// The fields of a five-field expression, in order; six fields have
    /// [`CronField::Seconds`] first.
    const FIVE: [Self; 5] = [Self::Minute, Self::Hour, Self::DayOfMonth, Self::Month, Self::DayOfWeek];

    /// Its name, as errors say it: `day of month`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day of month",
            Self::Month => "month",
            Self::DayOfWeek => "day of week",
        }
    }

    /// The numbers it takes, inclusive.
    pub fn range(self) -> (u32, u32) {
        match self {
            Self::Seconds | Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 7),
        }
    }
}

impl std::fmt::Display for CronField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a cron expression as the docs promise: five fields or six (seconds
/// first), or a nickname; never croner's seventh field of years.
pub(super) fn parse_cron(expr: &str) -> Result<croner::Cron, ScheduleError> {
    use croner::parser::{CronParser, Seconds, Year};
    let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
    let invalid = |reason: String| ScheduleError::InvalidCron { expr: expr.to_owned(), reason };
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.first().is_some_and(|f| f.starts_with('@')) {
        return parser.parse(expr).map_err(|_| {
            invalid("unknown nickname: expected @yearly, @annually, @monthly, @weekly, @daily or @hourly".to_owned())
        });
    }
    let names: &[CronField] = match fields.len() {
        5 => &CronField::FIVE,
        6 => &[
            CronField::Seconds,
            CronField::Minute,
            CronField::Hour,
            CronField::DayOfMonth,
            CronField::Month,
            CronField::DayOfWeek,
        ],
        n => {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), not {n}"
            )));
        }
    };
    let error = match parser.parse(expr) {
        Ok(cron) => return Ok(cron),
        Err(e) => e,
    };
    // croner says what is wrong but not where: each field, then each part of its
    // list, is tried alone among `*`s to find the first one it refuses.
    let refuses = |at: usize, value: &str| {
        let probe: Vec<&str> = (0..fields.len()).map(|i| if i == at { value } else { "*" }).collect();
        parser.parse(&probe.join(" ")).is_err()
    };
    for (at, (field, text)) in names.iter().zip(&fields).enumerate() {
        if !refuses(at, text) {
            continue;
        }
        let value = text.split(',').find(|part| refuses(at, part)).unwrap_or(text);
        let (lo, hi) = field.range();
        // The numbers of a value (`5-70/10`: 5 and 70; a step is no value).
        let range = value.split('/').next().unwrap_or(value);
        let out_of_range = range
            .split(['-', '#'])
            .take(if value.contains('#') { 1 } else { 2 })
            .filter_map(|n| n.trim_end_matches(['L', 'W']).parse::<u64>().ok())
            .any(|n| n < u64::from(lo) || n > u64::from(hi));
        let reason =
            if out_of_range { format!("is out of range {lo}-{hi}") } else { format!("does not read ({error})") };
        return Err(ScheduleError::InvalidCronField {
            expr: expr.to_owned(),
            field: *field,
            value: value.to_owned(),
            reason,
        });
    }
    Err(invalid(error.to_string()))
}
