//! For a blocked client, the exact `oduflow` commands that resolve it, with
//! when each applies. The dashboard and `GET /api/v1/interventions` show the
//! same list, so an operator never has to work out the command from the
//! reason code.

use oduflow_model::ledger::Effect;
use oduflow_model::{BlockedReason, ResourceKind};
use oduflow_store::{ClientRow, ReceiptRow};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Resolution {
    /// The command to run, with placeholders in capitals (WHO, WHY).
    pub command: String,
    /// When this command is the right one.
    pub when: String,
}

/// The kind the block is about: named first in the engine's evidence text
/// ("vm create outcome unknown ..."), else the current dispatch whose
/// outcome is unknown.
fn blocked_kind(c: &ClientRow, receipts: &[ReceiptRow]) -> ResourceKind {
    let named =
        c.infra.blocked_detail.as_deref().and_then(|d| d.split_whitespace().next()).and_then(ResourceKind::parse);
    named.unwrap_or_else(|| {
        receipts
            .iter()
            .find(|r| {
                r.dispatch_generation == c.infra.dispatch_generation(r.resource_kind)
                    && matches!(r.effect(), Effect::Unmarked { .. } | Effect::NotSent { .. } | Effect::Unknown { .. })
            })
            .map_or(ResourceKind::Vm, |r| r.resource_kind)
    })
}

/// The ways out of `labelled_orphan`: for each orphan its evidence names,
/// adopt it (while the client is wanted) or delete it; or a reconcile once
/// the inventory no longer lists it.
fn labelled_orphan_resolutions(c: &ClientRow, n: &str) -> Vec<Resolution> {
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let ids = c.infra.blocked_detail.as_deref().map(orphan_ids).unwrap_or_default();
    let ids = if ids.is_empty() { vec!["ID".to_owned()] } else { ids };
    let mut out = vec![];
    for id in &ids {
        if c.infra.target == oduflow_model::Target::Present {
            out.push(r(
                format!("oduflow orphan adopt {id}"),
                "if it is this client's after all (its label names it): verified against the spec, then \
                 recorded; the create is never sent",
            ));
        }
        out.push(r(
            format!("oduflow orphan delete {id} --by WHO --reason WHY"),
            "if it should not live (a wrong region or size; a leftover of the discarded timeline): deleted and \
             confirmed by a 404, and the client runs again",
        ));
    }
    out.push(r(
        format!("oduflow reconcile {n}"),
        "once `oduflow reconcile --all` no longer lists it (deleted or relabelled in the Vultr console): \
         provisions or deletes the client on what is left",
    ));
    out
}

