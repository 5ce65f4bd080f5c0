//! Changing a client's spec: what `client update` may change in
//! place, and the one-line refusal for what Vultr cannot do in place.
//!
//! A running VM can move to a larger plan and change its tags and firewall
//! group (PATCH /instances/{id}); a volume can grow (PATCH /blocks/{id}).
//! Vultr cannot move a VM to another region, shrink a plan or a volume, or
//! change the image without a reinstall, which wipes the disk and is out of
//! scope. Before anything was created (a client blocked `create_rejected`
//! or `preflight_failed`, say), every field may be corrected: the next
//! dispatch sends the corrected spec.
//!
//! Pure: the store applies it inside the transaction that bumps the
//! generation and enqueues the job.

use crate::{ClientSpec, ImageSource, SpecError};
use serde::{Deserialize, Serialize};

/// The fields `client update` and `PATCH /api/v1/clients/{name}` take. A
/// field left out keeps its value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_gb: Option<i64>,
    /// The whole list (Vultr's PATCH replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// `""` detaches the firewall group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_group: Option<String>,
    /// The client's DNS record name (relative to `[dns] domain`); `""`: back
    /// to the client's name. Renames the records in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
    /// Another image source: always refused (a reinstall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSource>,
}

/// Why an update is refused, in one line an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRefused {
    #[error(
        "nothing to change: give at least one of --region, --plan, --volume-gb, --tag, --firewall-group, --dns-name"
    )]
    Empty,
    #[error("{0}")]
    Invalid(#[from] SpecError),
    #[error(
        "region {from} -> {to}: Vultr cannot move a server to another region; create a new client in {to} \
         and move the data"
    )]
    Region { from: String, to: String },
    #[error(
        "volume {from} GB -> {to} GB: Vultr volumes only grow; create a new client with the smaller volume \
         and move the data"
    )]
    VolumeShrink { from: i64, to: i64 },
    #[error("the spec already says so: nothing would change")]
    Unchanged,
    #[error(
        "{0}: changing the image means a reinstall, which wipes the server's disk; oduflow does not do that \
         (out of scope): create a new client with that image and move the data"
    )]
    Image(String),
}

impl SpecUpdate {
    /// The spec after the update, or why it is refused. `created`: the
    /// client may own a server or volume already (an open receipt), so only
    /// in-place changes are allowed. A plan downgrade is refused by the
    /// engine, which reads Vultr's list of upgrades before sending.
    pub fn apply(&self, spec: &ClientSpec, created: bool) -> Result<ClientSpec, UpdateRefused> {
        self.apply_to(spec, created, None)
    }

    /// As [`SpecUpdate::apply`], knowing the size the volume really has
    /// (`volume_has`, its last read): after a grow Vultr refused, the spec
    /// says more than the volume has, and going back to the size it has
    /// (or any size from there up) is no shrink.
    pub fn apply_to(
        &self,
        spec: &ClientSpec,
        created: bool,
        volume_has: Option<i64>,
    ) -> Result<ClientSpec, UpdateRefused> {
        if *self == Self::default() {
            return Err(UpdateRefused::Empty);
        }
        if let Some(image) = &self.image {
            return Err(UpdateRefused::Image(image.to_string()));
        }
        let mut next = spec.clone();
        if let Some(r) = &self.region {
            if created && *r != spec.region {
                return Err(UpdateRefused::Region { from: spec.region.clone(), to: r.clone() });
            }
            next.region = r.clone();
        }
        if let Some(p) = &self.plan {
            next.plan = p.clone();
        }
        if let Some(gb) = self.volume_gb {
            let floor = volume_has.map_or(spec.volume_gb, |has| has.min(spec.volume_gb));
            if created && gb < floor {
                return Err(UpdateRefused::VolumeShrink { from: floor, to: gb });
            }
            next.volume_gb = gb;
        }
        if let Some(t) = &self.tags {
            next.server.tags = t.clone();
        }
        if let Some(f) = &self.firewall_group {
            next.server.firewall_group = (!f.is_empty()).then(|| f.clone());
        }
        if let Some(d) = &self.dns_name {
            if !d.is_empty() {
                crate::spec::check_dns_name(d)?;
            }
            next.dns_name = (!d.is_empty()).then(|| d.clone());
        }
        // The same checks as a create's, through the same constructors.
        let image_os = next.image.os_id().unwrap_or(1);
        ClientSpec::parse(&next.region, &next.plan, image_os, next.volume_gb, next.volume_type.as_str())?;
        next.server.check()?;
        if next == *spec {
            return Err(UpdateRefused::Unchanged);
        }
        Ok(next)
    }
}

