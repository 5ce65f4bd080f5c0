//! The campaign's schedules for a second class of holes, each drawn from the
//! seed like the rest: restores of a copy taken while workers run (on
//! SQLite also a lost `-wal` file), DNS records in every seed (transient
//! 404s to their GETs, a name given to a second client), host clocks off by
//! minutes to hours, and PostgreSQL connections reset while creates wait
//! for their rate slot. Their invariants are checked against the
//! simulator's ledger and zone by [`check_holes`].

use super::{KEY, Params, Rng, Seed};
use anyhow::{Context, Result, bail};
use oduflow_engine::{Clock, SystemClock};
use oduflow_model::*;
use oduflow_sim::Ledger;
use oduflow_store::{Store, StoreError, testing};
use oduflow_vultr::VultrClient;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The simulator's zone, the workers' `ODUFLOW_DNS_DOMAIN`.
pub(super) const DNS_ZONE: &str = "example.com";
/// The DNS adapter's name in the ownership records.
const DNS_ADAPTER: &str = "dns";
/// A host clock off by at least this...
const CLOCK_OFFSET_MIN_MS: u64 = 60_000;
/// ...and at most this (two hours), either way.
const CLOCK_OFFSET_MAX_MS: u64 = 7_200_000;
/// How long the lost-WAL crash waits for the killed workers to be gone.
const KILLED_WAIT_MAX: Duration = Duration::from_secs(3);

/// What a seed draws for these holes (part of [`Params`], drawn after
/// every earlier parameter, so older seeds draw as before).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(super) struct HoleParams {
    /// The older copy is taken in the middle of the first round, while the
    /// workers run (else between rounds, as before).
    pub restore_live: bool,
    /// SQLite: the last round ends with every worker killed and the `-wal`
    /// file lost; the database goes back to its last checkpoint (taken in
    /// the middle of the first round).
    pub lost_wal: bool,
    /// A client created after the copy was taken: absent after the restore.
    pub late_client: bool,
    /// Rate of 404s to DNS record GETs (safety phase).
    pub dns_get_404: f64,
    /// Attempts, while the workers run, to give a client the DNS name
    /// another client holds.
    pub dns_shares: usize,
    /// Per worker slot (a host): its clock offset in ms (0: right).
    pub clock_offsets_ms: Vec<i64>,
    /// The operator's host clock offset (its commands' times).
    pub operator_offset_ms: i64,
    /// PostgreSQL: every session of the database terminated this many
    /// times per round, while the workers wait for a tight rate budget.
    pub resets: usize,
    /// The workers' rate per second in the safety rounds of a seed with
    /// resets (else 1000): creates wait for their slot.
    pub rate_per_sec: u32,
}

impl HoleParams {
    pub(super) fn draw(r: &mut Rng) -> HoleParams {
        // A restore of a copy taken while workers ran (every such seed is a
        // restore seed: `Params::fix`); after one the changes' invariant
        // (11) is not checked, so most seeds restore nothing.
        let restore = r.chance(0.3);
        let lost_wal = restore && r.chance(0.4);
        let offset = |r: &mut Rng| {
            let ms = r.range(CLOCK_OFFSET_MIN_MS, CLOCK_OFFSET_MAX_MS) as i64;
            if r.chance(0.5) { ms } else { -ms }
        };
        let skewed = r.chance(0.35);
        let clock_offsets_ms = (0..4).map(|_| if skewed && r.chance(0.5) { offset(r) } else { 0 }).collect();
        let operator_offset_ms = if skewed && r.chance(0.5) { offset(r) } else { 0 };
        let resets = if r.chance(0.35) { r.range(1, 2) as usize } else { 0 };
        HoleParams {
            restore_live: restore,
            lost_wal,
            late_client: restore && r.chance(0.5),
            dns_get_404: if r.chance(0.6) { r.f() * 0.3 } else { 0.0 },
            dns_shares: r.range(0, 2) as usize,
            clock_offsets_ms,
            operator_offset_ms,
            resets,
            // Vultr's pace (25/s by default) where creates must wait for
            // their slot when the sessions are reset.
            rate_per_sec: if resets > 0 { r.range(15, 40) as u32 } else { 1000 },
        }
    }
}

