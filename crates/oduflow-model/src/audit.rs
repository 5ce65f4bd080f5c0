//! The free text an operator's attestation records in the audit trail
//! (`abandon`, `orphan delete`: who checked, and why), checked by one rule
//! for the CLI and the HTTP API.

/// Longest `by`: a name or an address.
pub const BY_LEN_MAX: usize = 100;

/// Longest `reason`.
pub const REASON_LEN_MAX: usize = 1000;

/// `v` trimmed, if it is fit for the audit trail: not empty, at most `max`
/// characters, no control characters (which would garble terminals and logs
/// reading it back). The error names `field`.
pub fn attestation(field: &str, v: &str, max: usize) -> Result<String, String> {
    let t = v.trim();
    if t.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if t.chars().count() > max {
        return Err(format!("{field} is longer than {max} characters"));
    }
    if t.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attestations() {
        assert_eq!(attestation("by", "  alice ", BY_LEN_MAX).as_deref(), Ok("alice"));
        assert!(attestation("by", "", BY_LEN_MAX).unwrap_err().contains("by must not be empty"));
        assert!(attestation("by", " \t\n ", BY_LEN_MAX).is_err());
        assert!(attestation("reason", "a\u{1b}[2Jb", REASON_LEN_MAX).unwrap_err().contains("control"));
        assert!(attestation("by", &"x".repeat(BY_LEN_MAX + 1), BY_LEN_MAX).unwrap_err().contains("longer"));
        assert!(attestation("by", &"é".repeat(BY_LEN_MAX), BY_LEN_MAX).is_ok(), "characters, not bytes");
    }
}
