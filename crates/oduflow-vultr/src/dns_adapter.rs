//! The DNS identity: the client's A record (and AAAA with IPv6) at its DNS
//! name in `[dns] domain`, pointing at the VM's addresses.
//!
//! Vultr's records carry no label or tag, so ownership is kept by record id,
//! in the client's durable ownership record ([`Ownership`]), written before
//! anything depends on it:
//! - a create is recorded (`sent`) before its POST can leave; its answer's id
//!   is recorded next. A lost answer is resolved by a zone listing taken
//!   after it: exactly one record with the expected name, type and data is
//!   the one sent; none after [`LOST_CREATE_LISTINGS_MAX`] listings, or
//!   several, blocks `uncertain_dns_record` with the evidence;
//! - oduflow changes (PATCH) and deletes only records whose id it recorded;
//! - a 404 for a recorded id (to a GET or a PATCH) is counted, never a
//!   verdict on its own: a record is taken as gone only after
//!   [`RECORD_MISSING_MAX`] of them in a row spanning [`RECORD_MISSING_MS`];
//!   a new one is then made, and the old id is kept until a DELETE of it was
//!   answered and a GET 404 followed, so nothing it owned is ever forgotten
//!   while it may be live;
//! - before creating, the name must be free: a record of a conflicting type
//!   (A, AAAA, CNAME) at that name that oduflow did not record is never
//!   touched, and the client blocks `dns_record_foreign` naming it;
//! - beside its records, at the same name, the client owns a TXT owner
//!   marker (`oduflow-owner=<client id>`), made first and deleted last like
//!   any owned record: records at its name that carry its marker and that
//!   it does not own (its ownership record lost to a restore) are taken
//!   back by id before a create; a marker naming another client keeps the
//!   block, naming that client.
//!
//! Reads are by id (GET /domains/{d}/records/{id}). Vultr cannot filter a
//! listing by name, so the "is the name free" check reads the zone, in a
//! listing started after the check began (one listing serves every check of
//! this process that was waiting when it started); a look for a lost create
//! waits the same way for a listing started after it began.

use crate::VultrClient;
use crate::dns::{DnsRecord, DnsRecordId, DnsRecordPatch, DnsRecordRequest};
use crate::dns_owned::{BY_MARKER, Deletion, Owned, OwnedRecord, same_data};
use oduflow_model::BlockedReason;
use oduflow_model::decide::{Looked, lost_create_looked};
use oduflow_model::identity::*;
use oduflow_model::ledger::IdSource;
use oduflow_model::provider::{DeleteOutcome, Outcome, Provider as _};
use oduflow_view::{Ask, Got, Listed, Lister, Slot, Snapshot};

/// Zone listings, each taken after a create's answer was lost and a poll
/// interval apart, that find no record for it before the client blocks
/// `uncertain_dns_record`. Vultr applies a record create at once (no listing
/// lag is documented for DNS), so three listings over several seconds are
/// ample; the bound only keeps an unexplained absence from looping.
pub const LOST_CREATE_LISTINGS_MAX: u32 = 3;

/// A GET 404 for a record created this recently is not yet taken as proof
/// that it is gone (a fresh resource can 404 for a while, docs/vultr.md §7).
pub const RECORD_GET_LAG_MS: i64 = 60_000;

/// 404s in a row (to the GETs and PATCHes of one owned record, a poll
/// interval or more apart) before the record is taken as gone, and the least
/// time from the first of them to the last. A single 404 can be Vultr's
/// (docs/vultr.md §7); a record that answers 404 for a minute across several
/// reads was deleted outside oduflow (the console). Until then each 404 is
/// `Pending`; a read that finds the record starts the count again.
pub const RECORD_MISSING_MAX: u32 = 3;
pub const RECORD_MISSING_MS: i64 = 60_000;

/// How long after a counted 404 the record is asked for again: counting
/// the 404s that take it as gone costs about seven requests whatever the
/// poll interval (at a poll interval, a fast one sent a request every few
/// milliseconds for the whole minute), and a temporary 404 holds the
/// client back this long.
pub const RECORD_MISSING_SPACING_MS: i64 = 10_000;

/// The adapter's steps a test can kill a worker at (`ODUFLOW_CRASH_AT`):
/// after a create is recorded and before it is sent; after its answer came
/// and before its id is recorded; after a DELETE was answered and before that
/// is recorded.
pub const STEPS: [&str; 3] = ["dns-record-claimed", "dns-record-created", "dns-record-deleted"];

/// The least time between the starts of two zone listings of a process,
/// and the least multiple of the last listing's length. Each look waits
/// for a listing started after it began, and every look waiting when one
/// starts shares it: without a gap, looks arriving while one is under way
/// start the next as soon as it lands, and the zone's pages (20 at 10,000
/// records) are listed back to back for as long as creates come. With it,
/// listings take at most a quarter of the time, and of the rate budget
/// (their pages wait in its line like any request); a look waits a gap
/// and a listing at most, up to [`ZONE_LOOK_WAIT_MAX`].
pub const ZONE_LISTING_GAP: std::time::Duration = std::time::Duration::from_secs(1);
pub const ZONE_LISTING_GAP_TIMES: u32 = 4;

