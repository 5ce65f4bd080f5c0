//! What the DNS adapter owns for one client: its records, each a side
//! effect on the ledger's [`Effect`] lifecycle, like a dispatch or a change
//! receipt. A create is `Unknown` from its claim (recorded before its POST
//! can leave) until its id is recorded, then `Known` with how the id came:
//! the answer, a zone listing after a lost answer, the owner marker, an
//! operator. A refused or unsent create is dropped; an abandoned one too
//! (its event keeps the attestation).
//!
//! Kept in the client's ownership record as JSON in the form below
//! ([`Wire`]), which `client show` prints and older records were written in.

use crate::dns::DnsRecord;
use oduflow_model::ledger::{Effect, IdSource};
use serde::{Deserialize, Serialize};

/// What the DNS adapter records it owns for one client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owned {
    #[serde(default)]
    pub records: Vec<OwnedRecord>,
}

/// How far a DELETE of an owned record has come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deletion {
    /// None sent.
    #[default]
    None,
    /// Recorded before it is sent, not yet answered: a 404 to a later one
    /// confirms it.
    Sent,
    /// Answered by Vultr: a GET 404 then confirms it, and the record is
    /// dropped.
    Answered,
}

/// One record oduflow created or was told to adopt, or a create it sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire", into = "Wire")]
pub struct OwnedRecord {
    pub rtype: String,
    /// The zone it is in (`""`: recorded before zones were: the configured
    /// one). After a changed `[dns] domain`, reads and DELETEs still go here;
    /// the next ensure creates the record in the new zone and deletes this
    /// one by id.
    pub zone: String,
    /// Name, data and TTL as last written (created, patched or adopted).
    pub name: String,
    pub data: String,
    pub ttl: i64,
    /// When the create was recorded, before it was sent (the adapter's
    /// clock, epoch ms).
    pub claimed_ms: i64,
    /// The create's lifecycle: `Unknown` (its observations: the zone
    /// listings since its answer was lost that found no record for it), or
    /// `Known`.
    pub effect: Effect,
    /// Why a create's outcome is unknown, when its answer came back (or the
    /// run that sent it was found stopped), and when the last listing that
    /// looked for it started (the next must start later).
    pub lost: Option<String>,
    pub lost_ms: Option<i64>,
    pub listed_ms: Option<i64>,
    /// Who adopted this record (`oduflow adopt --kind dns`, or the owner
    /// marker), when it was not created by oduflow.
    pub adopted_by: Option<String>,
    pub deletion: Deletion,
    /// 404s in a row to this record's GET or PATCH, and when the first of
    /// them came (see [`crate::dns_adapter::RECORD_MISSING_MAX`]).
    pub missing: u32,
    pub missing_ms: Option<i64>,
    /// When it was taken as gone: no longer the client's record at its name
    /// (the next ensure makes a new one and sends this id a DELETE), still
    /// owned until a GET 404 follows that DELETE.
    pub gone_ms: Option<i64>,
}

/// Who adopts a record that carries the client's owner marker.
pub const BY_MARKER: &str = "owner marker";

impl OwnedRecord {
    /// A create about to be sent: `Unknown` from here on.
    pub fn claimed(zone: &str, rtype: &str, name: &str, data: &str, ttl: i64, now_ms: i64) -> Self {
        Self {
            rtype: rtype.to_owned(),
            zone: zone.to_owned(),
            name: name.to_owned(),
            data: data.to_owned(),
            ttl,
            claimed_ms: now_ms,
            effect: Effect::Unknown { observations: 0 },
            lost: None,
            lost_ms: None,
            listed_ms: None,
            adopted_by: None,
            deletion: Deletion::None,
            missing: 0,
            missing_ms: None,
            gone_ms: None,
        }
    }

    /// Vultr's id of it, once known.
    pub fn id(&self) -> Option<&str> {
        self.effect.id()
    }

    /// Its id became known, and how (once: a known id is never replaced).
    /// The listings that found nothing before stay, as evidence.
    pub fn know(&mut self, id: &str, source: IdSource) {
        debug_assert!(self.id().is_none(), "an owned record's id is written once");
        let observations = i64::from(self.listings());
        self.effect = Effect::Known { id: id.to_owned(), source: Some(source), observations };
        self.lost = None;
    }

