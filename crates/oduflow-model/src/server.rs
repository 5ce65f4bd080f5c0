//! What makes a VM a usable server: its image source, SSH keys,
//! cloud-init user data, hostname, tags, firewall group, networking and
//! backups. Every field is part of the one create POST (the backup
//! schedule excepted: Vultr sets it with a call of its own, which may be
//! repeated), so the receipt protocol is unchanged and the receipt's spec
//! digest covers them all.
//!
//! [`SpecInput`] is what an operator gives — a profile from the TOML file,
//! CLI flags, an HTTP body — with every field optional; layers merge, and
//! [`SpecInput::resolve`] turns the result into a validated
//! [`crate::ClientSpec`] or a [`SpecError`] that names the field.

use crate::spec::{ClientName, ClientSpec, SpecError};
use serde::{Deserialize, Serialize};

/// Most SSH keys, tags and VPCs one client may name (our limits: Vultr
/// documents none).
pub const SSH_KEYS_MAX: usize = 10;
pub const TAGS_MAX: usize = 32;
pub const TAG_LEN_MAX: usize = 255;
pub const VPCS_MAX: usize = 5;
/// The largest user data accepted, after its variables are substituted and
/// before base64 (our limit; Vultr documents none).
pub const USER_DATA_MAX: usize = 64 * 1024;

/// The variables substituted in user data when a client is created, as
/// `{{oduflow.NAME}}`. The prefix keeps them apart from cloud-init's own
/// Jinja templates (`{{ v1.instance_id }}`), which pass through untouched.
pub const USER_DATA_VARIABLES: [&str; 4] = ["client", "hostname", "region", "plan"];

/// Where the boot disk comes from: exactly one, as Vultr requires.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// An operating system (`GET /os`).
    Os(i64),
    /// One of the account's snapshots (`GET /snapshots`), by id.
    Snapshot(String),
    /// A marketplace application by its numeric id (`GET /applications`).
    App(i64),
    /// A marketplace application by its `image_id` (`GET /applications`).
    Image(String),
}

impl ImageSource {
    /// The create field that carries it.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Os(_) => "os_id",
            Self::Snapshot(_) => "snapshot_id",
            Self::App(_) => "app_id",
            Self::Image(_) => "image_id",
        }
    }

    /// The id as text, for messages and the dashboard.
    pub fn id(&self) -> String {
        match self {
            Self::Os(n) | Self::App(n) => n.to_string(),
            Self::Snapshot(s) | Self::Image(s) => s.clone(),
        }
    }

    pub fn os_id(&self) -> Option<i64> {
        match self {
            Self::Os(n) => Some(*n),
            _ => None,
        }
    }
}

impl std::fmt::Display for ImageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.field(), self.id())
    }
}

/// How often Vultr backs the VM up (`POST /instances/{id}/backup-schedule`).
/// Written `daily:HOUR`, `weekly:DOW:HOUR` (1 = Sunday .. 7), `monthly:DOM:HOUR`
/// (1..=28), `daily_alt_even:HOUR` or `daily_alt_odd:HOUR`; hours are UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BackupSchedule {
    Daily { hour: u8 },
    Weekly { dow: u8, hour: u8 },
    Monthly { dom: u8, hour: u8 },
    DailyAltEven { hour: u8 },
    DailyAltOdd { hour: u8 },
}

