//! The states a client's infrastructure moves through and the closed set of
//! reasons it can be blocked for.

use serde::{Deserialize, Serialize};

macro_rules! str_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $s)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $s),+
                }
            }

            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

str_enum!(
    /// What the operator wants to exist.
    Target { Present => "present", Absent => "absent" }
);

str_enum!(
    /// Where a client's infrastructure stands. `Ready`, `Deleted` and
    /// `Blocked` are settled: no work is pending for them until someone acts.
    ClientStatus {
        Pending => "pending",
        Provisioning => "provisioning",
        Ready => "ready",
        Deleting => "deleting",
        Deleted => "deleted",
        Blocked => "blocked",
    }
);

impl ClientStatus {
    pub fn is_settled(self) -> bool {
        matches!(self, Self::Ready | Self::Deleted | Self::Blocked)
    }
}

str_enum!(
    /// The closed set of reasons a record is blocked for. Each needs an
    /// operator; none is left automatically. `delete_refused`: DELETE
    /// refused past the polling limit; `provider_unavailable`: reads or
    /// connections failing past it (a revoked key, a wrong URL);
    /// `not_ready`: a resource short of ready past the readiness wait;
    /// `adapter_unconfigured`: an identity recorded as ensured whose adapter
    /// is no longer configured; `preflight_failed`: the spec names
    /// something the provider's catalog lacks (a region without the volume
    /// type, a plan not sold there, an unknown image, SSH key or firewall
    /// group), found before anything was created; `dns_record_foreign`: a
    /// DNS record with the client's DNS name that oduflow did not create
    /// (never touched: adopt it or choose another name);
    /// `uncertain_dns_record`: a DNS record create whose answer was lost,
    /// and the zone shows no single record it could be;
    /// `labelled_orphan`: a live resource whose label names this client
    /// and kind, and that no receipt accounts for (a restored copy lost
    /// its receipt), stands in the way of a first create or of `deleted`,
    /// and cannot be adopted as it is.
    BlockedReason {
        CreateRejected => "create_rejected",
        ConfigMismatch => "config_mismatch",
        KnownResourceMissing => "known_resource_missing",
        DuplicateMatches => "duplicate_matches",
        UncertainCreate => "uncertain_create",
        ForeignAttachment => "foreign_attachment",
        UncertainAttach => "uncertain_attach",
        AttachRejected => "attach_rejected",
        UncertainDelete => "uncertain_delete",
        CredentialChanged => "credential_changed",
        AttemptsExhausted => "attempts_exhausted",
        AdapterFailed => "adapter_failed",
        DeleteRefused => "delete_refused",
        ProviderUnavailable => "provider_unavailable",
        NotReady => "not_ready",
        AdapterUnconfigured => "adapter_unconfigured",
        PreflightFailed => "preflight_failed",
        UpdateRejected => "update_rejected",
        UncertainUpdate => "uncertain_update",
        DnsRecordForeign => "dns_record_foreign",
        UncertainDnsRecord => "uncertain_dns_record",
        LabelledOrphan => "labelled_orphan",
    }
);

str_enum!(
    /// What a job is for. `Noop` exists for queue tests and benchmarks.
    JobKind {
        Provision => "provision",
        Deprovision => "deprovision",
        Noop => "noop",
    }
);

str_enum!(
    /// A job's lifecycle. Only `Queued` jobs are claimable.
    JobState {
        Queued => "queued",
        Done => "done",
        Stale => "stale",
        Failed => "failed",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for r in BlockedReason::ALL {
            assert_eq!(BlockedReason::parse(r.as_str()), Some(*r));
        }
        assert_eq!(ClientStatus::parse("nope"), None);
        assert!(ClientStatus::Blocked.is_settled());
        assert!(!ClientStatus::Deleting.is_settled());
    }
}

str_enum!(
    /// What an audit event records: the `kind` of a row of `events`. Every
    /// writer names one of these; readers of older rows take the text as
    /// it is.
    EventKind {
        AdapterFailed => "adapter_failed",
        AdapterOwned => "adapter_owned",
        AdapterPending => "adapter_pending",
        AdapterState => "adapter_state",
        AdapterUpdated => "adapter_updated",
        ApiTokenCreated => "api_token_created",
        ApiTokenRevoked => "api_token_revoked",
        BackupScheduleConfirmed => "backup_schedule_confirmed",
        BackupScheduleSet => "backup_schedule_set",
        Blocked => "blocked",
        ChangeAnswered => "change_answered",
        ChangeClaimed => "change_claimed",
        ChangeConfirmed => "change_confirmed",
        ChangeSent => "change_sent",
        ChangesNotSentDoubted => "changes_not_sent_doubted",
        ClientCreated => "client_created",
        ClientDeleteRequested => "client_delete_requested",
        ClientImported => "client_imported",
        ClientPromoted => "client_promoted",
        ClientRecreateRequested => "client_recreate_requested",
        ClientUpdateRequested => "client_update_requested",
        DeleteSending => "delete_sending",
        DeleteSent => "delete_sent",
        Deleted => "deleted",
        DispatchAbandoned => "dispatch_abandoned",
        DnsNameReleased => "dns_name_released",
        DnsOrphanDeleteAttested => "dns_orphan_delete_attested",
        DnsRecordAdopted => "dns_record_adopted",
        DriftSeen => "drift_seen",
        DispatchAccepted => "dispatch_accepted",
        DispatchGenerationAdvanced => "dispatch_generation_advanced",
        DispatchOutcomeUnknown => "dispatch_outcome_unknown",
        DispatchRejected => "dispatch_rejected",
        DnsCreateAbandoned => "dns_create_abandoned",
        InventoryReconciled => "inventory_reconciled",
        JobFailed => "job_failed",
        KeyBound => "key_bound",
        KeyRebound => "key_rebound",
        NoopRan => "noop_ran",
        NoopStarted => "noop_started",
        NotSentDoubted => "not_sent_doubted",
        OrphanAdopted => "orphan_adopted",
        OrphanDeleteAttested => "orphan_delete_attested",
        OrphanFound => "orphan_found",
        PreflightReadFailed => "preflight_read_failed",
        ProviderReadFailed => "provider_read_failed",
        QueuePaused => "queue_paused",
        QueueResumed => "queue_resumed",
        Ready => "ready",
        ReceiptClaimed => "receipt_claimed",
        ReconcileRequested => "reconcile_requested",
        RequestNotSent => "request_not_sent",
        RequestSent => "request_sent",
        ResourceAdoptedByLabel => "resource_adopted_by_label",
        ResourceAdoptedByOperator => "resource_adopted_by_operator",
        ResourceDeleted => "resource_deleted",
        ResourceIdRecorded => "resource_id_recorded",
        RestoreDeclared => "restore_declared",
        WebhookAdded => "webhook_added",
        WebhookRemoved => "webhook_removed",
        WebhookReplayAsked => "webhook_replay_asked",
    }
);