    /// Zone listings that looked for its lost create and found nothing
    /// (before its id became known, for a known one).
    pub fn listings(&self) -> u32 {
        match self.effect {
            Effect::Unknown { observations } | Effect::Known { observations, .. } => {
                u32::try_from(observations).unwrap_or(u32::MAX)
            }
            _ => 0,
        }
    }

    /// One more listing found nothing for its lost create.
    pub fn listed_nothing(&mut self) {
        if let Effect::Unknown { observations } = &mut self.effect {
            *observations += 1;
        }
    }

    /// A listing found several records that match its lost create: the
    /// looks that found none before prove no absence now, so the count
    /// starts again (an abandon attests an absence that only looks since
    /// the last such listing have shown, see [`Owned::abandon_lost`]).
    pub fn listed_several(&mut self) {
        if let Effect::Unknown { observations } = &mut self.effect {
            *observations = 0;
        }
    }
}

impl Owned {
    pub fn from_value(v: &serde_json::Value) -> Result<Self, String> {
        if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(Self::default());
        }
        serde_json::from_value(v.clone()).map_err(|e| format!("the recorded DNS ownership is unreadable: {e}"))
    }

    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("ownership always serializes")
    }

    pub fn owns(&self, id: &str) -> bool {
        self.records.iter().any(|r| r.id() == Some(id))
    }

    /// Records `rec` as owned (an operator's adoption, or the owner
    /// marker's: `by`, and `source` says which): refused when a record of
    /// that type is owned already. A lost create of that type is replaced
    /// (the operator found it, or it is settled by this one).
    pub fn adopt(
        &mut self,
        zone: &str,
        rec: &DnsRecord,
        (by, source): (&str, IdSource),
        now_ms: i64,
    ) -> Result<(), String> {
        if let Some(o) = self.records.iter().find(|o| o.rtype == rec.record_type && o.id().is_some()) {
            return Err(format!(
                "this client already owns {} record {} ({} -> {}); it owns one per type",
                o.rtype,
                o.id().unwrap_or(""),
                o.name,
                o.data
            ));
        }
        // A lost create of this type is settled by this record only if it is
        // that create (same name and data); else it stays to be resolved.
        self.records
            .retain(|o| !(o.rtype == rec.record_type && o.name == rec.name && same_data(&o.rtype, &o.data, &rec.data)));
        let mut r = OwnedRecord::claimed(zone, &rec.record_type, &rec.name, &rec.data, rec.ttl, now_ms);
        r.know(&rec.id.0, source);
        r.adopted_by = Some(by.to_owned());
        self.records.push(r);
        Ok(())
    }

    /// Gives up the creates whose outcome is unknown and that a zone listing
    /// has looked for (an operator attests that Vultr has no such record):
    /// the next run creates again. A create still in flight (no listing
    /// yet) is kept. Returns what was given up.
    pub fn abandon_lost(&mut self) -> Vec<OwnedRecord> {
        let (lost, keep): (Vec<_>, Vec<_>) = self.records.drain(..).partition(|r| r.id().is_none() && r.listings() > 0);
        self.records = keep;
        lost
    }
}

/// Whether two record data are the same: addresses compared as addresses
/// (`2001:db8::1` and `2001:0db8:0::1` are one), anything else as text.
pub fn same_data(rtype: &str, a: &str, b: &str) -> bool {
    match rtype {
        "A" | "AAAA" => match (a.parse::<std::net::IpAddr>(), b.parse::<std::net::IpAddr>()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        },
        "TXT" => unquoted(a) == unquoted(b),
        _ => a == b,
    }
}

/// TXT data without the quotes Vultr may or may not answer it with.
fn unquoted(d: &str) -> &str {
    let d = d.trim();
    d.strip_prefix('"').and_then(|d| d.strip_suffix('"')).unwrap_or(d)
}

