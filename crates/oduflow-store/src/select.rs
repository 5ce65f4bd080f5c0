//! A selection of clients, the same for `client list` and
//! `GET /api/v1/clients`: by status, blocked reason, target, region, name
//! pattern, and how long the record has stood unchanged. Every field is
//! checked when it is made ([`ClientSelect::with_words`]), so a front end refuses bad input before it
//! reads anything.

use crate::ClientRow;
use oduflow_model::{BlockedReason, ClientStatus, Target};

/// Which clients; every field set must match (an empty selection is every
/// client).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientSelect {
    pub status: Option<ClientStatus>,
    pub blocked_reason: Option<BlockedReason>,
    pub target: Option<Target>,
    /// The spec's region, exactly.
    pub region: Option<String>,
    /// A name pattern: `*` stands for any run of characters, anything else
    /// for itself (see [`ClientSelect::parse_name`]).
    pub name: Option<String>,
    /// Only records unchanged for at least this long (ms): a client
    /// blocked, ready or waiting for that long.
    pub unchanged_ms: Option<i64>,
}

impl ClientSelect {
    /// Whether `c` is selected, at the database's time `now_ms`.
    pub fn matches(&self, c: &ClientRow, now_ms: i64) -> bool {
        let i = &c.infra;
        self.status.is_none_or(|s| i.status == s)
            && self.blocked_reason.is_none_or(|r| i.blocked_reason == Some(r))
            && self.target.is_none_or(|t| i.target == t)
            && self.region.as_ref().is_none_or(|r| i.spec.region == *r)
            && self.name.as_ref().is_none_or(|p| glob(p, &c.name))
            && self.unchanged_ms.is_none_or(|ms| now_ms - i.updated_ms >= ms)
    }

    /// The selection's words that are free text (region, name pattern,
    /// time unchanged), checked, beside the typed ones already set: the
    /// one place `client list` and the API turn them into a selection, so
    /// both refuse the same words with the same text.
    pub fn with_words(
        mut self,
        region: Option<&str>,
        name: Option<&str>,
        unchanged_for: Option<&str>,
    ) -> Result<Self, String> {
        self.region = region.map(Self::parse_region).transpose()?;
        self.name = name.map(Self::parse_name).transpose()?;
        self.unchanged_ms = unchanged_for.map(Self::parse_age).transpose()?;
        Ok(self)
    }

    /// A region id, by the spec's rule ([`oduflow_model::check_region`]).
    fn parse_region(r: &str) -> Result<String, String> {
        oduflow_model::check_region(r).map(|()| r.to_owned()).map_err(|e| e.to_string())
    }

    /// A name pattern: the characters of client names (lowercase letters,
    /// digits, `-`) and `*`, at most 63 of them.
    fn parse_name(p: &str) -> Result<String, String> {
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*';
        if p.is_empty() || p.len() > 63 || !p.chars().all(ok) {
            return Err(format!(
                "name pattern {p:?}: 1 to 63 of a-z, 0-9, '-' and '*' (any run of characters) expected"
            ));
        }
        Ok(p.to_owned())
    }

    /// A duration such as `90s`, `15m`, `2h` or `3d`, in ms: a whole
    /// number, then its unit; at most 365 days.
    fn parse_age(s: &str) -> Result<i64, String> {
        const DAY_MS: i64 = 86_400_000;
        let bad = || format!("duration {s:?}: a whole number and a unit (s, m, h or d), such as 90s or 2h, expected");
        let unit = s.chars().last().ok_or_else(bad)?;
        let n: i64 = s[..s.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
        let ms = match unit {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => DAY_MS,
            _ => return Err(bad()),
        };
        match n.checked_mul(ms) {
            Some(v) if n >= 0 && v <= 365 * DAY_MS => Ok(v),
            _ => Err(format!("duration {s:?}: from 0 to 365 days expected")),
        }
    }
}

/// `*` matches any run of characters (none included); nothing else is
/// special.
pub fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for p in middle {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs() {
        for (p, n, m) in [
            ("acme", "acme", true),
            ("acme", "acme-2", false),
            ("acme*", "acme-2", true),
            ("*-eu", "shop-eu", true),
            ("*-eu", "shop-us", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
            ("*", "anything", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
        ] {
            assert_eq!(glob(p, n), m, "{p} ~ {n}");
        }
    }

    #[test]
    fn ages_and_patterns_are_checked() {
        assert_eq!(ClientSelect::parse_age("90s"), Ok(90_000));
        assert_eq!(ClientSelect::parse_age("2h"), Ok(7_200_000));
        assert_eq!(ClientSelect::parse_age("0d"), Ok(0));
        for bad in ["", "h", "2", "2w", "-1h", "1.5h", "366d", "99999999999999999d", "2é"] {
            assert!(ClientSelect::parse_age(bad).is_err(), "{bad}");
        }
        assert!(ClientSelect::parse_name("shop-*").is_ok());
        assert_eq!(ClientSelect::parse_region("ewr"), Ok("ewr".into()));
        assert!(ClientSelect::parse_region("EWR").is_err() && ClientSelect::parse_region("ewrrr").is_err());
        for bad in ["", "Shop", "a b", "a/b", &"a".repeat(64)] {
            assert!(ClientSelect::parse_name(bad).is_err(), "{bad}");
        }
    }
}