/// The longest a look waits for its listing: a gap and the listing itself.
/// A zone that takes over 12 s to list (four times that, and the listing)
/// fails the looks waiting for it; each counts as an adapter failure, and
/// after `ADAPTER_FAILURES_MAX` of them the client blocks `adapter_failed`
/// with the reason.
pub const ZONE_LOOK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// The longest a look waits for the adapter's clock to pass the instant
/// its listing must start after: that instant is a moment ahead when the
/// look began in the same millisecond as the time it was given (a lost
/// answer's, recorded by this run), or was recorded by another process,
/// whose clock may be a little ahead. Past it, the look fails (and is
/// retried, then blocks `adapter_failed` with the reason).
pub const ZONE_BOUND_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Record types that cannot share a name with the client's A/AAAA records
/// without changing where that name resolves.
const CONFLICTING: [&str; 3] = ["A", "AAAA", "CNAME"];

/// The clock an adapter records and compares times with (epoch ms).
pub type NowMs = std::sync::Arc<dyn Fn() -> i64 + Send + Sync>;

/// The host's wall clock: the default until [`DnsAdapter::with_clock`]
/// gives the process's clock, whose times order events across processes
/// (a record claimed by one worker is looked at by another).
fn host_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// One zone listing, with when it started (the adapter's clock).
type ZoneView = std::sync::Arc<Snapshot<DnsRecord>>;

impl Listed for DnsRecord {
    fn id(&self) -> &str {
        &self.id.0
    }
    /// Records are found by name: Vultr's have no label.
    fn label(&self) -> &str {
        &self.name
    }
}

pub struct DnsAdapter {
    client: VultrClient,
    domain: String,
    ttl: i64,
    /// The zone's listings, shared by every run of this process: one
    /// listing serves every look waiting when it starts.
    view: std::sync::Arc<Slot<DnsRecord>>,
    clock: NowMs,
}

impl DnsAdapter {
    pub fn new(client: VultrClient, domain: String, ttl: i64) -> Self {
        Self { client, domain, ttl, view: Default::default(), clock: std::sync::Arc::new(host_now_ms) }
    }

    /// Records and compares times on `clock` (the process's database
    /// clock) instead of the host's.
    pub fn with_clock(mut self, clock: NowMs) -> Self {
        self.clock = clock;
        self
    }

    fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    fn fqdn(&self, name: &str) -> String {
        format!("{name}.{}", self.domain)
    }

    /// The client as a run's step sends with it: with the run's guard, given
    /// with its ownership record.
    fn sent_by(&self, own: &dyn Ownership) -> VultrClient {
        self.client.sending_as(own.sending())
    }

    /// The zone an owned record is in.
    fn zone_of<'r>(&'r self, r: &'r OwnedRecord) -> &'r str {
        if r.zone.is_empty() { &self.domain } else { &r.zone }
    }

    /// A zone listing started at or after `min_taken_ms`: the newest one
    /// when it did, else the next one (at least [`ZONE_LISTING_GAP`] after
    /// the one before), which every look that waits for it shares. A
    /// failed one is the error of the looks that waited for it. A run whose
    /// claim is lost asks for none.
    async fn zone(&self, own: &dyn Ownership, min_taken_ms: i64) -> Result<ZoneView, String> {
        own.sending().check().await.map_err(|e| format!("listing the {} zone: {e}", self.domain))?;
        let until = std::time::Instant::now() + ZONE_BOUND_WAIT_MAX;
        while self.now_ms() < min_taken_ms && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let ask = Ask {
            after_ms: min_taken_ms - 1,
            since: None,
            may_defer: false,
            gap: ZONE_LISTING_GAP,
            gap_times_last: ZONE_LISTING_GAP_TIMES,
            defer_max: std::time::Duration::ZERO,
            wait_max: ZONE_LOOK_WAIT_MAX,
        };
        let listed = self.view.get(ask, self.clock.clone(), self.lister()).await;
        match listed.map_err(|e| format!("listing the {} zone: {e}", self.domain))? {
            Got::Snapshot(z) => Ok(z),
            Got::Later(_) => Err(format!("listing the {} zone: deferred, which a look never is", self.domain)),
        }
    }

    /// Lists the zone. Its pages carry no run's guard (the run's was
    /// asked before) and no shared listing's place at the head of the rate
    /// budget's line: a zone of many pages must not hold up the creates.
    fn lister(&self) -> Lister<DnsRecord> {
        let (client, domain) = (self.client.clone(), self.domain.clone());
        std::sync::Arc::new(move || {
            let (client, domain) = (client.clone(), domain.clone());
            Box::pin(async move { Ok(client.dns_record_list(&domain).await?) })
        })
    }

