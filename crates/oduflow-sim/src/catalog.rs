//! What the simulated account owns besides instances and blocks — SSH keys,
//! firewall groups, snapshots, VPCs — the marketplace applications, and the
//! validation of a create's server fields against them. The ids
//! are fixed, so tests, the demo and profiles can name them.

use serde_json::{Value, json};

/// The account's SSH keys (id, name).
pub const SSH_KEYS: &[(&str, &str)] =
    &[("3b8066a7-b438-455a-9688-44afc9a3597f", "ops-laptop"), ("5d1a4a0c-3e6f-4f0e-9a57-0f3c2f0b8c11", "deploy-bot")];

/// The account's firewall groups (id, description).
pub const FIREWALL_GROUPS: &[(&str, &str)] = &[("1a2b3c4d-5e6f-4a0b-8c9d-0e1f2a3b4c5d", "web")];

/// The account's snapshots (id, description).
pub const SNAPSHOTS: &[(&str, &str)] = &[("9f0e1d2c-3b4a-4c5d-8e6f-7a8b9c0d1e2f", "golden image 2026-11")];

/// The account's VPCs (id, region).
pub const VPCS: &[(&str, &str)] = &[("6c5b4a39-2817-4f6e-9d5c-4b3a29180f7e", "ewr")];

/// Marketplace applications (app id, image_id, name).
pub const APPS: &[(i64, &str, &str)] = &[(2, "openlitespeed-wordpress", "WordPress"), (37, "docker", "Docker")];

/// Vultr's `os_id` for an instance deployed from a snapshot or an
/// application ("Snapshot" 164 and "Application" 186 in `GET /os`).
pub const OS_SNAPSHOT: i64 = 164;
pub const OS_APPLICATION: i64 = 186;

/// The image fields of a create, validated: exactly one source. Returns
/// `(os_id, app_id, image_id)` as the instance will report them. Messages
/// follow Vultr's where they are known (docs/vultr.md); the others are
/// marked unconfirmed there.
pub(crate) fn image_of(
    obj: &serde_json::Map<String, Value>,
    oses: &[(i64, &str)],
) -> Result<(i64, i64, String), String> {
    let given: Vec<&str> =
        ["os_id", "iso_id", "snapshot_id", "app_id", "image_id"].into_iter().filter(|k| obj.contains_key(*k)).collect();
    match given.as_slice() {
        [] => Err("You must choose an os_id, iso_id, snapshot_id, app_id or image_id.".into()),
        ["os_id"] => match obj["os_id"].as_i64() {
            Some(n) if oses.iter().any(|o| o.0 == n) => Ok((n, 0, String::new())),
            _ => Err("Invalid os_id.".into()),
        },
        ["snapshot_id"] => match obj["snapshot_id"].as_str() {
            Some(s) if SNAPSHOTS.iter().any(|x| x.0 == s) => Ok((OS_SNAPSHOT, 0, String::new())),
            _ => Err("Invalid snapshot_id.".into()),
        },
        ["app_id"] => match obj["app_id"].as_i64().and_then(|n| APPS.iter().find(|a| a.0 == n)) {
            Some(a) => Ok((OS_APPLICATION, a.0, a.1.to_owned())),
            None => Err("Invalid app_id.".into()),
        },
        ["image_id"] => match obj["image_id"].as_str().and_then(|s| APPS.iter().find(|a| a.1 == s)) {
            Some(a) => Ok((OS_APPLICATION, a.0, a.1.to_owned())),
            None => Err("Invalid image_id.".into()),
        },
        ["iso_id"] => Err("Invalid iso_id.".into()),
        _ => Err("Only one of os_id, iso_id, snapshot_id, app_id or image_id may be given.".into()),
    }
}

/// The server fields of a create that must name something that exists, or
/// be well-formed: SSH keys, firewall group, VPCs, user data, backups.
pub(crate) fn check_server_fields(obj: &serde_json::Map<String, Value>, region: &str) -> Result<(), String> {
    use base64::Engine as _;
    if let Some(keys) = obj.get("sshkey_id") {
        let ok = keys.as_array().is_some_and(|a| a.iter().all(|k| k.as_str().is_some_and(|k| has(SSH_KEYS, k))));
        if !ok {
            return Err("Invalid SSH key.".into());
        }
    }
    if let Some(f) = obj.get("firewall_group_id")
        && !f.as_str().is_some_and(|f| f.is_empty() || has(FIREWALL_GROUPS, f))
    {
        return Err("Invalid firewall group.".into());
    }
    if let Some(v) = obj.get("attach_vpc") {
        let in_region = |id: &str| VPCS.iter().any(|x| x.0 == id && x.1 == region);
        if !v.as_array().is_some_and(|a| a.iter().all(|v| v.as_str().is_some_and(in_region))) {
            return Err("Invalid VPC.".into());
        }
    }
    if let Some(u) = obj.get("user_data") {
        let decoded = u.as_str().and_then(|u| base64::engine::general_purpose::STANDARD.decode(u).ok());
        if decoded.is_none() {
            return Err("Invalid user_data: it must be base64 encoded.".into());
        }
    }
    if let Some(b) = obj.get("backups")
        && !matches!(b.as_str(), Some("enabled" | "disabled"))
    {
        return Err("Backups option must be either enabled or disabled.".into());
    }
    for (k, want) in [("enable_ipv6", "a boolean"), ("activation_email", "a boolean")] {
        if obj.get(k).is_some_and(|v| !v.is_boolean()) {
            return Err(format!("{k} must be {want}."));
        }
    }
    Ok(())
}

fn has(table: &[(&str, &str)], id: &str) -> bool {
    table.iter().any(|x| x.0 == id)
}

pub(crate) fn ssh_keys_json() -> Vec<Value> {
    SSH_KEYS
        .iter()
        .map(|(id, name)| {
            json!({ "id": id, "name": name, "ssh_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA sim", "date_created": "2026-01-01T00:00:00+00:00" })
        })
        .collect()
}

pub(crate) fn firewall_groups_json() -> Vec<Value> {
    FIREWALL_GROUPS
        .iter()
        .map(
            |(id, d)| json!({ "id": id, "description": d, "instance_count": 0, "rule_count": 2, "max_rule_count": 50 }),
        )
        .collect()
}

pub(crate) fn snapshots_json() -> Vec<Value> {
    SNAPSHOTS
        .iter()
        .map(|(id, d)| json!({ "id": id, "description": d, "size": 25_000_000_000_i64, "status": "complete", "os_id": 2284, "app_id": 0 }))
        .collect()
}

pub(crate) fn applications_json() -> Vec<Value> {
    APPS.iter()
        .map(|(id, image, name)| {
            json!({ "id": id, "name": name, "short_name": image, "deploy_name": name, "type": "marketplace", "vendor": "vultr", "image_id": image })
        })
        .collect()
}