impl BackupSchedule {
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        let bad = || SpecError::Backups(s.to_owned());
        let parts: Vec<&str> = s.split(':').collect();
        let num = |p: &str, lo: u8, hi: u8| p.parse::<u8>().ok().filter(|n| (lo..=hi).contains(n)).ok_or_else(bad);
        let hour = |p: &str| num(p, 0, 23);
        match parts.as_slice() {
            ["daily", h] => Ok(Self::Daily { hour: hour(h)? }),
            ["daily_alt_even", h] => Ok(Self::DailyAltEven { hour: hour(h)? }),
            ["daily_alt_odd", h] => Ok(Self::DailyAltOdd { hour: hour(h)? }),
            ["weekly", d, h] => Ok(Self::Weekly { dow: num(d, 1, 7)?, hour: hour(h)? }),
            ["monthly", d, h] => Ok(Self::Monthly { dom: num(d, 1, 28)?, hour: hour(h)? }),
            _ => Err(bad()),
        }
    }

    /// Vultr's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Daily { .. } => "daily",
            Self::Weekly { .. } => "weekly",
            Self::Monthly { .. } => "monthly",
            Self::DailyAltEven { .. } => "daily_alt_even",
            Self::DailyAltOdd { .. } => "daily_alt_odd",
        }
    }

    /// `(hour, dow, dom)`, with the day fields Vultr ignores for the type at 1.
    pub fn fields(&self) -> (u8, u8, u8) {
        match *self {
            Self::Daily { hour } | Self::DailyAltEven { hour } | Self::DailyAltOdd { hour } => (hour, 1, 1),
            Self::Weekly { dow, hour } => (hour, dow, 1),
            Self::Monthly { dom, hour } => (hour, 1, dom),
        }
    }
}

impl std::fmt::Display for BackupSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (hour, dow, dom) = self.fields();
        match self {
            Self::Weekly { .. } => write!(f, "weekly:{dow}:{hour}"),
            Self::Monthly { .. } => write!(f, "monthly:{dom}:{hour}"),
            _ => write!(f, "{}:{hour}", self.kind()),
        }
    }
}

/// The server fields of a client's spec, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerSpec {
    /// The VM's hostname. Empty only in a spec stored before hostnames
    /// existed; the store fills it with the client's name.
    pub hostname: String,
    /// Vultr SSH key ids (`GET /ssh-keys`) installed for root.
    pub ssh_keys: Vec<String>,
    /// cloud-init user data with its variables substituted. Readable through
    /// Vultr's API and from inside the VM: it is no place for secrets.
    pub user_data: Option<String>,
    pub tags: Vec<String>,
    pub firewall_group: Option<String>,
    pub ipv6: bool,
    /// VPC ids (`attach_vpc`; VPC 2.0 is gone).
    pub vpcs: Vec<String>,
    /// `None`: backups disabled.
    pub backups: Option<BackupSchedule>,
}

/// What a ready client's server shows, for operators and identity
/// adapters: its addresses and the volume's guest device id. Never the
/// root password or the console URL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerOutputs {
    pub main_ip: String,
    /// `""` without IPv6.
    pub v6_main_ip: String,
    /// The guest sees the volume as `/dev/disk/by-id/virtio-<mount_id>`.
    pub mount_id: String,
}

/// What an operator gives for a client: every field optional, so a profile,
/// then flags or an HTTP body, can each set some of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecInput {
    pub region: Option<String>,
    pub plan: Option<String>,
    pub os_id: Option<i64>,
    pub snapshot_id: Option<String>,
    pub app_id: Option<i64>,
    pub image_id: Option<String>,
    pub volume_gb: Option<i64>,
    pub volume_type: Option<String>,
    pub ssh_keys: Option<Vec<String>>,
    /// The user data text (a file's contents; the CLI and profiles read it).
    pub user_data: Option<String>,
    pub hostname: Option<String>,
    pub tags: Option<Vec<String>>,
    pub firewall_group: Option<String>,
    pub ipv6: Option<bool>,
    pub vpcs: Option<Vec<String>>,
    /// A schedule (see [`BackupSchedule`]) or `disabled`.
    pub backups: Option<String>,
    /// The DNS record name, relative to `[dns] domain` (default: the
    /// client's name).
    pub dns_name: Option<String>,
}

/// Defaults for what neither a profile nor the request gives.
#[derive(Clone, Debug, Default)]
pub struct SpecDefaults {
    /// The hostname is `<client>.<domain>` when set, else the client's name.
    pub hostname_domain: Option<String>,
}

/// A request named a profile the configuration does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no profile {name:?} (profiles: {})", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
pub struct UnknownProfile {
    pub name: String,
    pub known: Vec<String>,
}