    async fn record_in(&self, client: &VultrClient, zone: &str, id: &str) -> Result<Option<DnsRecord>, String> {
        client
            .dns_record_get(zone, &DnsRecordId(id.to_owned()))
            .await
            .map_err(|e| format!("reading record {id} of {zone}: {e}"))
    }

    async fn save(own: &dyn Ownership, o: &Owned) -> Result<(), AdapterError> {
        own.put(o.to_value()).await.map_err(AdapterError::Failed)
    }

    /// The records the client should have: its owner marker (TXT, first:
    /// an A record of oduflow's never exists without it for longer than a
    /// crash window), A at its main IP, AAAA at its IPv6 address when it has
    /// one.
    fn wanted(t: &IdentityTarget) -> Result<Vec<(&'static str, String)>, AdapterError> {
        let ip = t.main_ip.as_deref().filter(|ip| !ip.is_empty()).ok_or("the VM's main IP is not known yet")?;
        let mut out = vec![("TXT", dns_owner_marker(&t.client_id)), ("A", ip.to_owned())];
        if !t.outputs.v6_main_ip.is_empty() {
            out.push(("AAAA", t.outputs.v6_main_ip.clone()));
        }
        Ok(out)
    }

    /// Settles every create whose answer was lost, by a zone listing taken
    /// after the answer came back (see the module notes).
    async fn resolve_lost(&self, t: &IdentityTarget, o: &mut Owned, own: &dyn Ownership) -> Result<(), AdapterError> {
        for i in 0..o.records.len() {
            if o.records[i].id().is_some() {
                continue;
            }
            if o.records[i].lost_ms.is_none() {
                // The worker stopped before the answer was recorded: the
                // create may have been applied until now.
                o.records[i].lost_ms = Some(self.now_ms());
            }
            let rec = o.records[i].clone();
            if self.zone_of(&rec) != self.domain {
                return Err(AdapterError::Blocked(
                    BlockedReason::UncertainDnsRecord,
                    format!(
                        "a create in zone {} (no longer the configured one) may have reached Vultr; adopt or \
                         abandon it with that zone configured",
                        rec.zone
                    ),
                ));
            }
            // A listing started after this look began (never one another
            // client's check took since the last look, which may predate a
            // record made since), and after the answer was lost and the
            // last look's listing (a clock another process set).
            let after = rec.lost_ms.unwrap_or(rec.claimed_ms).max(rec.listed_ms.unwrap_or(0));
            let z = self.zone(own, (after + 1).max(self.now_ms())).await?;
            o.records[i].listed_ms = Some(z.started_ms);
            let found: Vec<&DnsRecord> = z
                .items()
                .iter()
                .filter(|r| {
                    r.record_type == rec.rtype
                        && r.name == rec.name
                        && same_data(&rec.rtype, &r.data, &rec.data)
                        && !o.owns(&r.id.0)
                })
                .collect();
            let what = format!("{} {} -> {}", rec.rtype, self.fqdn(&rec.name), rec.data);
            let why = rec.lost.clone().unwrap_or_else(|| "the worker stopped before its answer was recorded".into());
            let listings = rec.listings() + 1;
            let looked = lost_create_looked(found, i64::from(rec.listings()), i64::from(LOST_CREATE_LISTINGS_MAX));
            // Every look is recorded, whatever it found: the id it found,
            // or a listing that found none counted; and its listing's time
            // always, so the next look (after an operator's reconcile, too)
            // never takes the listing a block rests on.
            match &looked {
                Looked::One(one) => o.records[i].know(&one.id.0, IdSource::AdoptedByLabel),
                Looked::Again | Looked::Uncertain => o.records[i].listed_nothing(),
                Looked::Several(_) => o.records[i].listed_several(),
            }
            Self::save(own, o).await?;
            match looked {
                Looked::One(_) => {}
                Looked::Uncertain => {
                    return Err(AdapterError::Blocked(
                        BlockedReason::UncertainDnsRecord,
                        format!(
                            "the create of {what} may have reached Vultr ({why}), and {listings} zone listings since \
                             show no such record; if the Vultr console shows none either: oduflow abandon {} --kind \
                             dns --by NAME --reason WHY (the next run creates it), else oduflow adopt {} --kind dns \
                             --id RECORD_ID",
                            t.client, t.client
                        ),
                    ));
                }
                Looked::Again => {
                    return Err(AdapterError::Pending(format!(
                        "the create of {what} may have reached Vultr ({why}); zone listing {listings} of \
                         {LOST_CREATE_LISTINGS_MAX} shows no such record yet"
                    )));
                }
                Looked::Several(many) => {
                    let ids: Vec<&str> = many.iter().map(|r| r.id.as_str()).collect();
                    return Err(AdapterError::Blocked(
                        BlockedReason::UncertainDnsRecord,
                        format!(
                            "the create of {what} may have reached Vultr ({why}), and {} records match it: {}; \
                             oduflow adopt {} --kind dns --id RECORD_ID for the one oduflow made (the others are \
                             not touched)",
                            many.len(),
                            ids.join(", "),
                            t.client
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A record of a conflicting type at `name` that this client does not
    /// own, from a zone listing started after this check began: a record
    /// made a moment ago (by an operator, by another worker process for a
    /// client given the same name) is seen before a second one is created.
    /// `z`: the listing this ensure took already (one serves its steps: a
    /// record it made since is its own, so not foreign).
    async fn foreign(
        &self,
        t: &IdentityTarget,
        name: &str,
        o: &Owned,
        own: &dyn Ownership,
        z: &mut Option<ZoneView>,
    ) -> Result<(), AdapterError> {
        let z = self.listed(own, z).await?;
        let Some(r) = z
            .items()
            .iter()
            .find(|r| r.name == name && CONFLICTING.contains(&r.record_type.as_str()) && !o.owns(&r.id.0))
        else {
            return Ok(());
        };
        let others: Vec<&str> = z
            .items()
            .iter()
            .filter(|m| m.name == name && m.record_type == "TXT")
            .filter_map(|m| dns_marker_owner(&m.data))
            .filter(|id| *id != t.client_id)
            .collect();
        if !others.is_empty() {
            return Err(AdapterError::Blocked(
                BlockedReason::DnsRecordForeign,
                format!(
                    "record {} ({} {} -> {}, ttl {}) exists, and its name carries oduflow's owner marker for client \
                     {}: it is that client's, never this one's; it is not touched (`oduflow reconcile --all` \
                     reports it with the command that recovers or deletes it). Give this client another DNS name: \
                     oduflow client update {} --dns-name NAME",
                    r.id,
                    r.record_type,
                    self.fqdn(&r.name),
                    r.data,
                    r.ttl,
                    others.join(", "),
                    t.client
                ),
            ));
        }
        Err(AdapterError::Blocked(
            BlockedReason::DnsRecordForeign,
            format!(
                "record {} ({} {} -> {}, ttl {}) exists and oduflow did not create it; it is not touched. To make \
                 it this client's (oduflow then points it at the VM and deletes it with the client): oduflow adopt \
                 {c} --kind dns --id {}; or give the client another DNS name: oduflow client update {c} --dns-name \
                 NAME",
                r.id,
                r.record_type,
                self.fqdn(&r.name),
                r.data,
                r.ttl,
                r.id,
                c = t.client
            ),
        ))
    }

    /// The listing this ensure took, else a new one started now.
    async fn listed<'z>(&self, own: &dyn Ownership, z: &'z mut Option<ZoneView>) -> Result<&'z ZoneView, AdapterError> {
        if z.is_none() {
            *z = Some(self.zone(own, self.now_ms()).await?);
        }
        Ok(z.as_ref().expect("listed above"))
    }

    /// Records at `name` that carry this client's owner marker and that it
    /// does not own: made for it before its ownership record was lost (a
    /// database restored from an older backup, the client recovered under
    /// its id). Taken back by id, one per type (the marker, A, AAAA): the
    /// record set itself says whose they are. Several of one type: none of
    /// them is taken (the name check then blocks on them). An address
    /// record is taken only while no other client's marker stands at the
    /// name: the name may have been given since to that client, whose
    /// record it then is. Whether any was.
    async fn reclaim(
        &self,
        t: &IdentityTarget,
        name: &str,
        o: &mut Owned,
        own: &dyn Ownership,
        z: &mut Option<ZoneView>,
    ) -> Result<bool, AdapterError> {
        let mine = dns_owner_marker(&t.client_id);
        let z = self.listed(own, z).await?.clone();
        let marked = |r: &DnsRecord| r.record_type == "TXT" && same_data("TXT", &r.data, &mine);
        if !z.items().iter().any(|r| r.name == name && marked(r)) {
            return Ok(false);
        }
        let shared = z
            .items()
            .iter()
            .filter(|r| r.name == name && r.record_type == "TXT")
            .filter_map(|r| dns_marker_owner(&r.data))
            .any(|owner| owner != t.client_id);
        let mut took = false;
        for rtype in ["TXT", "A", "AAAA"] {
            if o.records.iter().any(|r| r.rtype == rtype && r.id().is_some()) || (shared && rtype != "TXT") {
                continue;
            }
            let of: Vec<&DnsRecord> = z
                .items()
                .iter()
                .filter(|r| r.name == name && r.record_type == rtype && !o.owns(&r.id.0))
                .filter(|r| rtype != "TXT" || marked(r))
                .collect();
            let [one] = of.as_slice() else { continue };
            o.adopt(&self.domain, one, (BY_MARKER, IdSource::ReclaimedByMarker), self.now_ms())
                .map_err(AdapterError::Failed)?;
            took = true;
        }
        if took {
            Self::save(own, o).await?;
        }
        Ok(took)
    }

    /// Creates one record: recorded as sent before the POST can leave, its
    /// id recorded from the answer.
    async fn create(&self, o: &mut Owned, own: &dyn Ownership, rtype: &str, name: &str, data: &str) -> Step0 {
        o.records.push(OwnedRecord::claimed(&self.domain, rtype, name, data, self.ttl, self.now_ms()));
        Self::save(own, o).await?;
        own.reached("dns-record-claimed");
        let req = DnsRecordRequest {
            name: name.to_owned(),
            record_type: rtype.to_owned(),
            data: data.to_owned(),
            ttl: Some(self.ttl),
            priority: None,
        };
        let outcome = self.sent_by(own).dns_record_create(&self.domain, &req).await;
        own.reached("dns-record-created");
        let last = o.records.len() - 1;
        let what = format!("{rtype} {} -> {data}", self.fqdn(name));
        match outcome {
            Outcome::Accepted(r) => {
                o.records[last].know(&r.id.0, IdSource::Response);
                let id = r.id.0.clone();
                self.view_add(r);
                Self::save(own, o).await.map_err(|e| {
                    AdapterError::Failed(format!(
                        "{what}: record {id} created, but {e}; the run that recorded since resolves it"
                    ))
                })?;
                Ok(format!("{what} (record {id} created)"))
            }
            Outcome::Unknown { reason } => {
                o.records[last].lost = Some(reason.clone());
                o.records[last].lost_ms = Some(self.now_ms());
                Self::save(own, o).await?;
                Err(AdapterError::Pending(format!(
                    "the create of {what} got no answer ({reason}); a zone listing decides"
                )))
            }
            Outcome::Rejected { status, message } => {
                o.records.pop();
                Self::save(own, o).await?;
                Err(AdapterError::Failed(format!("the create of {what} was rejected with {status}: {message}")))
            }
            Outcome::NotSent { reason } => {
                o.records.pop();
                Self::save(own, o).await?;
                Err(AdapterError::Failed(format!("the create of {what} was not sent: {reason}")))
            }
        }
    }

    /// A record this process created goes into the shared view, so another
    /// client's check sees it before the next listing.
    fn view_add(&self, r: DnsRecord) {
        // (A listing under way as it was made may hold it already: once
        // is enough, twice would read as two records.)
        self.view.edit(move |v| {
            if !v.iter().any(|x| x.id == r.id) {
                v.push(r.clone())
            }
        });
    }

    /// Brings an owned record to the wanted name, data and TTL with one
    /// PATCH by id (its id is kept). `Ok(false)`: Vultr no longer has it.
    async fn patch(
        &self,
        o: &mut Owned,
        own: &dyn Ownership,
        i: usize,
        name: &str,
        data: &str,
    ) -> Result<bool, AdapterError> {
        let id = o.records[i].id().expect("only records with an id are patched").to_owned();
        let p = DnsRecordPatch { name: name.to_owned(), data: data.to_owned(), ttl: self.ttl };
        match self.sent_by(own).dns_record_patch(&self.domain, &DnsRecordId(id.clone()), &p).await {
            Outcome::Accepted(()) => {
                let r = &mut o.records[i];
                (r.name, r.data, r.ttl) = (p.name.clone(), p.data.clone(), p.ttl);
                (r.missing, r.missing_ms) = (0, None);
                Self::save(own, o).await?;
                self.view.edit(move |v| {
                    for r in v.iter_mut().filter(|r| r.id.0 == id) {
                        (r.name, r.data, r.ttl) = (p.name.clone(), p.data.clone(), p.ttl);
                    }
                });
                Ok(true)
            }
            Outcome::Rejected { status: 404, .. } => Ok(false),
            Outcome::Rejected { status, message } => {
                Err(AdapterError::Failed(format!("the update of record {id} was rejected with {status}: {message}")))
            }
            Outcome::Unknown { reason } | Outcome::NotSent { reason } => Err(AdapterError::Failed(format!(
                "the update of record {id} got no answer ({reason}); sent again later"
            ))),
        }
    }

    /// One 404 to the GET or PATCH (`how`) of owned record `i`, which is not
    /// being deleted: counted, never a verdict on its own. `Ok(())` once it
    /// is taken as gone (`gone_ms` set: see [`RECORD_MISSING_MAX`]); until
    /// then `Waiting`, asked again [`RECORD_MISSING_SPACING_MS`] later.
    async fn missing(&self, o: &mut Owned, own: &dyn Ownership, i: usize, how: &str) -> Result<(), AdapterError> {
        let now = self.now_ms();
        let r = &mut o.records[i];
        r.missing += 1;
        let first = *r.missing_ms.get_or_insert(now);
        let (n, id) = (r.missing, r.id().unwrap_or_default().to_owned());
        let gone =
            n >= RECORD_MISSING_MAX && now - first >= RECORD_MISSING_MS && now - r.claimed_ms >= RECORD_GET_LAG_MS;
        if gone {
            r.gone_ms = Some(now);
        }
        Self::save(own, o).await?;
        if gone {
            return Ok(());
        }
        Err(AdapterError::Waiting {
            until_ms: now + RECORD_MISSING_SPACING_MS,
            detail: format!(
                "record {id} answers 404 to its {how} ({n} in a row over {} s); a 404 may be temporary: it is taken \
                 as gone after {RECORD_MISSING_MAX} over {} s, then made again and this id deleted; asked again in \
                 {} s",
                (now - first) / 1000,
                RECORD_MISSING_MS / 1000,
                RECORD_MISSING_SPACING_MS / 1000
            ),
        })
    }

    /// A read found owned record `i`: its count of 404s starts again.
    async fn found(o: &mut Owned, own: &dyn Ownership, i: usize) -> Result<(), AdapterError> {
        let r = &mut o.records[i];
        if r.missing == 0 && r.missing_ms.is_none() {
            return Ok(());
        }
        (r.missing, r.missing_ms) = (0, None);
        Self::save(own, o).await
    }

    /// A read by id found owned record `i` other than recorded (renamed,
    /// repointed or given another TTL behind oduflow's back: in the console,
    /// or by a timeline a restore discarded): what it found is recorded, so
    /// the next ensure, which compares the spec with what is recorded,
    /// brings it back by PATCH instead of keeping it as it is.
    async fn observed(o: &mut Owned, own: &dyn Ownership, i: usize, seen: &DnsRecord) -> Result<(), AdapterError> {
        let r = &mut o.records[i];
        if r.name == seen.name && same_data(&r.rtype, &r.data, &seen.data) && r.ttl == seen.ttl {
            return Ok(());
        }
        (r.name, r.data, r.ttl) = (seen.name.clone(), seen.data.clone(), seen.ttl);
        Self::save(own, o).await
    }

    async fn ensure_one(
        &self,
        t: &IdentityTarget,
        o: &mut Owned,
        own: &dyn Ownership,
        rtype: &str,
        data: &str,
        z: &mut Option<ZoneView>,
    ) -> Step0 {
        let name = t.dns_name.as_str();
        let what = format!("{rtype} {} -> {data}", self.fqdn(name));
        let here = |r: &OwnedRecord| {
            r.rtype == rtype
                && r.deletion != Deletion::Answered
                && r.gone_ms.is_none()
                && self.zone_of(r) == self.domain
        };
        let mut pos = o.records.iter().position(here);
        if pos.is_none() && self.reclaim(t, name, o, own, z).await? {
            pos = o.records.iter().position(here);
        }
        if let Some(i) = pos {
            let r = &o.records[i];
            if r.name == name && same_data(rtype, &r.data, data) && r.ttl == self.ttl {
                return Ok(format!("{what} (record {}, kept)", r.id().unwrap_or("")));
            }
            if r.name != name {
                self.foreign(t, name, o, own, z).await?;
            }
            if self.patch(o, own, i, name, data).await? {
                return Ok(format!("{what} (record {}, updated in place)", o.records[i].id().unwrap_or("")));
            }
            // A 404 to the PATCH, counted like a GET's: once the record is
            // taken as gone (deleted in the console, say), a new one; the old
            // id is deleted below, as no longer wanted.
            self.missing(o, own, i, "PATCH").await?;
        }
        self.foreign(t, name, o, own, z).await?;
        self.create(o, own, rtype, name, data).await
    }
}

type Step0 = Result<String, AdapterError>;

impl IdentityAdapter for DnsAdapter {
    fn name(&self) -> &str {
        "dns"
    }

    fn ensure<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            let mut o = Owned::from_value(&own.get())?;
            let wanted = Self::wanted(t)?;
            self.resolve_lost(t, &mut o, own).await?;
            let mut done = Vec::new();
            // One zone listing, taken when a step first needs it, serves
            // every step of this ensure.
            let mut z = None;
            // A record whose PATCH answered 404 is being counted: the others
            // are still brought to the spec, so records deleted together
            // (an address change after a console deletion) are counted, and
            // made again, together rather than one minute after another.
            let mut waiting = None;
            for (rtype, data) in &wanted {
                match self.ensure_one(t, &mut o, own, rtype, data, &mut z).await {
                    Ok(d) => done.push(d),
                    Err(e @ AdapterError::Waiting { .. }) => {
                        waiting.get_or_insert(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(e) = waiting {
                return Err(e);
            }
            // A type no longer wanted (an address that went away): deleted,
            // by id, as it is oduflow's.
            let stale: Vec<usize> = (0..o.records.len())
                .filter(|i| {
                    let r = &o.records[*i];
                    r.deletion != Deletion::Answered
                        && (r.gone_ms.is_some()
                            || self.zone_of(r) != self.domain
                            || !wanted.iter().any(|(w, _)| *w == r.rtype))
                })
                .collect();
            for i in stale.into_iter().rev() {
                self.delete_one(&mut o, own, i).await?;
            }
            Ok(done.join("; "))
        })
    }

    fn check<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, Presence> {
        Box::pin(async move {
            let mut o = Owned::from_value(&own.get())?;
            let mut seen = Vec::new();
            // Every owned record is read before a 404 is answered: records
            // deleted together (in the console, or after the backup a
            // restore brought back) are taken as gone in one minute, not
            // one after another.
            let mut missing: Option<AdapterError> = None;
            let mut i = 0;
            while i < o.records.len() {
                let Some(id) = o.records[i].id().map(str::to_owned) else {
                    // A create whose outcome is unknown: it may exist.
                    seen.push(None);
                    i += 1;
                    continue;
                };
                let zone = self.zone_of(&o.records[i]).to_owned();
                let (deleting, gone) = (o.records[i].deletion == Deletion::Answered, o.records[i].gone_ms.is_some());
                match self.record_in(&self.sent_by(own), &zone, &id).await? {
                    Some(r) => {
                        Self::found(&mut o, own, i).await?;
                        Self::observed(&mut o, own, i, &r).await?;
                        seen.push(Some(r));
                    }
                    // A GET 404 after a DELETE of ours was answered: deleted.
                    None if deleting => {
                        o.records.remove(i);
                        Self::save(own, &o).await?;
                        continue;
                    }
                    // Being removed (its DELETE not yet answered), or taken
                    // as gone already (its DELETE comes with the next
                    // ensure): still this client's until then.
                    None if t.removing || gone => seen.push(None),
                    None => {
                        let answer = match self.missing(&mut o, own, i, "GET").await {
                            Ok(()) => AdapterError::Pending(format!(
                                "record {id} is taken as gone after {RECORD_MISSING_MAX} GETs or PATCHes answered \
                                 404 over {} s or more; the next ensure makes a new one and deletes this id",
                                RECORD_MISSING_MS / 1000
                            )),
                            Err(e @ AdapterError::Waiting { .. }) => e,
                            Err(e) => return Err(e),
                        };
                        // While a record is still being counted the step
                        // waits for its next read (`Waiting`, not a poll
                        // interval); one taken as gone in this pass is made
                        // again by the next ensure either way.
                        if !matches!(missing, Some(AdapterError::Waiting { .. })) {
                            missing = Some(answer);
                        }
                    }
                }
                i += 1;
            }
            if let Some(e) = missing {
                return Err(e);
            }
            if t.removing {
                return Ok(match seen.len() {
                    0 => Presence::Absent,
                    n => Presence::Present(format!("{n} record(s) of this client still at Vultr or uncertain")),
                });
            }
            let wanted = Self::wanted(t)?;
            let all = wanted.iter().all(|(rtype, data)| {
                seen.iter().flatten().any(|r| {
                    r.record_type == *rtype
                        && r.name == t.dns_name
                        && same_data(rtype, &r.data, data)
                        && r.ttl == self.ttl
                })
            });
            if !all {
                return Ok(Presence::Absent);
            }
            let shown: Vec<String> = seen
                .iter()
                .flatten()
                .map(|r| format!("{} {} -> {} (record {})", r.record_type, self.fqdn(&r.name), r.data, r.id))
                .collect();
            Ok(Presence::Present(shown.join("; ")))
        })
    }

    fn remove<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            let mut o = Owned::from_value(&own.get())?;
            // A lost create must be found to be deleted.
            self.resolve_lost(t, &mut o, own).await?;
            // Records carrying this client's owner marker that its ownership
            // record lacks (made after the backup it was restored from): a
            // client is never reported deleted while they are live. Its
            // marker and A record owned by id: nothing to look for.
            let has = |rtype: &str| o.records.iter().any(|r| r.rtype == rtype && r.id().is_some());
            if !(has("TXT") && has("A")) {
                self.reclaim(t, &t.dns_name, &mut o, own, &mut None).await?;
            }
            let n = o.records.len();
            // The owner marker goes last: a record of oduflow's is never
            // left at Vultr without the marker that traces it.
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|i| o.records[*i].rtype == "TXT");
            for i in order {
                if o.records[i].deletion != Deletion::Answered {
                    self.delete_one(&mut o, own, i).await?;
                }
            }
            Ok(format!("{n} record(s) deleted by id"))
        })
    }

    fn settles(&self) -> &'static [BlockedReason] {
        &[BlockedReason::DnsRecordForeign, BlockedReason::UncertainDnsRecord]
    }

    fn settle<'a>(
        &'a self,
        t: &'a IdentityTarget,
        owned: &'a serde_json::Value,
        how: Settle<'a>,
    ) -> BoxFuture<'a, Result<Settled, SettleError>> {
        Box::pin(async move {
            let mut o = Owned::from_value(owned)?;
            let (event, detail) = match how {
                Settle::Adopt { id, by, now_ms } => {
                    let rec = self.adoptable(t, id).await?;
                    o.adopt(&self.domain, &rec, (by, IdSource::AdoptedByOperator), now_ms)?;
                    let detail =
                        serde_json::json!({ "by": by, "record": id, "type": rec.record_type, "data": rec.data });
                    (oduflow_model::EventKind::DnsRecordAdopted, detail)
                }
                Settle::Abandon { by, reason } => {
                    let lost = o.abandon_lost();
                    if let Some(r) = o.records.iter().find(|r| lost.is_empty() && r.id().is_none()) {
                        // Several records matched it, or no listing has
                        // looked yet: abandoning would attest an absence
                        // nothing has shown.
                        return Err(format!(
                            "the create of {} {} -> {} for {} has an unknown outcome, but no zone listing has \
                             shown it absent (one found several matching records, or none has looked yet): nothing to \
                             abandon; oduflow adopt {} --kind dns --id RECORD_ID for the one oduflow made, or reconcile \
                             to look again",
                            r.rtype,
                            self.fqdn(&r.name),
                            r.data,
                            t.client,
                            t.client
                        )
                        .into());
                    }
                    if lost.is_empty() {
                        return Err(format!(
                            "no DNS record create of {} has an unknown outcome: nothing to abandon",
                            t.client
                        )
                        .into());
                    }
                    let records: Vec<String> =
                        lost.iter().map(|r| format!("{} {} -> {}", r.rtype, r.name, r.data)).collect();
                    let detail = serde_json::json!({ "by": by, "reason": reason, "records": records });
                    (oduflow_model::EventKind::DnsCreateAbandoned, detail)
                }
            };
            Ok(Settled { owned: o.to_value(), event, detail })
        })
    }
}