/// An owned record as the ownership record keeps it: flat, with the
/// lifecycle spelt as its columns (`id` set or not, `listings`, a DELETE
/// `delete_sent` then `deleting`), and how the id came (`source`; absent in
/// records written before it was kept: an adopter's name then says an
/// adoption, a listing's time a listing's find, else the answer).
#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    rtype: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    zone: String,
    name: String,
    data: String,
    ttl: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<IdSource>,
    claimed_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost_ms: Option<i64>,
    #[serde(default)]
    listings: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    listed_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    adopted_by: Option<String>,
    #[serde(default)]
    delete_sent: bool,
    #[serde(default)]
    deleting: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    missing: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    missing_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gone_ms: Option<i64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<Wire> for OwnedRecord {
    fn from(w: Wire) -> Self {
        let effect = match w.id {
            Some(id) => {
                let source = w.source.unwrap_or(match w.adopted_by.as_deref() {
                    Some(BY_MARKER) => IdSource::ReclaimedByMarker,
                    Some(_) => IdSource::AdoptedByOperator,
                    // Only a listing for a lost create sets `listed_ms`.
                    None if w.listed_ms.is_some() || w.listings > 0 => IdSource::AdoptedByLabel,
                    None => IdSource::Response,
                });
                Effect::Known { id, source: Some(source), observations: i64::from(w.listings) }
            }
            None => Effect::Unknown { observations: i64::from(w.listings) },
        };
        let deletion = match (w.deleting, w.delete_sent) {
            (true, _) => Deletion::Answered,
            (false, true) => Deletion::Sent,
            (false, false) => Deletion::None,
        };
        Self {
            rtype: w.rtype,
            zone: w.zone,
            name: w.name,
            data: w.data,
            ttl: w.ttl,
            claimed_ms: w.claimed_ms,
            effect,
            lost: w.lost,
            lost_ms: w.lost_ms,
            listed_ms: w.listed_ms,
            adopted_by: w.adopted_by,
            deletion,
            missing: w.missing,
            missing_ms: w.missing_ms,
            gone_ms: w.gone_ms,
        }
    }
}