/// One field an update changes, and what the change does at Vultr (for a
/// dry run: `client update --dry-run`, `PATCH ...?dry_run=true`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    pub field: &'static str,
    pub from: String,
    pub to: String,
    pub effect: &'static str,
}

/// The fields `to` changes in `from`, each with its effect. `created`: the
/// client may own a server or volume already, so each change goes out as a
/// PATCH; before that, the next create sends the whole spec.
pub fn changes(from: &ClientSpec, to: &ClientSpec, created: bool) -> Vec<FieldChange> {
    let none = || "-".to_owned();
    let tags = |t: &[String]| if t.is_empty() { none() } else { t.join(",") };
    let fields: [(&'static str, String, String, &'static str); 6] = [
        ("region", from.region.clone(), to.region.clone(), "cannot change in place"),
        (
            "plan",
            from.plan.clone(),
            to.plan.clone(),
            "PATCH /instances/{id}, sent only if Vultr lists the plan among the server's upgrades; the server \
             reboots to resize",
        ),
        (
            "volume_gb",
            from.volume_gb.to_string(),
            to.volume_gb.to_string(),
            "PATCH /blocks/{id}: the volume grows, at most one resize per resize interval (61 s by default); the \
             filesystem inside grows by `resize_command` when one is set",
        ),
        ("tags", tags(&from.server.tags), tags(&to.server.tags), "PATCH /instances/{id}; no reboot"),
        (
            "firewall_group",
            from.server.firewall_group.clone().unwrap_or_else(none),
            to.server.firewall_group.clone().unwrap_or_else(none),
            "PATCH /instances/{id}; no reboot; the server's traffic follows the new group at once",
        ),
        (
            "dns_name",
            from.dns_name.clone().unwrap_or_else(|| "(the client's name)".into()),
            to.dns_name.clone().unwrap_or_else(|| "(the client's name)".into()),
            "the client's DNS records are renamed",
        ),
    ];
    fields
        .into_iter()
        .filter(|(_, a, b, _)| a != b)
        .map(|(field, from, to, effect)| FieldChange {
            field,
            from,
            to,
            effect: if created || field == "dns_name" {
                effect
            } else {
                "sent with the next create: nothing exists yet"
            },
        })
        .collect()
}

