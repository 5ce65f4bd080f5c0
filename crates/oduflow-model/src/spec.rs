//! A client's name and desired spec, validated before anything is stored or
//! sent. Validation is the first line of "bad input changes nothing": every
//! entry point (CLI, HTTP) parses through these constructors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Client names become Vultr labels and DNS host labels, so they follow the
/// stricter of the two: RFC 1123 host label rules (lowercase letters, digits and
/// hyphens, starting with a letter, not ending with a hyphen), at most
/// `CLIENT_NAME_LEN_MAX` characters.
pub const CLIENT_NAME_LEN_MAX: usize = 63;

/// Vultr's block storage sizes by type (docs/vultr.md §3).
pub const HIGH_PERF_GB: (i64, i64) = (10, 10_000);
pub const STORAGE_OPT_GB: (i64, i64) = (40, 40_000);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("client name must not be empty")]
    NameEmpty,
    #[error("client name is {0} characters long; at most {CLIENT_NAME_LEN_MAX} are allowed")]
    NameTooLong(usize),
    #[error(
        "client name {0:?} is not a valid label: use lowercase letters, digits and hyphens, \
         start with a letter and do not end with a hyphen"
    )]
    NameInvalid(String),
    #[error("region {0:?} is not a Vultr region id (three or four lowercase letters, e.g. ewr)")]
    Region(String),
    #[error("plan {0:?} is not a Vultr plan id (lowercase letters, digits and hyphens, e.g. vc2-1c-1gb)")]
    Plan(String),
    #[error("os id must be a positive integer, got {0}")]
    OsId(i64),
    #[error("volume size {gb} GB is outside {min}..={max} GB allowed for {kind}")]
    VolumeSize { gb: i64, min: i64, max: i64, kind: &'static str },
    #[error("volume type {0:?} is not one of high_perf, storage_opt")]
    VolumeType(String),
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("give exactly one image source: os_id, snapshot_id, app_id or image_id")]
    ImageSources,
    #[error("app id must be a positive integer, got {0}")]
    AppId(i64),
    #[error(
        "image_id {0:?} is not a Vultr application image id (letters, digits and hyphens, e.g. openlitespeed-wordpress)"
    )]
    ImageId(String),
    #[error("{field} {value:?} is not a Vultr id (a lowercase UUID, e.g. 3b8066a7-b438-455a-9688-44afc9a3597f)")]
    NotAnId { field: &'static str, value: String },
    #[error("{field}: {n} given, at most {max} allowed")]
    TooMany { field: &'static str, n: usize, max: usize },
    #[error("{field}: {value:?} is given twice")]
    Duplicate { field: &'static str, value: String },
    #[error(
        "hostname {0:?} is not valid: at most 253 characters, dot-separated labels of lowercase letters, digits \
         and hyphens, none starting or ending with a hyphen"
    )]
    Hostname(String),
    #[error("tag {0:?} is not valid: 1 to 255 characters, no control characters")]
    Tag(String),
    #[error(
        "backups {0:?} is not a schedule: daily:HOUR, weekly:DOW:HOUR (1 = Sunday), monthly:DOM:HOUR (1-28), \
         daily_alt_even:HOUR, daily_alt_odd:HOUR (hours 0-23 UTC), or disabled"
    )]
    Backups(String),
    #[error(
        "DNS name {0:?} is not valid: dot-separated labels of lowercase letters, digits and hyphens, each \
         starting with a letter, relative to the DNS domain (mail, vpn.eu)"
    )]
    DnsName(String),
    #[error("user data is {0} bytes; at most {max} are allowed", max = crate::server::USER_DATA_MAX)]
    UserDataSize(usize),
    #[error("user data names {0}: the variables are client, hostname, region and plan, as {{{{oduflow.client}}}}")]
    UserDataVariable(String),
}

/// A validated client name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClientName(String);

