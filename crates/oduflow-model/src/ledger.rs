//! The lifecycle of an at-most-once side effect: a create (a VM, a volume,
//! an attach, a DNS record) or a change (a PATCH) that is recorded before
//! it is sent.
//! The store's ledger derives it from a receipt's columns, in one place;
//! everything else matches on it instead of reading which columns are null.

use serde::{Deserialize, Serialize};

/// How a resource id came to be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdSource {
    /// The create call's own response.
    Response,
    /// Found by looking after an unknown outcome: the dispatch's unique
    /// label, or a DNS record's name, type and data in a zone listing.
    AdoptedByLabel,
    /// Named by an operator (`oduflow adopt`), after verification.
    AdoptedByOperator,
    /// A read showed it made after its answer was lost: a change (a PATCH)
    /// on a known resource, or an attach (the volume attached to the VM,
    /// whose id it records).
    ConfirmedByRead,
    /// A DNS record found by the owner marker its name carries, after the
    /// record of its create was lost (a database restored from an older
    /// copy).
    ReclaimedByMarker,
}

impl IdSource {
    pub fn as_str(self) -> &'static str {
        match self {
            IdSource::Response => "response",
            IdSource::AdoptedByLabel => "adopted_by_label",
            IdSource::AdoptedByOperator => "adopted_by_operator",
            IdSource::ConfirmedByRead => "confirmed_by_read",
            IdSource::ReclaimedByMarker => "reclaimed_by_marker",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "response" => Some(Self::Response),
            "adopted_by_label" => Some(Self::AdoptedByLabel),
            "adopted_by_operator" => Some(Self::AdoptedByOperator),
            "confirmed_by_read" => Some(Self::ConfirmedByRead),
            "reclaimed_by_marker" => Some(Self::ReclaimedByMarker),
            _ => None,
        }
    }
}

/// Where one side effect stands. Every case but `Unmarked` and `Unknown`
/// holds write-once evidence: a send that provably never left, an id and
/// how it became known, a refusal, an operator's attestation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Effect {
    /// Claimed and never marked sent: the mark is recorded right before a
    /// request leaves, so it never left, unless a database restored from a
    /// backup taken between the claim and the mark lost the mark, or a
    /// stale run's mark is still on its way (which only a creating run may
    /// disregard). `not_sent`: sends before that provably never left.
    Unmarked { not_sent: i64, observations: i64 },
    /// Its last send provably never left the process (no connection): it
    /// may be sent again on the same receipt, up to the polling limit.
    NotSent { count: i64, reason: String },
    /// Marked sent; the answer was lost or never read: only reads tell.
    Unknown { observations: i64 },
    /// The provider's id of what it made, and how that became known.
    Known { id: String, source: Option<IdSource>, observations: i64 },
    /// A definitive refusal of this very request.
    Rejected { status: u16, message: String },
    /// Given up on an operator's attestation: nothing carries its label, or
    /// the id it was answered with (`id`) was never seen nor listed.
    Abandoned { by: String, reason: String, id: Option<String>, observations: i64 },
}

impl Effect {
    /// The id the provider answered with, a label search found or an
    /// operator named (an abandoned one's too, kept as evidence).
    pub fn id(&self) -> Option<&str> {
        match self {
            Effect::Known { id, .. } | Effect::Abandoned { id: Some(id), .. } => Some(id),
            _ => None,
        }
    }

    /// Not sent, as far as the ledger knows: sending it (again, on the same
    /// receipt) is the way on, after one label search when it was never
    /// marked sent.
    pub fn is_unsent(&self) -> bool {
        matches!(self, Effect::Unmarked { .. } | Effect::NotSent { .. })
    }

    /// It may have made a resource that is still live: known, or of an
    /// unknown outcome; not refused, abandoned or provably never sent.
    pub fn may_own(&self) -> bool {
        matches!(self, Effect::Known { .. } | Effect::Unknown { .. } | Effect::Unmarked { .. })
    }

    /// Its name in the metrics (`oduflow_dispatches{outcome=...}`): how its
    /// id became known (`accepted` for the response's own), or `rejected`,
    /// `abandoned`, `not_sent` (its last send provably never left),
    /// `not_marked_sent` (claimed, never marked sent), `unknown` (only
    /// reads can tell).
    pub fn outcome(&self) -> &'static str {
        match self {
            Effect::Known { source: Some(IdSource::Response) | None, .. } => "accepted",
            Effect::Known { source: Some(s), .. } => s.as_str(),
            Effect::Rejected { .. } => "rejected",
            Effect::Abandoned { .. } => "abandoned",
            Effect::NotSent { .. } => "not_sent",
            Effect::Unmarked { .. } => "not_marked_sent",
            Effect::Unknown { .. } => "unknown",
        }
    }

    /// Neither known nor closed: the provider may hold what it made, and no
    /// id says what that is.
    pub fn is_uncertain(&self) -> bool {
        matches!(self, Effect::Unmarked { .. } | Effect::Unknown { .. })
    }
}

/// How the CLI and the dashboard show it.
impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Effect::Known { id, source, .. } => write!(f, "id {id} ({})", source.map_or("?", |s| s.as_str())),
            Effect::Rejected { status, message } => write!(f, "rejected {status}: {message}"),
            Effect::Abandoned { by, reason, id: None, .. } => write!(f, "abandoned by {by}: {reason}"),
            Effect::Abandoned { by, reason, id: Some(id), .. } => write!(f, "id {id} abandoned by {by}: {reason}"),
            Effect::NotSent { count, reason } => write!(f, "not sent ({count} times): {reason}"),
            Effect::Unmarked { .. } => write!(f, "claimed, never sent: outcome unknown"),
            Effect::Unknown { .. } => write!(f, "outcome unknown"),
        }
    }
}