impl SpecInput {
    /// The named profile (none: an empty one) with `over` laid on it: what
    /// `client create` and `POST /api/v1/clients` both resolve.
    pub fn from_profile(
        profiles: &std::collections::BTreeMap<String, SpecInput>,
        profile: Option<&str>,
        over: SpecInput,
    ) -> Result<SpecInput, UnknownProfile> {
        let base = match profile {
            None => SpecInput::default(),
            Some(p) => profiles
                .get(p)
                .cloned()
                .ok_or_else(|| UnknownProfile { name: p.to_owned(), known: profiles.keys().cloned().collect() })?,
        };
        Ok(base.overlay(over))
    }

    /// `self` with every field `over` sets replaced. An image source in
    /// `over` replaces the one here whichever field it uses.
    pub fn overlay(mut self, over: SpecInput) -> SpecInput {
        if over.os_id.is_some() || over.snapshot_id.is_some() || over.app_id.is_some() || over.image_id.is_some() {
            (self.os_id, self.snapshot_id, self.app_id, self.image_id) = (None, None, None, None);
        }
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            region,
            plan,
            os_id,
            snapshot_id,
            app_id,
            image_id,
            volume_gb,
            volume_type,
            ssh_keys,
            user_data,
            hostname,
            tags,
            firewall_group,
            ipv6,
            vpcs,
            backups,
            dns_name
        );
        self
    }

    /// The validated spec for client `name`; user data has its variables
    /// substituted.
    pub fn resolve(&self, name: &ClientName, d: &SpecDefaults) -> Result<ClientSpec, SpecError> {
        let missing = |f: &'static str| SpecError::Missing(f);
        let region = self.region.as_deref().ok_or_else(|| missing("region"))?;
        let plan = self.plan.as_deref().ok_or_else(|| missing("plan"))?;
        let volume_gb = self.volume_gb.ok_or_else(|| missing("volume_gb"))?;
        let volume_type = self.volume_type.as_deref().unwrap_or("high_perf");
        let image = self.image()?;
        let mut spec = ClientSpec::parse(region, plan, image.os_id().unwrap_or(1), volume_gb, volume_type)?;
        spec.image = image;
        let hostname = match (&self.hostname, &d.hostname_domain) {
            (Some(h), _) => h.clone(),
            (None, Some(domain)) => format!("{name}.{}", domain.trim_end_matches('.')),
            (None, None) => name.to_string(),
        };
        check_hostname(&hostname)?;
        let user_data = match &self.user_data {
            None => None,
            Some(t) => Some(render_user_data(t, name, &hostname, &spec)?),
        };
        let backups = match self.backups.as_deref() {
            None | Some("disabled") => None,
            Some(s) => Some(BackupSchedule::parse(s)?),
        };
        spec.server = ServerSpec {
            hostname,
            ssh_keys: self.ssh_keys.clone().unwrap_or_default(),
            user_data,
            tags: self.tags.clone().unwrap_or_default(),
            firewall_group: self.firewall_group.clone(),
            ipv6: self.ipv6.unwrap_or(false),
            vpcs: self.vpcs.clone().unwrap_or_default(),
            backups,
        };
        spec.server.check()?;
        if let Some(d) = &self.dns_name {
            crate::spec::check_dns_name(d)?;
            spec.dns_name = (d != name.as_str()).then(|| d.clone());
        }
        Ok(spec)
    }

    fn image(&self) -> Result<ImageSource, SpecError> {
        let mut given = vec![];
        if let Some(n) = self.os_id {
            given.push(if n > 0 { Ok(ImageSource::Os(n)) } else { Err(SpecError::OsId(n)) });
        }
        if let Some(s) = &self.snapshot_id {
            given.push(check_id("snapshot_id", s).map(|()| ImageSource::Snapshot(s.clone())));
        }
        if let Some(n) = self.app_id {
            given.push(if n > 0 { Ok(ImageSource::App(n)) } else { Err(SpecError::AppId(n)) });
        }
        if let Some(s) = &self.image_id {
            let ok = !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            given.push(if ok { Ok(ImageSource::Image(s.clone())) } else { Err(SpecError::ImageId(s.clone())) });
        }
        match given.len() {
            0 => Err(SpecError::Missing("an image source (os_id, snapshot_id, app_id or image_id)")),
            1 => given.pop().expect("one"),
            _ => Err(SpecError::ImageSources),
        }
    }
}