/// What a seed did for these holes, and what it saw.
#[derive(Default)]
pub(super) struct State {
    pub hp: HoleParams,
    pub sqlite: bool,
    pub dir: PathBuf,
    /// The older copy, once taken (the round-0 snapshot, or the database
    /// file as it was when the `-wal` was lost).
    pub snapshot: Option<String>,
    /// When the copy was restored (this host's clock): what reached the
    /// provider before is the discarded timeline's.
    pub restored_at_ms: Option<i64>,
    /// Every client the campaign created: name and id.
    pub known: Vec<(String, ClientId)>,
    pub figures: Figures,
    /// Clients given a name a live client held (the refusal expected).
    pub shares_wrongly_accepted: Vec<String>,
    /// Clients the restored copy did not have and nothing brought back.
    pub absent: Vec<(String, ClientId)>,
}

/// The figures of these holes, per seed and summed over a run.
#[derive(Default, Clone)]
pub(super) struct Figures {
    pub restores_live: u64,
    pub lost_wal: u64,
    pub late_clients: u64,
    pub recovered: u64,
    pub dns_records: u64,
    pub dns_404s: u64,
    pub shares_refused: u64,
    pub shares_accepted: u64,
    pub clock_offsets: u64,
    pub resets: u64,
}

impl Figures {
    pub(super) fn add(&mut self, o: &Figures) {
        self.restores_live += o.restores_live;
        self.lost_wal += o.lost_wal;
        self.late_clients += o.late_clients;
        self.recovered += o.recovered;
        self.dns_records += o.dns_records;
        self.dns_404s += o.dns_404s;
        self.shares_refused += o.shares_refused;
        self.shares_accepted += o.shares_accepted;
        self.clock_offsets += o.clock_offsets;
        self.resets += o.resets;
    }

    /// The closing note's line for these holes.
    pub(super) fn print(&self, store: &str, restores: u64) {
        println!(
            "store {store}: restores {restores} (of a copy taken while workers ran {}, lost WAL {}; clients created \
             after the copy {}, recovered {}); DNS records made {} (GET 404s injected {}; a held name given to a \
             second client: refused {}, accepted {}); clock offsets applied {}; connection resets {}",
            self.restores_live,
            self.lost_wal,
            self.late_clients,
            self.recovered,
            self.dns_records,
            self.dns_404s,
            self.shares_refused,
            self.shares_accepted,
            self.clock_offsets,
            self.resets
        );
    }
}

impl State {
    pub(super) fn new(p: &Params, store_kind: Option<&str>, dir: &std::path::Path) -> State {
        State { hp: p.holes.clone(), sqlite: store_kind == Some("sqlite"), dir: dir.to_owned(), ..State::default() }
    }

    /// The clock offset of worker slot `k`, if its host's clock is off.
    pub(super) fn offset(&mut self, k: usize) -> Option<i64> {
        let o = self.hp.clock_offsets_ms.get(k).copied().filter(|o| *o != 0)?;
        self.figures.clock_offsets += 1;
        Some(o)
    }
}

/// Is this store error the refusal of a DNS name another client holds?
fn is_name_refusal(e: &StoreError) -> bool {
    matches!(e, StoreError::UpdateRefused(_)) || e.to_string().to_lowercase().contains("dns name")
}