/// The orphan ids a `labelled_orphan` evidence text names first
/// (`volume vol-1, vol-2: ...`).
fn orphan_ids(detail: &str) -> Vec<String> {
    let head = detail.split_once(": ").map_or("", |(h, _)| h);
    let ids = head.split_once(' ').map_or("", |(_, ids)| ids);
    ids.split(", ").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// The resource ids listed in a `duplicate_matches` evidence text.
fn listed_ids(detail: &str) -> Vec<String> {
    detail
        .rsplit_once(": ")
        .map(|(_, ids)| ids.split(", ").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// An open dispatch of `kind` whose resource no GET ever showed (no id, or
/// an id the provider answered with): only an attestation can end it.
fn never_seen(c: &ClientRow, receipts: &[ReceiptRow], kind: &str) -> Vec<Resolution> {
    let n = &c.name;
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    receipts
        .iter()
        .filter(|x| {
            x.resource_kind.as_str() == kind
                && x.resource_kind != ResourceKind::Attach
                && oduflow_engine::current::is_open(x)
                && !x.progress().seen
                && !(x.effect().id().is_some()
                    && x.listed()
                    && c.infra.target == oduflow_model::Target::Present)
        })
        .map(|x| {
            let what = match x.effect().id() {
                Some(id) => format!("{id} does not exist (the provider answered with it, but no GET ever showed it)"),
                None => format!("nothing carries label {}", x.label),
            };
            r(
                format!("oduflow abandon {n} --kind {} --by WHO --reason WHY", x.resource_kind.as_str()),
                &format!("only if you have checked in the Vultr console that {what}: its label stays on the orphan watch list"),
            )
        })
        .collect()
}

/// What oduflow already looked at for the uncertain create of `kind`: its
/// label, how many looks (listings and reads by id) counted against the
/// polling limit, and over how long, from the send to the block; empty
/// when no such receipt is on record.
fn looked_for(c: &ClientRow, receipts: &[ReceiptRow], kind: &str) -> String {
    let open = receipts.iter().rev().find(|r| {
        r.resource_kind.as_str() == kind
            && r.dispatch_generation == c.infra.dispatch_generation(r.resource_kind)
            && r.effect().is_uncertain()
    });
    let Some(r) = open else { return String::new() };
    let secs = (c.infra.updated_ms - r.sent_or_claimed_ms()).max(0) / 1000;
    let span = if secs < 120 { format!("{secs} s") } else { format!("{} min", secs / 60) };
    format!(
        " (oduflow looked for label {} {} times over {span}, from the send to the block, and nothing carried it)",
        r.label,
        r.observations()
    )
}

pub fn resolutions(c: &ClientRow, receipts: &[ReceiptRow]) -> Vec<Resolution> {
    let Some(reason) = c.infra.blocked_reason else { return vec![] };
    let n = &c.name;
    let kind = blocked_kind(c, receipts).as_str();
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let reconcile = |when: &str| r(format!("oduflow reconcile {n}"), when);
    let never_seen = never_seen(c, receipts, kind);
    match reason {
        BlockedReason::CreateRejected | BlockedReason::AttachRejected => vec![r(
            format!("oduflow reconcile {n} --new-dispatch"),
            "after fixing the cause the provider gave (see the evidence): starts a new dispatch with a new label",
        )],
        BlockedReason::UncertainCreate => vec![
            reconcile("to observe again with a fresh polling budget (the resource may still appear under its label)"),
            r(
                format!("oduflow adopt {n} --kind {kind} --id ID"),
                "if you found the resource in the Vultr console: records it after verifying region and configuration",
            ),
            r(
                format!("oduflow abandon {n} --kind {kind} --by WHO --reason WHY"),
                &format!(
                    "only if you have checked that it was never created{}: the label stays on the orphan watch list",
                    looked_for(c, receipts, kind)
                ),
            ),
        ],
        BlockedReason::UncertainAttach => vec![
            reconcile("to read the attachment state again"),
            r(
                format!("oduflow abandon {n} --kind attach --by WHO --reason WHY"),
                "if you have checked that the attach was never applied",
            ),
        ],
        BlockedReason::DuplicateMatches => duplicate_resolutions(c, n, kind),
        BlockedReason::KnownResourceMissing => {
            let mut out = vec![
                reconcile("to look for the recorded resource again (a 404 may be Vultr's lag)"),
                r(
                    format!("oduflow client delete {n}"),
                    "if it was deleted on purpose, or the client was deleted since (a restored copy may not know): \
                     confirms that nothing is left and ends deleted (a resource never seen to exist then needs \
                     the abandon below)",
                ),
            ];
            let rebuilt = match kind {
                "vm" => "a new VM is built and the volume, with its data, attached to it",
                _ => "a new, empty volume is built and attached to the VM",
            };
            if c.infra.target == oduflow_model::Target::Present && never_seen.is_empty() {
                out.push(r(
                    format!("oduflow abandon {n} --kind {kind} --by WHO --reason WHY"),
                    &format!(
                        "if you have checked that the {kind} was deleted (in the Vultr console, say) and the client \
                         should live on: {rebuilt} (the rebuild); the old label stays on the orphan watch list"
                    ),
                ));
            }
            out.extend(never_seen);
            out
        }
        BlockedReason::UncertainDelete => {
            let mut out = vec![reconcile("to observe again until a GET answers 404")];
            out.extend(never_seen);
            out
        }
        BlockedReason::UpdateRejected if kind == "volume" => vec![r(
            format!("oduflow client update {n} --volume-gb GB"),
            "with a size Vultr accepts: back to the size the volume has (its last read), or, once the cause \
             Vultr gave is fixed, the same size again (sent once, on a new receipt); `reconcile` never sends a \
             refused change again",
        )],
        BlockedReason::UpdateRejected => vec![
            r(
                format!("oduflow client update {n} --plan PLAN"),
                "with a value Vultr accepts (see the evidence: a plan only grows; or back to the plan it has), or, \
                 once the cause Vultr gave is fixed, the same value again (sent once, on a new receipt)",
            ),
            reconcile(
                "when the plan was refused before anything was sent (not among the upgrades Vultr offered): \
                 reads them again; a change Vultr refused is never sent again",
            ),
        ],
        BlockedReason::UncertainUpdate => vec![reconcile(
            "after checking the server or volume in the Vultr console: reads again, and sends the change once more \
             on a new receipt only if a read still shows the old value",
        )],
        BlockedReason::DnsRecordForeign | BlockedReason::UncertainDnsRecord => dns_resolutions(c, reason, n),
        BlockedReason::LabelledOrphan => labelled_orphan_resolutions(c, n),
        BlockedReason::PreflightFailed => preflight_resolutions(c, n),
        BlockedReason::ConfigMismatch
        | BlockedReason::ForeignAttachment
        | BlockedReason::CredentialChanged
        | BlockedReason::DeleteRefused
        | BlockedReason::ProviderUnavailable
        | BlockedReason::NotReady
        | BlockedReason::AdapterUnconfigured
        | BlockedReason::AttemptsExhausted
        | BlockedReason::AdapterFailed => fix_then_reconcile(reason, n),
    }
}

/// `preflight_failed`: nothing was created, so the spec may still be
/// corrected (`client update`) in each field the evidence names (one
/// problem per `; `-separated part of it: `region ewr does not exist`,
/// `plan vc2-1c-1gb is not sold in region ewr now`, ...), or the account
/// fixed, or the client dropped.
fn preflight_resolutions(c: &ClientRow, n: &str) -> Vec<Resolution> {
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let detail = c.infra.blocked_detail.as_deref().unwrap_or_default();
    let problems: Vec<&str> = detail.trim_start_matches("preflight: ").split("; ").collect();
    let names = |what: &str| problems.iter().any(|p| p.starts_with(what));
    let mut out = vec![];
    if names("region ") {
        out.push(r(
            format!("oduflow client update {n} --region REGION"),
            "to a region that exists and offers the volume's block storage: the preflight runs again on the \
             corrected spec",
        ));
    }
    if names("plan ") {
        out.push(r(
            format!("oduflow client update {n} --plan PLAN"),
            "to a plan the region sells now: the preflight runs again on the corrected spec",
        ));
    }
    if names("firewall group ") {
        out.push(r(
            format!("oduflow client update {n} --firewall-group FIREWALL"),
            "to a firewall group the account has (\"\" for none): the preflight runs again on the corrected spec",
        ));
    }
    // What a fix in the account can mend (a region cannot be made).
    if ["plan ", "image source ", "ssh key ", "firewall group "].into_iter().any(names) {
        out.push(r(
            format!("oduflow reconcile {n}"),
            "after fixing what the evidence names in the Vultr account (an SSH key or firewall group created, a plan \
         back in stock): the preflight runs again on a fresh catalog; nothing was created",
        ));
    }
    out.push(r(
        format!("oduflow client delete {n}"),
        "to drop the client instead (nothing was created, so it ends deleted at once), then create it again with \
         a spec the catalog accepts",
    ));
    out
}

/// `duplicate_matches`: keep one of the resources the evidence lists.
fn duplicate_resolutions(c: &ClientRow, n: &str, kind: &str) -> Vec<Resolution> {
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let ids = c.infra.blocked_detail.as_deref().map(listed_ids).unwrap_or_default();
    let mut out: Vec<Resolution> = ids
        .iter()
        .map(|id| {
            r(
                format!("oduflow adopt {n} --kind {kind} --id {id}"),
                "to keep this one; the others are then reported as orphans by `oduflow reconcile --all`",
            )
        })
        .collect();
    if out.is_empty() {
        out.push(r(format!("oduflow adopt {n} --kind {kind} --id ID"), "to keep one of the matching resources"));
    }
    out
}

/// The reasons an operator resolves by fixing something outside oduflow
/// (the console, the key, the configuration), then reconciling.
fn fix_then_reconcile(reason: BlockedReason, n: &str) -> Vec<Resolution> {
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let reconcile = |when: &str| r(format!("oduflow reconcile {n}"), when);
    match reason {
        BlockedReason::ConfigMismatch => vec![
            reconcile("after correcting the resource in the Vultr console so it matches the spec"),
            r(
                format!("oduflow client update {n} --plan PLAN"),
                "to make the spec say what the server now has (a plan grown in the console, say; --volume-gb, \
                 --tag and --firewall-group likewise), or what it should have: a larger plan or volume, tags and \
                 firewall group are then changed in place",
            ),
            r(format!("oduflow client delete {n}"), "to remove the client and its resources instead"),
        ],
        BlockedReason::ForeignAttachment => {
            vec![reconcile("after detaching the volume from the other instance in the Vultr console")]
        }
        BlockedReason::CredentialChanged => vec![
            reconcile("if VULTR_API_KEY is again the key this record is bound to (see the evidence): observes again"),
            r(
                "oduflow credentials rotate".to_owned(),
                "with the new key in VULTR_API_KEY: proves it owns every recorded resource, then rebinds each \
                 record and queues its work again",
            ),
        ],
        BlockedReason::DeleteRefused => vec![reconcile(
            "after fixing why Vultr refuses the DELETE (see the evidence: a locked VM, a key without delete rights): \
             sends it again with a fresh polling budget",
        )],
        BlockedReason::ProviderUnavailable => vec![reconcile(
            "after fixing the key or the base URL (see the evidence; a worker checks both when it starts): observes again",
        )],
        BlockedReason::NotReady => vec![
            reconcile("once the resource is active in the Vultr console (a suspended account, a stuck install)"),
            r(
                format!("oduflow client delete {n}"),
                "to remove the client and its resources instead (Vultr refuses to destroy a server that is not yet \
                 active: while it is pending the deletion blocks delete_refused, and a reconcile once it is active \
                 ends it)",
            ),
        ],
        BlockedReason::AdapterUnconfigured => vec![reconcile(
            "after putting the adapter named in the evidence back into the configuration: it then removes the \
             identity it ensured",
        )],
        BlockedReason::AttemptsExhausted | BlockedReason::AdapterFailed => {
            vec![reconcile("after fixing the cause in the last error (see the events): runs the job again")]
        }
        _ => vec![],
    }
}

/// The ways out of the DNS adapter's blocks.
fn dns_resolutions(c: &ClientRow, reason: BlockedReason, n: &str) -> Vec<Resolution> {
    let r = |command: String, when: &str| Resolution { command, when: when.to_owned() };
    let reconcile = |when: &str| r(format!("oduflow reconcile {n}"), when);
    match reason {
        BlockedReason::DnsRecordForeign => {
            let id = c.infra.blocked_detail.as_deref().and_then(foreign_record_id).unwrap_or("ID");
            vec![
                r(
                    format!("oduflow adopt {n} --kind dns --id {id}"),
                    "to make that record the client's: oduflow then points it at the VM and deletes it with the \
                     client",
                ),
                r(
                    format!("oduflow client update {n} --dns-name NAME"),
                    "to give the client another DNS name; that record is not touched",
                ),
                reconcile("after removing or renaming that record yourself in the Vultr console"),
            ]
        }
        BlockedReason::UncertainDnsRecord => vec![
            reconcile("to list the zone once more (the record may have appeared)"),
            r(
                format!("oduflow adopt {n} --kind dns --id ID"),
                "if the Vultr console shows the record oduflow created: it is recorded as the client's",
            ),
            r(
                format!("oduflow abandon {n} --kind dns --by WHO --reason WHY"),
                "only if the Vultr console shows no such record: the next run creates it",
            ),
        ],
        _ => vec![],
    }
}

/// The record a `dns_record_foreign` block names (`... record ID (A ...`).
fn foreign_record_id(detail: &str) -> Option<&str> {
    let rest = &detail[detail.find("record ")? + "record ".len()..];
    let id = rest.split_whitespace().next()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_id_from_foreign_evidence() {
        let d = "adapter dns: record 3f2c-9a (A mail.example.com -> 192.0.2.7, ttl 300) exists";
        assert_eq!(foreign_record_id(d), Some("3f2c-9a"));
        assert_eq!(foreign_record_id("nothing"), None);
    }

    #[test]
    fn ids_from_orphan_evidence() {
        let d = "volume vol-1, vol-2: 2 live resource(s) carry a label naming this client's volume, and no \
                 receipt accounts for them (vol-1: active; vol-2: GET answers 404); nothing was created";
        assert_eq!(orphan_ids(d), vec!["vol-1", "vol-2"]);
        assert!(orphan_ids("nothing").is_empty());
    }

    #[test]
    fn ids_from_duplicate_evidence() {
        assert_eq!(listed_ids("2 resources carry this dispatch's label: a-1, b-2"), vec!["a-1", "b-2"]);
        assert!(listed_ids("nothing").is_empty());
    }
}