impl ServerSpec {
    /// The checks [`SpecInput::resolve`] applies, for a spec built otherwise.
    pub fn check(&self) -> Result<(), SpecError> {
        if !self.hostname.is_empty() {
            check_hostname(&self.hostname)?;
        }
        check_list("ssh_keys", &self.ssh_keys, SSH_KEYS_MAX)?;
        for k in &self.ssh_keys {
            check_id("ssh_keys", k)?;
        }
        check_list("tags", &self.tags, TAGS_MAX)?;
        for t in &self.tags {
            if t.is_empty() || t.len() > TAG_LEN_MAX || t.chars().any(char::is_control) {
                return Err(SpecError::Tag(t.clone()));
            }
        }
        if let Some(f) = &self.firewall_group {
            check_id("firewall_group", f)?;
        }
        check_list("vpcs", &self.vpcs, VPCS_MAX)?;
        for v in &self.vpcs {
            check_id("vpcs", v)?;
        }
        if let Some(u) = &self.user_data
            && u.len() > USER_DATA_MAX
        {
            return Err(SpecError::UserDataSize(u.len()));
        }
        Ok(())
    }
}

fn check_list(field: &'static str, items: &[String], max: usize) -> Result<(), SpecError> {
    if items.len() > max {
        return Err(SpecError::TooMany { field, n: items.len(), max });
    }
    let mut seen = std::collections::HashSet::new();
    match items.iter().find(|i| !seen.insert(i.as_str())) {
        Some(dup) => Err(SpecError::Duplicate { field, value: dup.clone() }),
        None => Ok(()),
    }
}

/// Vultr's ids for SSH keys, firewall groups, snapshots and VPCs are UUIDs.
fn check_id(field: &'static str, id: &str) -> Result<(), SpecError> {
    match uuid::Uuid::try_parse(id) {
        Ok(u) if u.hyphenated().to_string() == id => Ok(()),
        _ => Err(SpecError::NotAnId { field, value: id.to_owned() }),
    }
}

/// RFC 1123: at most 253 characters, dot-separated labels of 1..=63
/// lowercase letters, digits and hyphens, no label starting or ending with
/// a hyphen.
fn check_hostname(h: &str) -> Result<(), SpecError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if h.len() > 253 || !h.split('.').all(label_ok) {
        return Err(SpecError::Hostname(h.to_owned()));
    }
    Ok(())
}

/// Substitutes `{{oduflow.NAME}}` for each of [`USER_DATA_VARIABLES`]; any
/// other `{{oduflow.…}}` is an error (a typo would otherwise boot a server
/// with the literal text).
fn render_user_data(text: &str, name: &ClientName, hostname: &str, spec: &ClientSpec) -> Result<String, SpecError> {
    const OPEN: &str = "{{oduflow.";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let end =
            after.find("}}").ok_or_else(|| SpecError::UserDataVariable(format!("{OPEN}{}", first_line(after))))?;
        let value = match &after[..end] {
            "client" => name.as_str(),
            "hostname" => hostname,
            "region" => spec.region.as_str(),
            "plan" => spec.plan.as_str(),
            other => return Err(SpecError::UserDataVariable(format!("{OPEN}{other}}}}}"))),
        };
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if out.len() > USER_DATA_MAX {
        return Err(SpecError::UserDataSize(out.len()));
    }
    Ok(out)
}