impl Seed<'_> {
    /// The time an operator's command stamps: the database's clock, as
    /// the CLI reads it (`Store::clock_now_ms`) on a host whose wall clock
    /// is off by the drawn offset.
    pub(super) async fn op_now(&self, store: &Store) -> oduflow_store::Result<i64> {
        store.clock_now_ms(SystemClock.now_ms() + self.h.hp.operator_offset_ms).await
    }

    /// Creates every client, recording its id (labels name it).
    pub(super) async fn create_clients(&mut self, store: &Store, names: &[String], spec: &ClientSpec) -> Result<()> {
        for n in names {
            let c = store.client_create(&ClientName::parse(n)?, spec, "campaign", SystemClock.now_ms(), 20).await?;
            self.h.known.push((c.name, c.id));
        }
        Ok(())
    }

    /// After the older copy was taken: a client it will not have.
    pub(super) async fn late_client(&mut self, store: &Store, spec: &ClientSpec, n: usize) -> Result<()> {
        if !self.h.hp.late_client {
            return Ok(());
        }
        self.create_clients(store, &[format!("late{n}")], spec).await?;
        self.h.figures.late_clients += 1;
        Ok(())
    }

    /// Takes the older copy now, while the workers run. PostgreSQL's copy
    /// needs no session on the database: the workers are stopped meanwhile
    /// (their sessions are terminated, a reset for them). For the lost-WAL
    /// variant (SQLite), a checkpoint instead: the point it goes back to
    /// (tried again while a reader holds frames back, at most
    /// `CHECKPOINT_TRIES_MAX` times; what it copied then is the point).
    pub(super) async fn snapshot_now(&mut self, store: &Store, pids: &[u32]) -> Result<()> {
        if self.h.sqlite && self.h.hp.lost_wal {
            const CHECKPOINT_TRIES_MAX: usize = 20;
            for _ in 0..CHECKPOINT_TRIES_MAX {
                if testing::sqlite_checkpoint(store).await.map_err(anyhow::Error::from_boxed)? {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            return Ok(());
        }
        let stop = !self.h.sqlite;
        if stop {
            signal(pids, "-STOP");
        }
        let snap = testing::snapshot(store, &self.h.dir).await.map_err(anyhow::Error::from_boxed);
        if stop {
            signal(pids, "-CONT");
        }
        self.h.snapshot = Some(snap?);
        self.h.figures.restores_live += 1;
        Ok(())
    }

    /// SQLite, lost-WAL variant: every worker killed, then the database
    /// file taken as it is without its `-wal` (restored after the round).
    pub(super) async fn lose_wal_now(&mut self, pids: &[u32]) -> Result<()> {
        if !(self.h.sqlite && self.h.hp.lost_wal) {
            return Ok(());
        }
        signal(pids, "-KILL");
        let t = Instant::now();
        let alive = |p: &u32| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|st| st.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
        };
        while pids.iter().any(alive) && t.elapsed() < KILLED_WAIT_MAX {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let db = self.url.trim_start_matches("sqlite://").to_owned();
        let copy = self.h.dir.join("lost-wal.db");
        std::fs::copy(&db, &copy).context("copying the database without its -wal")?;
        self.h.snapshot = Some(copy.display().to_string());
        self.h.figures.lost_wal += 1;
        Ok(())
    }

    /// PostgreSQL: terminates every session of the seed's database (the
    /// workers', waiting for their rate slot or not, and the harness's).
    pub(super) async fn reset_connections(&mut self, store: &Store) -> Result<()> {
        if store.backend() != oduflow_store::Backend::Postgres {
            return Ok(());
        }
        let n = testing::pg_terminate_all_sessions(&self.url).await.map_err(anyhow::Error::from_boxed)?;
        self.h.figures.resets += n as u64;
        Ok(())
    }

    /// Gives one client the DNS name another holds: refused while the
    /// holder is live (its target present), whatever the store says.
    pub(super) async fn share_a_name(&mut self, store: &Store, names: &[String]) -> Result<()> {
        if names.len() < 2 {
            return Ok(());
        }
        let a = (self.rng.next() % names.len() as u64) as usize;
        let b = (a + 1 + (self.rng.next() % (names.len() as u64 - 1)) as usize) % names.len();
        let Some(holder) = store.client_get(&names[a]).await? else { return Ok(()) };
        let name = holder.infra.spec.dns_name.clone().unwrap_or_else(|| holder.name.clone());
        let live = holder.infra.target == Target::Present;
        let u = oduflow_model::update::SpecUpdate { dns_name: Some(name.clone()), ..Default::default() };
        match store.client_update(&names[b], &u, "campaign", self.op_now(store).await?, 20).await {
            Ok(_) => {
                self.h.figures.shares_accepted += 1;
                if live {
                    self.h.shares_wrongly_accepted.push(format!("{} given {name}, held by {}", names[b], names[a]));
                }
            }
            Err(e) if is_name_refusal(&e) => self.h.figures.shares_refused += 1,
            Err(StoreError::ClientAbsent(_) | StoreError::ClientMoved(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// The operator's recovery of clients the restored copy does not have
    /// (created after it was taken), as the inventory suggests: `client
    /// create NAME --recover ID` with the spec they were created with. Their
    /// first provisioning adopts what their labels name. One that cannot be
    /// brought back is kept, and [`check_holes`] fails if it has a live
    /// resource.
    pub(super) async fn recover_absent(&mut self, store: &Store, spec: &ClientSpec) -> Result<()> {
        let present: BTreeSet<ClientId> = store.client_list().await?.into_iter().map(|c| c.id).collect();
        let absent: Vec<(String, ClientId)> =
            self.h.known.iter().filter(|(_, id)| !present.contains(id)).cloned().collect();
        for (name, id) in absent {
            let now = self.op_now(store).await?;
            match store.client_create_as(&ClientName::parse(&name)?, spec, Some(&id), "campaign", now, 20).await {
                Ok(_) => self.h.figures.recovered += 1,
                Err(e) => {
                    super::verbose(|| format!("recovering {name} ({id}) refused: {e}"));
                    self.h.absent.push((name, id));
                }
            }
        }
        Ok(())
    }
}

fn signal(pids: &[u32], sig: &str) {
    for p in pids {
        let _ = std::process::Command::new("kill").args([sig, &p.to_string()]).status();
    }
}

/// The invariants of this class of holes, against the database, the
/// simulator's ledger and its zone (faults off).
pub(super) async fn check_holes(store: &Store, ledger: &Ledger, p: &VultrClient, h: &mut State) -> Result<()> {
    let clients = store.client_list().await?;
    check_labelled(ledger, &clients, &h.absent)?;
    check_zone(store, ledger, p, &clients).await?;
    check_unknown_outcomes(store, ledger).await?;
    check_not_ready(p, &clients).await?;
    check_duplicates(ledger, &clients)?;
    if let Some(s) = h.shares_wrongly_accepted.first() {
        bail!("invariant 13: a DNS name a live client held was given to another client ({s})");
    }
    h.figures.dns_records +=
        ledger.resources.iter().filter(|r| r.kind == oduflow_sim::ResourceKind::DnsRecord).count() as u64;
    h.figures.dns_404s +=
        ledger.faults.iter().filter(|f| f.fault == Some(oduflow_sim::FaultKind::DnsGet404)).count() as u64;
    Ok(())
}

/// Invariant 14: per client, at most one live resource per kind among those
/// whose label names it, and none for a client reported deleted or absent
/// from the (restored) database — orphans included, after a restore too.
fn check_labelled(ledger: &Ledger, clients: &[oduflow_store::ClientRow], absent: &[(String, ClientId)]) -> Result<()> {
    let mut live: BTreeMap<(String, &str), Vec<&str>> = BTreeMap::new();
    for r in ledger.resources.iter().filter(|r| r.deleted_at.is_none()) {
        if let Some((c, k)) = Label(r.label.clone()).owner() {
            live.entry((c.0, k.as_str())).or_default().push(r.id.as_str());
        }
    }
    let status: HashMap<&str, (&str, ClientStatus)> =
        clients.iter().map(|c| (c.id.as_str(), (c.name.as_str(), c.infra.status))).collect();
    for ((client, kind), ids) in &live {
        let name = status.get(client.as_str()).map(|s| s.0);
        if ids.len() > 1 {
            bail!("invariant 14: client {name:?} ({client}) has {} live {kind}s labelled for it: {ids:?}", ids.len());
        }
        if let Some((n, ClientStatus::Deleted)) = status.get(client.as_str()) {
            bail!("invariant 14: {n} was reported deleted but {kind} {} labelled for it is live", ids[0]);
        }
        if let Some((n, _)) = absent.iter().find(|(_, id)| id.as_str() == client) {
            bail!(
                "invariant 15: {n} ({client}) is absent from the restored database but {kind} {} labelled for \
                 it is live (nothing brought the client back)",
                ids[0]
            );
        }
    }
    Ok(())
}

/// Invariant 13 (no name in the zone has address records of two clients)
/// and 14 (no record live for a client reported deleted), against the
/// simulator's zone: a record's client is the one whose live VM its
/// address is, and the ones whose ownership record names it.
async fn check_zone(
    store: &Store,
    ledger: &Ledger,
    p: &VultrClient,
    clients: &[oduflow_store::ClientRow],
) -> Result<()> {
    use oduflow_model::provider::Provider as _;
    let mut by_ip: HashMap<String, String> = HashMap::new();
    for r in ledger.resources.iter().filter(|r| r.kind == oduflow_sim::ResourceKind::Instance) {
        let (None, Some((c, _))) = (&r.deleted_at, Label(r.label.clone()).owner()) else { continue };
        if let Some(i) = p.instance_get(&VultrInstanceId(r.id.clone())).await? {
            by_ip.insert(i.main_ip, c.0.clone());
            by_ip.insert(i.v6_main_ip, c.0);
        }
    }
    let by_id: HashMap<&str, &oduflow_store::ClientRow> = clients.iter().map(|c| (c.id.as_str(), c)).collect();
    let deleted = |id: &str| by_id.get(id).is_some_and(|c| c.infra.status == ClientStatus::Deleted);
    let mut per_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let records = p.dns_record_list(DNS_ZONE).await.context("listing the zone")?;
    for r in records.iter().filter(|r| ["A", "AAAA", "CNAME"].contains(&r.record_type.as_str())) {
        let at = by_ip.get(&r.data).cloned();
        if let Some(c) = &at {
            per_name.entry(r.name.clone()).or_default().insert(c.clone());
        }
        let owners = store.adapter_owners_of(DNS_ADAPTER, &r.id.0).await?;
        let named = |c: &&oduflow_store::ClientRow| c.infra.spec.dns_name.as_deref().unwrap_or(&c.name) == r.name;
        let claimants: Vec<&str> = owners
            .iter()
            .map(|o| o.as_str())
            .chain(at.as_deref())
            .chain(clients.iter().filter(named).map(|c| c.id.as_str()))
            .collect();
        let for_deleted = owners.iter().any(|o| deleted(o.as_str()))
            || (at.is_none() && !claimants.is_empty() && claimants.iter().all(|c| deleted(c)));
        if for_deleted {
            // The owners' histories; with none (an ownership a restore
            // lost), those of the clients the record names.
            let mut evidence = String::new();
            let mut told = BTreeSet::new();
            for c in claimants.iter().filter(|c| told.insert(**c)) {
                evidence.push_str(&dns_history(store, &ClientId(c.to_string())).await?);
            }
            bail!(
                "invariant 14: DNS record {} ({} {} -> {}) is live, but its client is reported deleted \
                 (owners {owners:?}, clients named so {:?}){evidence}",
                r.id.0,
                r.record_type,
                r.name,
                r.data,
                clients.iter().filter(named).map(|c| &c.name).collect::<Vec<_>>()
            );
        }
    }
    if let Some((name, cs)) = per_name.iter().find(|(_, cs)| cs.len() > 1) {
        bail!("invariant 13: DNS name {name} has address records of {} clients: {cs:?}", cs.len());
    }
    Ok(())
}

/// Evidence for a DNS invariant: one client's events in order (requests
/// left out), the last `DNS_HISTORY_MAX` of them.
async fn dns_history(store: &Store, client: &ClientId) -> Result<String> {
    const DNS_HISTORY_MAX: usize = 60;
    const DNS_DETAIL_MAX: usize = 600;
    let events = store.events_for_client(client).await?;
    let dns: Vec<String> = events
        .iter()
        .filter(|e| !e.kind.starts_with("request_"))
        .map(|e| {
            let d = e.detail.to_string();
            format!("\n    {} {} {}", e.at_ms, e.kind, &d[..d.floor_char_boundary(DNS_DETAIL_MAX)])
        })
        .collect();
    let skip = dns.len().saturating_sub(DNS_HISTORY_MAX);
    Ok(format!(
        "\n  {client}'s DNS history ({} events, the last {} shown):{}",
        dns.len(),
        dns.len() - skip,
        dns[skip..].concat()
    ))
}

/// Invariant 16: a worker that records a create's outcome as unknown was
/// not the one that stopped it before it left: a create whose outcome a
/// worker recorded unknown reached the provider.
async fn check_unknown_outcomes(store: &Store, ledger: &Ledger) -> Result<()> {
    let receipts = store.receipts_all().await?;
    for e in store.events_by_kind(EventKind::DispatchOutcomeUnknown).await? {
        let Some(op) = e.detail["operation_key"].as_str() else { continue };
        let Some(r) = receipts.iter().find(|r| r.operation_key.as_str() == op) else { continue };
        if r.resource_kind == ResourceKind::Attach {
            continue;
        }
        if !ledger.create_requests_per_label.contains_key(r.label.as_str()) {
            bail!(
                "invariant 16: the outcome of {op} was recorded unknown ({}), but no create with its label {} \
                 reached the provider",
                e.detail["reason"],
                r.label
            );
        }
    }
    Ok(())
}

/// Invariant 17: no client blocked `not_ready` whose VM is healthy at the
/// provider (the simulator's VMs are all healthy within 100 ms of their
/// create: only a wrong deadline blocks one).
async fn check_not_ready(p: &VultrClient, clients: &[oduflow_store::ClientRow]) -> Result<()> {
    use oduflow_model::provider::Provider as _;
    for c in clients.iter().filter(|c| c.infra.blocked_reason == Some(BlockedReason::NotReady)) {
        let Some(vm) = &c.infra.vm_id else { continue };
        if let Some(i) = p.instance_get(vm).await?
            && i.status == "active"
            && i.server_status == "ok"
        {
            bail!("invariant 17: {} is blocked not_ready, but its VM {} is active and ok", c.name, vm.as_str());
        }
    }
    Ok(())
}

/// Invariant 18: a client blocked `duplicate_matches` was shown resources
/// that exist: two or more, each named once and each created under the
/// label they were matched by (a scan that kept a repeated page's item
/// would name one resource twice).
fn check_duplicates(ledger: &Ledger, clients: &[oduflow_store::ClientRow]) -> Result<()> {
    for c in clients.iter().filter(|c| c.infra.blocked_reason == Some(BlockedReason::DuplicateMatches)) {
        let detail = c.infra.blocked_detail.as_deref().unwrap_or_default();
        let ids: Vec<&str> = detail
            .rsplit(": ")
            .next()
            .unwrap_or_default()
            .split(", ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let labels: BTreeSet<&str> = ids
            .iter()
            .filter_map(|id| ledger.resources.iter().find(|r| r.id == *id).map(|r| r.label.as_str()))
            .collect();
        let distinct: BTreeSet<&str> = ids.iter().copied().collect();
        if ids.len() < 2 || distinct.len() != ids.len() || labels.len() != 1 {
            bail!("invariant 18: {} is blocked duplicate_matches on resources that are not several: {detail}", c.name);
        }
    }
    Ok(())
}

/// A provider with the campaign's first key (for the checks).
pub(super) fn checker(sim: &oduflow_sim::SimHandle) -> Result<std::sync::Arc<VultrClient>> {
    super::provider(sim, KEY)
}
