//! A key rotation: every recorded resource proven visible with its label
//! under the new key before any record is rebound to it (docs/protocol.md
//! §7).

use super::*;

/// One record the new key could not prove ownership of.
#[derive(Clone, Debug, Serialize)]
pub struct Unproven {
    pub client: String,
    pub kind: ResourceKind,
    pub resource: String,
    pub why: String,
}

/// `oduflow credentials rotate`: with the new key, proves ownership of every
/// recorded resource of every record bound to another key (visible, label
/// matching), then rebinds them all; refuses with the list otherwise.
pub async fn credentials_rotate<P: Provider>(
    store: &Store,
    provider: &P,
    actor: Actor<'_>,
) -> Result<std::result::Result<Vec<String>, Vec<Unproven>>> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    refuse_if_restored(store).await?;
    let new = provider.key_fingerprint();
    let (mut unproven, mut rebind, mut names) = (vec![], vec![], vec![]);
    for c in store.client_list().await? {
        let Some(old) = c.infra.key_fingerprint.clone() else { continue };
        if old == new {
            continue;
        }
        let receipts_before = store.receipts_for_client(&c.id).await?;
        for r in receipts_before.iter().cloned() {
            // Only receipts that may still own a resource need proof.
            if r.resource_kind == ResourceKind::Attach || !crate::current::is_open(&r) {
                continue;
            }
            unproven.extend(unproven_with(provider, &c, &r).await?);
        }
        rebind.push(oduflow_store::Rebind { client: c.id.clone(), old, proven: snapshot(&receipts_before) });
        names.push(c.name.clone());
    }
    if !unproven.is_empty() {
        return Ok(Err(unproven));
    }
    // The rebind is refused for a record whose receipts changed since they
    // were proven (a run recorded a resource in between): nothing is
    // rebound without proof.
    let changed = store.clients_rebind_key(&rebind, &new, actor, now_ms, attempts_max).await?;
    if !changed.is_empty() {
        let unproven = rebind
            .iter()
            .zip(&names)
            .filter(|(r, _)| changed.contains(&r.client))
            .map(|(_, n)| Unproven {
                client: n.clone(),
                kind: ResourceKind::Vm,
                resource: "-".into(),
                why: "its receipts changed while ownership was being proven; run the rotation again".into(),
            })
            .collect();
        return Ok(Err(unproven));
    }
    Ok(Ok(names))
}

/// Why the new key does not prove that `c` owns what receipt `r` may own
/// (the resource by id, with the receipt's label); `None` once proven.
async fn unproven_with<P: Provider>(provider: &P, c: &ClientRow, r: &ReceiptRow) -> Result<Option<Unproven>> {
    let label = r.label.as_str();
    let fail = |why: String| Unproven {
        client: c.name.clone(),
        kind: r.resource_kind,
        resource: r.id().map_or_else(|| format!("label {label}"), str::to_string),
        why,
    };
    // An id an operator adopted is accepted by runs without its label
    // (`oduflow adopt` verified it): proven the same way, by the new
    // key seeing it.
    let by_operator = r.id_source() == Some(IdSource::AdoptedByOperator);
    Ok(match r.resource() {
        Some(id) => match provider.resource_get(&id).await? {
            Some(x) if x.label() == label || by_operator => None,
            Some(x) => Some(fail(format!("label is {:?}, receipt says {label:?}", x.label()))),
            None => Some(fail("not visible with the new key".into())),
        },
        None => Some(fail(
            "the dispatch's outcome is unknown, so ownership cannot be proven; resolve it first, with the \
             old key still in VULTR_API_KEY (`oduflow reconcile`, `oduflow adopt`), or give it up \
             (`oduflow abandon`, which needs no key)"
                .into(),
        )),
    })
}

/// What a record's receipts said when their ownership was proven.
fn snapshot(receipts: &[ReceiptRow]) -> Vec<(String, Option<String>)> {
    let mut v: Vec<_> = receipts.iter().map(|r| (r.operation_key.to_string(), r.id().map(str::to_string))).collect();
    v.sort();
    v
}