fn first_line(s: &str) -> &str {
    let s = s.lines().next().unwrap_or("");
    &s[..s.len().min(40)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3b8066a7-b438-455a-9688-44afc9a3597f";

    fn base() -> SpecInput {
        SpecInput {
            region: Some("ewr".into()),
            plan: Some("vc2-1c-1gb".into()),
            os_id: Some(2284),
            volume_gb: Some(40),
            ..SpecInput::default()
        }
    }

    fn acme() -> ClientName {
        ClientName::parse("acme").unwrap()
    }

    #[test]
    fn a_profile_with_flags_over_it_resolves_every_field() {
        let profile = SpecInput {
            ssh_keys: Some(vec![KEY.into()]),
            tags: Some(vec!["web".into(), "tier 1".into()]),
            ipv6: Some(true),
            backups: Some("weekly:1:3".into()),
            user_data: Some(
                "#cloud-config\nhostname: {{oduflow.hostname}}\n# {{ v1.region }} {{oduflow.client}}".into(),
            ),
            ..base()
        };
        let flags = SpecInput { snapshot_id: Some(KEY.into()), tags: Some(vec!["db".into()]), ..SpecInput::default() };
        let d = SpecDefaults { hostname_domain: Some("example.net.".into()) };
        let s = profile.overlay(flags).resolve(&acme(), &d).unwrap();
        assert_eq!(s.image, ImageSource::Snapshot(KEY.into()), "a flag's image source replaces the profile's");
        assert_eq!(s.server.tags, vec!["db".to_owned()]);
        assert_eq!(s.server.ssh_keys, vec![KEY.to_owned()]);
        assert_eq!(s.server.hostname, "acme.example.net");
        assert!(s.server.ipv6);
        assert_eq!(s.server.backups, Some(BackupSchedule::Weekly { dow: 1, hour: 3 }));
        assert_eq!(
            s.server.user_data.as_deref(),
            Some("#cloud-config\nhostname: acme.example.net\n# {{ v1.region }} acme"),
            "oduflow's variables substituted, cloud-init's own Jinja left alone"
        );
    }

    #[test]
    fn the_hostname_defaults_to_the_clients_name() {
        let s = base().resolve(&acme(), &SpecDefaults::default()).unwrap();
        assert_eq!(s.server.hostname, "acme");
        assert_eq!(s.image, ImageSource::Os(2284));
        assert_eq!(s.server.backups, None);
    }

    #[test]
    fn bad_input_names_its_field() {
        let d = SpecDefaults::default();
        let cases: Vec<(SpecInput, &str)> = vec![
            (SpecInput { snapshot_id: Some(KEY.into()), ..base() }, "exactly one image source"),
            (SpecInput { os_id: None, ..base() }, "image source"),
            (SpecInput { region: None, ..base() }, "region"),
            (SpecInput { ssh_keys: Some(vec!["k1".into()]), ..base() }, "ssh_keys"),
            (SpecInput { ssh_keys: Some(vec![KEY.into(), KEY.into()]), ..base() }, "twice"),
            (SpecInput { firewall_group: Some("fw".into()), ..base() }, "firewall_group"),
            (SpecInput { hostname: Some("Acme".into()), ..base() }, "hostname"),
            (SpecInput { hostname: Some("a..b".into()), ..base() }, "hostname"),
            (SpecInput { tags: Some(vec![String::new()]), ..base() }, "tag"),
            (SpecInput { backups: Some("hourly:3".into()), ..base() }, "backups"),
            (SpecInput { backups: Some("weekly:8:3".into()), ..base() }, "backups"),
            (SpecInput { backups: Some("daily:24".into()), ..base() }, "backups"),
            (SpecInput { user_data: Some("{{oduflow.secret}}".into()), ..base() }, "{{oduflow.secret}}"),
            (SpecInput { user_data: Some("x".repeat(USER_DATA_MAX + 1)), ..base() }, "user data"),
            (SpecInput { image_id: Some("a b".into()), os_id: None, ..base() }, "image_id"),
            (SpecInput { vpcs: Some(vec![KEY.to_uppercase()]), ..base() }, "vpcs"),
        ];
        for (input, want) in cases {
            let e = input.resolve(&acme(), &d).expect_err(want).to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn backup_schedules_read_back_as_written() {
        for s in ["daily:0", "weekly:7:23", "monthly:28:4", "daily_alt_even:5", "daily_alt_odd:6"] {
            assert_eq!(BackupSchedule::parse(s).unwrap().to_string(), s);
        }
    }
}
