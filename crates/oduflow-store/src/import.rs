//! Importing a server made outside oduflow, and promoting it: the client,
//! its infra record and the receipts of its VM and volume, written in one
//! transaction, so an import is all there or not at all.

use crate::queue;
use crate::{ClientRow, Result, SpecColumns, Store, StoreError, both, unique_to};
use oduflow_model::*;

/// One server to import: its VM and the volume attached to it, each as
/// `(id, label)` as the provider lists them.
pub struct Import<'a> {
    pub name: &'a ClientName,
    pub spec: &'a ClientSpec,
    pub vm: (&'a str, &'a str),
    pub volume: (&'a str, &'a str),
    /// The key the provider showed them with.
    pub key: &'a KeyFingerprint,
    /// Addresses and mount id as listed.
    pub outputs: &'a ServerOutputs,
    pub by: &'a str,
}

impl Store {
    /// Records an imported server as a client that is `ready` and observed
    /// only, with a receipt per resource that carries its id (adopted by
    /// the operator), as `adopt` leaves it. Refused when the name, its DNS
    /// name, a label or an id is recorded already; nothing is sent.
    pub async fn client_import(&self, imp: &Import<'_>, now_ms: i64) -> Result<ClientRow> {
        crate::named("client_import", async move {
            let id = ClientId::new_v7();
            let SpecColumns { spec, os_id, ref image, ref server, ref dns } =
                SpecColumns::new(imp.name.as_str(), imp.spec)?;
            let dns = dns.as_str();
            let outputs = serde_json::to_string(imp.outputs).map_err(|e| StoreError::Corrupt(format!("outputs {e}")))?;
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                sqlx::query("INSERT INTO clients (id, name, created_ms) VALUES ($1, $2, $3)")
                    .bind(id.as_str()).bind(imp.name.as_str()).bind(now_ms)
                    .execute(&mut *tx).await
                    .map_err(|e| unique_to(e, || StoreError::ClientExists(imp.name.to_string())))?;
                crate::dns_name_free!(tx, dns, id.as_str());
                sqlx::query(
                    "INSERT INTO infra (client_id, region, plan, os_id, volume_gb, volume_type, target, \
                     generation, status, updated_ms, image, server, dns_name, dns_key, key_fingerprint, vm_id, \
                     volume_id, outputs, observe_only) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'present', 1, 'ready', $7, $8, $9, $10, $11, $12, $13, $14, $15, 1)")
                    .bind(id.as_str()).bind(&spec.region).bind(&spec.plan).bind(os_id)
                    .bind(spec.volume_gb).bind(spec.volume_type.as_str()).bind(now_ms)
                    .bind(image).bind(server).bind(&spec.dns_name).bind(dns)
                    .bind(imp.key.as_str()).bind(imp.vm.0).bind(imp.volume.0).bind(&outputs)
                    .execute(&mut *tx).await.map_err(|e| crate::dns_name_race(e, dns))?;
                for (kind, (rid, label)) in [(ResourceKind::Vm, imp.vm), (ResourceKind::Volume, imp.volume)] {
                    let key = OperationKey::new(&id, kind, 1);
                    sqlx::query(
                        "INSERT INTO dispatch_receipts (operation_key, client_ref, resource_kind, \
                         dispatch_generation, label, region, spec_digest, key_fingerprint, claimed_ms, \
                         resource_id, resource_id_source, listed_ms) \
                         VALUES ($1, $2, $3, 1, $4, $5, 'imported', $6, $7, $8, 'adopted_by_operator', $7)")
                        .bind(key.as_str()).bind(id.as_str()).bind(kind.as_str()).bind(label)
                        .bind(&spec.region).bind(imp.key.as_str()).bind(now_ms).bind(rid)
                        .execute(&mut *tx).await
                        .map_err(|e| unique_to(e, || StoreError::ReceiptExists(format!("label {label:?}"))))?;
                }
                queue::event_by(&mut *tx, imp.by, Some(&id), EventKind::ClientImported, &serde_json::json!({
                    "name": imp.name.as_str(), "spec": spec, "vm": imp.vm.0, "volume": imp.volume.0, "by": imp.by,
                }), now_ms).await?;
                tx.commit().await?;
            });
            self.client_get(imp.name.as_str()).await?.ok_or_else(|| StoreError::ClientNotFound(imp.name.to_string()))
        })
        .await
    }

    /// Ends observation: the client is managed from now on. Whether it was
    /// observed only (false: nothing changed).
    pub async fn client_promote(&self, name: &str, by: &str, now_ms: i64) -> Result<bool> {
        crate::named("client_promote", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let id: Option<String> = sqlx::query_scalar(
                    "SELECT c.id FROM clients c JOIN infra i ON i.client_id = c.id \
                     WHERE c.name = $1 AND i.observe_only = 1")
                    .bind(name).fetch_optional(&mut *tx).await?;
                let Some(id) = id else { return Ok(false) };
                sqlx::query("UPDATE infra SET observe_only = 0, updated_ms = $2 WHERE client_id = $1")
                    .bind(&id).bind(now_ms).execute(&mut *tx).await?;
                queue::event_by(&mut *tx, by, Some(&ClientId(id)), EventKind::ClientPromoted,
                    &serde_json::json!({ "by": by }), now_ms).await?;
                tx.commit().await?;
                Ok(true)
            })
        })
        .await
    }
}