impl From<OwnedRecord> for Wire {
    fn from(r: OwnedRecord) -> Self {
        // The two states an owned record takes: a refused or unsent create
        // is dropped, an abandoned one too.
        debug_assert!(matches!(r.effect, Effect::Known { .. } | Effect::Unknown { .. }), "{:?}", r.effect);
        let listings = r.listings();
        let (id, source) = match &r.effect {
            Effect::Known { id, source, .. } => (Some(id.clone()), *source),
            _ => (None, None),
        };
        Wire {
            rtype: r.rtype,
            zone: r.zone,
            name: r.name,
            data: r.data,
            ttl: r.ttl,
            id,
            source,
            claimed_ms: r.claimed_ms,
            lost: r.lost,
            lost_ms: r.lost_ms,
            listings,
            listed_ms: r.listed_ms,
            adopted_by: r.adopted_by,
            delete_sent: r.deletion != Deletion::None,
            deleting: r.deletion == Deletion::Answered,
            missing: r.missing,
            missing_ms: r.missing_ms,
            gone_ms: r.gone_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::DnsRecordId;

    fn record(id: &str, rtype: &str, data: &str) -> DnsRecord {
        DnsRecord {
            id: DnsRecordId(id.into()),
            record_type: rtype.into(),
            name: "acme".into(),
            data: data.into(),
            ttl: 300,
            priority: 0,
        }
    }

    /// Records written before the lifecycle was typed read as they meant:
    /// an id is known (adopted when an adopter is named), none is a create
    /// of unknown outcome with its listings; and they are written back as
    /// they were, plus how the id came.
    #[test]
    fn records_written_before_the_typed_lifecycle_read_as_they_meant() {
        let old = serde_json::json!({ "records": [
            { "type": "TXT", "name": "acme", "data": "\"m\"", "ttl": 300, "id": "t-1", "claimed_ms": 5,
              "listings": 0, "delete_sent": true, "deleting": false },
            { "type": "A", "zone": "old.example", "name": "acme", "data": "192.0.2.7", "ttl": 300, "id": "a-1",
              "claimed_ms": 6, "listings": 0, "adopted_by": "ops", "delete_sent": true, "deleting": true,
              "missing": 2, "missing_ms": 9 },
            { "type": "AAAA", "name": "acme", "data": "2001:db8::7", "ttl": 300, "claimed_ms": 7, "lost": "timeout",
              "lost_ms": 8, "listings": 2, "listed_ms": 10, "delete_sent": false, "deleting": false },
            { "type": "A", "name": "acme", "data": "192.0.2.8", "ttl": 300, "id": "a-2", "claimed_ms": 6,
              "adopted_by": "owner marker", "gone_ms": 11 },
            // A lost create a listing found, after one that found nothing.
            { "type": "TXT", "name": "acme", "data": "\"n\"", "ttl": 300, "id": "t-2", "claimed_ms": 12,
              "listings": 1, "listed_ms": 14, "delete_sent": false, "deleting": false },
        ]});
        let o = Owned::from_value(&old).unwrap();
        let sources: Vec<Option<IdSource>> = o
            .records
            .iter()
            .map(|r| match &r.effect {
                Effect::Known { source, .. } => *source,
                _ => None,
            })
            .collect();
        assert_eq!(
            sources,
            [
                Some(IdSource::Response),
                Some(IdSource::AdoptedByOperator),
                None,
                Some(IdSource::ReclaimedByMarker),
                Some(IdSource::AdoptedByLabel)
            ]
        );
        let deletions: Vec<Deletion> = o.records.iter().map(|r| r.deletion).collect();
        assert_eq!(deletions, [Deletion::Sent, Deletion::Answered, Deletion::None, Deletion::None, Deletion::None]);
        assert_eq!((o.records[2].id(), o.records[2].listings()), (None, 2));
        assert_eq!((o.records[4].id(), o.records[4].listings()), (Some("t-2"), 1));
        assert!(o.clone().abandon_lost().iter().all(|r| r.id().is_none()), "only creates of unknown outcome");
        assert_eq!(
            (o.records[1].zone.as_str(), o.records[1].missing, o.records[1].missing_ms),
            ("old.example", 2, Some(9))
        );
        // Written back: the same columns, and the source beside each id.
        let back = o.to_value();
        for (new, old) in back["records"].as_array().unwrap().iter().zip(old["records"].as_array().unwrap()) {
            for (k, v) in old.as_object().unwrap() {
                assert_eq!(&new[k], v, "{k} of {old}");
            }
        }
        assert_eq!(back["records"][3]["source"], "reclaimed_by_marker");
        assert!(back["records"][2].get("source").is_none());
        assert_eq!(Owned::from_value(&back).unwrap(), o);
    }

    #[test]
    fn a_lost_create_counts_its_listings_until_its_id_is_known() {
        let mut r = OwnedRecord::claimed("example.com", "A", "acme", "192.0.2.7", 300, 1);
        assert_eq!((r.id(), r.listings()), (None, 0));
        r.lost = Some("timeout".into());
        r.listed_nothing();
        r.listed_nothing();
        assert_eq!(r.listings(), 2);
        r.know("a-1", IdSource::AdoptedByLabel);
        // The listings that found nothing stay, as evidence.
        assert_eq!((r.id(), r.listings(), r.lost.as_deref()), (Some("a-1"), 2, None));
        r.listed_nothing();
        assert_eq!(
            r.effect,
            Effect::Known { id: "a-1".into(), source: Some(IdSource::AdoptedByLabel), observations: 2 }
        );
    }

    #[test]
    fn an_adoption_settles_only_the_lost_create_it_is() {
        let mut o = Owned::default();
        let mut lost = OwnedRecord::claimed("example.com", "A", "acme", "192.0.2.7", 300, 1);
        lost.listed_nothing();
        o.records.push(lost.clone());
        // Another address: the lost create stays to be resolved.
        o.adopt("example.com", &record("a-9", "A", "192.0.2.9"), ("ops", IdSource::AdoptedByOperator), 2).unwrap();
        assert_eq!(o.records.len(), 2);
        let err = o
            .adopt("example.com", &record("a-8", "A", "192.0.2.7"), ("ops", IdSource::AdoptedByOperator), 3)
            .unwrap_err();
        assert!(err.contains("already owns A record a-9"), "{err}");
        let mut p = Owned { records: vec![lost] };
        p.adopt("example.com", &record("a-7", "A", "192.0.2.7"), (BY_MARKER, IdSource::ReclaimedByMarker), 4).unwrap();
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.records[0].effect.id(), Some("a-7"));
        assert!(matches!(p.records[0].effect, Effect::Known { source: Some(IdSource::ReclaimedByMarker), .. }));
        assert!(p.abandon_lost().is_empty(), "an adopted record is not a lost create");
    }
}