impl DnsZone for DnsAdapter {
    fn zone(&self) -> &str {
        &self.domain
    }

    fn records(&self) -> BoxFuture<'_, Result<Vec<ZoneRecord>, oduflow_model::provider::ProviderError>> {
        Box::pin(async move {
            let listed = self.client.dns_record_list(&self.domain).await?;
            Ok(listed
                .into_iter()
                .map(|r| ZoneRecord { id: r.id.0, rtype: r.record_type, name: r.name, data: r.data })
                .collect())
        })
    }

    fn delete<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<DeleteOutcome, oduflow_model::provider::ProviderError>> {
        Box::pin(async move { Ok(self.client.dns_record_delete(&self.domain, &DnsRecordId(id.to_owned())).await?) })
    }

    fn exists<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, oduflow_model::provider::ProviderError>> {
        Box::pin(
            async move { Ok(self.client.dns_record_get(&self.domain, &DnsRecordId(id.to_owned())).await?.is_some()) },
        )
    }
}

impl DnsAdapter {
    /// The record `id` an operator asks to adopt for the client: one that
    /// exists in the zone, at the client's DNS name, of a type oduflow
    /// keeps there (A or AAAA).
    async fn adoptable(&self, t: &IdentityTarget, id: &str) -> Result<DnsRecord, SettleError> {
        let domain = &self.domain;
        let read = self.client.dns_record_get(domain, &DnsRecordId(id.to_owned())).await;
        let rec = read
            .map_err(|e| SettleError::Provider(e.into()))?
            .ok_or_else(|| format!("record {id} does not exist in {domain}"))?;
        if rec.name != t.dns_name {
            return Err(format!(
                "record {id} is {} {}.{domain}, not at the client's DNS name {}.{domain}",
                rec.record_type, rec.name, t.dns_name
            )
            .into());
        }
        if !matches!(rec.record_type.as_str(), "A" | "AAAA") {
            return Err(format!(
                "record {id} is a {} record: only A and AAAA records can be adopted (remove it in the Vultr \
                 console, or give the client another --dns-name)",
                rec.record_type
            )
            .into());
        }
        Ok(rec)
    }