impl ClientName {
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        if s.is_empty() {
            return Err(SpecError::NameEmpty);
        }
        let len = s.chars().count();
        if len > CLIENT_NAME_LEN_MAX {
            return Err(SpecError::NameTooLong(len));
        }
        let bytes = s.as_bytes();
        let ok_chars = bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        if !ok_chars || !bytes[0].is_ascii_lowercase() || bytes[bytes.len() - 1] == b'-' {
            return Err(SpecError::NameInvalid(s.to_owned()));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ClientName {
    type Error = SpecError;
    fn try_from(s: String) -> Result<Self, SpecError> {
        Self::parse(&s)
    }
}

impl From<ClientName> for String {
    fn from(n: ClientName) -> String {
        n.0
    }
}

impl fmt::Display for ClientName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeType {
    HighPerf,
    StorageOpt,
}

impl VolumeType {
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        match s {
            "high_perf" => Ok(Self::HighPerf),
            "storage_opt" => Ok(Self::StorageOpt),
            _ => Err(SpecError::VolumeType(s.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HighPerf => "high_perf",
            Self::StorageOpt => "storage_opt",
        }
    }

    pub fn size_range_gb(self) -> (i64, i64) {
        match self {
            Self::HighPerf => HIGH_PERF_GB,
            Self::StorageOpt => STORAGE_OPT_GB,
        }
    }
}

/// What a client's infrastructure should look like.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSpec {
    pub region: String,
    pub plan: String,
    pub image: crate::server::ImageSource,
    pub volume_gb: i64,
    pub volume_type: VolumeType,
    /// Hostname, SSH keys, user data and the other server fields.
    #[serde(default)]
    pub server: crate::server::ServerSpec,
    /// The name of the client's DNS records in `[dns] domain` (relative:
    /// `mail`, `vpn.eu`); `None`: the client's name. Changeable at any time
    /// (`client update --dns-name`): the records are renamed in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

/// A DNS record name relative to its zone: dot-separated host labels (the
/// client-name rules for each), at most 253 characters in all.
pub fn check_dns_name(name: &str) -> Result<(), SpecError> {
    let ok = !name.is_empty() && name.len() <= 253 && name.split('.').all(|l| ClientName::parse(l).is_ok());
    if ok { Ok(()) } else { Err(SpecError::DnsName(name.to_owned())) }
}

/// A Vultr region id: three or four lowercase letters.
pub fn check_region(region: &str) -> Result<(), SpecError> {
    let ok = (3..=4).contains(&region.len()) && region.bytes().all(|b| b.is_ascii_lowercase());
    if ok { Ok(()) } else { Err(SpecError::Region(region.to_owned())) }
}

impl ClientSpec {
    /// The spec with an OS image and no server fields (their defaults);
    /// [`crate::server::SpecInput::resolve`] builds the full one.
    pub fn parse(region: &str, plan: &str, os_id: i64, volume_gb: i64, volume_type: &str) -> Result<Self, SpecError> {
        check_region(region)?;
        let plan_ok = !plan.is_empty()
            && plan.len() <= 64
            && plan.as_bytes()[0].is_ascii_lowercase()
            && plan.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plan_ok {
            return Err(SpecError::Plan(plan.to_owned()));
        }
        if os_id <= 0 {
            return Err(SpecError::OsId(os_id));
        }
        let volume_type = VolumeType::parse(volume_type)?;
        let (min, max) = volume_type.size_range_gb();
        if !(min..=max).contains(&volume_gb) {
            return Err(SpecError::VolumeSize { gb: volume_gb, min, max, kind: volume_type.as_str() });
        }
        Ok(Self {
            region: region.to_owned(),
            plan: plan.to_owned(),
            image: crate::server::ImageSource::Os(os_id),
            volume_gb,
            volume_type,
            server: crate::server::ServerSpec::default(),
            dns_name: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(ClientName::parse("acme-1").is_ok());
        assert_eq!(ClientName::parse(""), Err(SpecError::NameEmpty));
        assert_eq!(ClientName::parse(&"a".repeat(64)), Err(SpecError::NameTooLong(64)));
        assert!(ClientName::parse(&"a".repeat(63)).is_ok());
        for bad in ["Acme", "1acme", "acme-", "ac me", "acme_1", "acmé", "-a"] {
            assert!(matches!(ClientName::parse(bad), Err(SpecError::NameInvalid(_))), "{bad}");
        }
    }

    #[test]
    fn specs() {
        assert!(ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").is_ok());
        assert!(matches!(ClientSpec::parse("EWR", "vc2", 1, 40, "high_perf"), Err(SpecError::Region(_))));
        assert!(matches!(ClientSpec::parse("us-east", "vc2", 1, 40, "high_perf"), Err(SpecError::Region(_))));
        assert!(matches!(ClientSpec::parse("ewr", "", 1, 40, "high_perf"), Err(SpecError::Plan(_))));
        assert!(matches!(ClientSpec::parse("ewr", "vc2", 0, 40, "high_perf"), Err(SpecError::OsId(0))));
        assert!(matches!(ClientSpec::parse("ewr", "vc2", 1, 9, "high_perf"), Err(SpecError::VolumeSize { .. })));
        assert!(matches!(ClientSpec::parse("ewr", "vc2", 1, 10, "storage_opt"), Err(SpecError::VolumeSize { .. })));
        assert!(matches!(ClientSpec::parse("ewr", "vc2", 1, 40, "ssd"), Err(SpecError::VolumeType(_))));
    }
}