/// The update that takes a client from `current` to `desired` (a whole
/// spec, as a declarative call states it): the fields that differ, among
/// those an update may change; empty when nothing does. A difference in a
/// field no update changes (the volume's type, SSH keys, user data, the
/// hostname, IPv6, VPCs, backups) is refused, naming it.
pub fn desired_update(name: &str, current: &ClientSpec, desired: &ClientSpec) -> Result<SpecUpdate, String> {
    let (c, d) = (&current.server, &desired.server);
    let host = |h: &str| if h.is_empty() { name.to_owned() } else { h.to_owned() };
    let fixed = [
        ("volume_type", current.volume_type != desired.volume_type),
        ("ssh_keys", c.ssh_keys != d.ssh_keys),
        ("user_data", c.user_data != d.user_data),
        ("hostname", host(&c.hostname) != host(&d.hostname)),
        ("ipv6", c.ipv6 != d.ipv6),
        ("vpcs", c.vpcs != d.vpcs),
        ("backups", c.backups != d.backups),
    ];
    if let Some((field, _)) = fixed.iter().find(|(_, differs)| *differs) {
        return Err(format!(
            "{field} differs from the client's, and no update changes it in place: delete the client and \
             create it with the new {field}"
        ));
    }
    Ok(SpecUpdate {
        region: (current.region != desired.region).then(|| desired.region.clone()),
        plan: (current.plan != desired.plan).then(|| desired.plan.clone()),
        volume_gb: (current.volume_gb != desired.volume_gb).then_some(desired.volume_gb),
        tags: (c.tags != d.tags).then(|| d.tags.clone()),
        firewall_group: (c.firewall_group != d.firewall_group).then(|| d.firewall_group.clone().unwrap_or_default()),
        dns_name: (current.dns_name != desired.dns_name).then(|| desired.dns_name.clone().unwrap_or_default()),
        image: (current.image != desired.image).then(|| desired.image.clone()),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_desired_spec_becomes_the_update_of_what_differs() {
        let current = crate::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        assert_eq!(super::desired_update("acme", &current, &current), Ok(super::SpecUpdate::default()));
        let mut desired = current.clone();
        desired.plan = "vc2-2c-4gb".into();
        desired.volume_gb = 80;
        desired.server.tags = vec!["web".into()];
        let u = super::desired_update("acme", &current, &desired).unwrap();
        assert_eq!(
            (u.plan.as_deref(), u.volume_gb, u.tags.as_deref()),
            (Some("vc2-2c-4gb"), Some(80), Some(&["web".to_owned()][..]))
        );
        assert_eq!((u.region, u.image, u.firewall_group, u.dns_name), (None, None, None, None));
        let mut named = current.clone();
        named.server.hostname = "acme".into();
        assert_eq!(
            super::desired_update("acme", &current, &named),
            Ok(super::SpecUpdate::default()),
            "the name is the default hostname"
        );
        desired.server.ssh_keys = vec!["k".into()];
        assert!(super::desired_update("acme", &current, &desired).unwrap_err().starts_with("ssh_keys differs"));
    }

    use super::*;

    fn spec() -> ClientSpec {
        let mut s = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        s.server.hostname = "acme".into();
        s
    }

    #[test]
    fn in_place_changes_apply() {
        let u = SpecUpdate {
            plan: Some("vc2-2c-4gb".into()),
            volume_gb: Some(80),
            tags: Some(vec!["a".into()]),
            firewall_group: Some("3b8066a7-b438-455a-9688-44afc9a3597f".into()),
            ..SpecUpdate::default()
        };
        let next = u.apply(&spec(), true).unwrap();
        assert_eq!((next.plan.as_str(), next.volume_gb), ("vc2-2c-4gb", 80));
        assert_eq!(next.server.tags, vec!["a".to_owned()]);
        assert!(next.server.firewall_group.is_some());
        let detach = SpecUpdate { firewall_group: Some(String::new()), ..SpecUpdate::default() };
        assert_eq!(detach.apply(&next, true).unwrap().server.firewall_group, None);
    }

    #[test]
    fn what_vultr_cannot_do_in_place_is_refused_once_created() {
        let region = SpecUpdate { region: Some("ams".into()), ..SpecUpdate::default() };
        assert!(matches!(region.apply(&spec(), true), Err(UpdateRefused::Region { .. })));
        // Before anything exists, a region can be corrected.
        assert_eq!(region.apply(&spec(), false).unwrap().region, "ams");
        let shrink = SpecUpdate { volume_gb: Some(20), ..SpecUpdate::default() };
        let e = shrink.apply(&spec(), true).unwrap_err();
        assert!(e.to_string().contains("only grow"), "{e}");
        assert_eq!(SpecUpdate::default().apply(&spec(), true), Err(UpdateRefused::Empty));
        let image = SpecUpdate { image: Some(ImageSource::Os(2136)), ..SpecUpdate::default() };
        let e = image.apply(&spec(), false).unwrap_err();
        assert!(e.to_string().contains("reinstall") && e.to_string().contains("out of scope"), "{e}");
        let same = SpecUpdate { plan: Some("vc2-1c-1gb".into()), ..SpecUpdate::default() };
        assert_eq!(same.apply(&spec(), true), Err(UpdateRefused::Unchanged));
    }

    #[test]
    fn bad_values_are_refused_with_the_create_checks() {
        let plan = SpecUpdate { plan: Some("VC2".into()), ..SpecUpdate::default() };
        assert!(matches!(plan.apply(&spec(), true), Err(UpdateRefused::Invalid(SpecError::Plan(_)))));
        let big = SpecUpdate { volume_gb: Some(10_001), ..SpecUpdate::default() };
        assert!(matches!(big.apply(&spec(), true), Err(UpdateRefused::Invalid(SpecError::VolumeSize { .. }))));
        let fw = SpecUpdate { firewall_group: Some("nope".into()), ..SpecUpdate::default() };
        assert!(matches!(fw.apply(&spec(), true), Err(UpdateRefused::Invalid(SpecError::NotAnId { .. }))));
        let dns = SpecUpdate { dns_name: Some("Mail".into()), ..SpecUpdate::default() };
        assert!(matches!(dns.apply(&spec(), true), Err(UpdateRefused::Invalid(SpecError::DnsName(_)))));
        let dns = SpecUpdate { dns_name: Some("mail.eu".into()), ..SpecUpdate::default() };
        assert_eq!(dns.apply(&spec(), true).unwrap().dns_name.as_deref(), Some("mail.eu"));
        let tag = SpecUpdate { tags: Some(vec![String::new()]), ..SpecUpdate::default() };
        assert!(matches!(tag.apply(&spec(), true), Err(UpdateRefused::Invalid(SpecError::Tag(_)))));
    }
}
