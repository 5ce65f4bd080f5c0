//! Epoch milliseconds as people read them: UTC, proleptic Gregorian
//! calendar (Howard Hinnant's days-to-civil algorithm), no clock read.
//! Machine interfaces (`--json`, the API) keep the raw numbers; only text
//! meant for people goes through here.

/// A UTC instant split into its calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Civil {
    /// The calendar fields of `ms` milliseconds after 1970-01-01T00:00:00Z
    /// (before it when negative); the milliseconds are dropped (floor).
    pub fn from_epoch_ms(ms: i64) -> Civil {
        let secs = ms.div_euclid(1000);
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        // Each field is within its calendar range here, so the casts hold.
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month: month as u32,
            day: day as u32,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

/// `2026-12-03T06:30:00Z`: RFC 3339, UTC, whole seconds.
pub fn rfc3339(ms: i64) -> String {
    let c = Civil::from_epoch_ms(ms);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(999), "1970-01-01T00:00:00Z", "milliseconds are dropped");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        // A leap day, and the day after the end of a leap year's February.
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(951_868_800_000), "2000-03-01T00:00:00Z");
        // 2100 is not a leap year: February 28th is followed by March 1st.
        assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_068_508_000), "2026-11-30T19:55:08Z");
        assert_eq!(rfc3339(1_796_279_400_000), "2026-12-03T06:30:00Z");
    }

    /// Every day of 1969..=2401 against a count of days kept by walking
    /// the calendar month by month (leap years by the Gregorian rule).
    #[test]
    fn walks_the_calendar() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let mut days: i64 = -365; // 1969-01-01
        for year in 1969..=2401 {
            for month in 1..=12u32 {
                let len = match month {
                    2 if leap(year) => 29,
                    2 => 28,
                    4 | 6 | 9 | 11 => 30,
                    _ => 31,
                };
                for day in 1..=len {
                    let c = Civil::from_epoch_ms(days * 86_400_000 + 45_296_000);
                    assert_eq!((c.year, c.month, c.day), (year, month, day), "day {days}");
                    assert_eq!((c.hour, c.minute, c.second), (12, 34, 56));
                    days += 1;
                }
            }
        }
    }
}