    /// One DELETE by id of an owned record; marked `deleting` once answered
    /// (the check's GET 404 then drops it).
    async fn delete_one(&self, o: &mut Owned, own: &dyn Ownership, i: usize) -> Result<(), AdapterError> {
        let id = o.records[i].id().expect("lost creates are resolved first").to_owned();
        let zone = self.zone_of(&o.records[i]).to_owned();
        // A 404 so soon after the create proves nothing yet, whether or not
        // a DELETE was recorded before: a run may have recorded one and died
        // before sending it. Later, a 404 confirms it.
        if o.records[i].deletion == Deletion::None {
            o.records[i].deletion = Deletion::Sent;
            Self::save(own, o).await?;
        }
        match self.sent_by(own).dns_record_delete(&zone, &DnsRecordId(id.clone())).await {
            Ok(DeleteOutcome::NotFound) if self.now_ms() - o.records[i].claimed_ms < RECORD_GET_LAG_MS => {
                Err(AdapterError::Pending(format!("record {id} answers 404 to its DELETE so soon after its create")))
            }
            Ok(DeleteOutcome::Sent | DeleteOutcome::NotFound) => {
                own.reached("dns-record-deleted");
                o.records[i].deletion = Deletion::Answered;
                Self::save(own, o).await?;
                self.view.edit(move |v| v.retain(|r| r.id.0 != id));
                Ok(())
            }
            Ok(DeleteOutcome::Refused { status, message }) => {
                Err(AdapterError::Failed(format!("deleting record {id}: refused with {status}: {message}")))
            }
            Err(e) => Err(AdapterError::Failed(format!("deleting record {id}: {e}"))),
        }
    }
}
