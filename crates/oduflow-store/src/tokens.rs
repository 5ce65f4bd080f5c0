//! Bearer tokens for the HTTP API (`oduflow serve`). The store keeps only the
//! SHA-256 of each token, in lowercase hex: whoever reads the database (or a
//! backup of it) learns nothing that opens the API. Generating a token,
//! hashing it and comparing digests in constant time belong to the server;
//! this module only stores, lists and revokes.
//!
//! Tokens are revoked, never deleted, so an audit event naming a token always
//! has a row to point at.

use crate::queue::event_by;
use crate::{Result, Store, StoreError, both};
use oduflow_model::EventKind;
use serde::Serialize;

/// A token's row id (a UUID v4), independent of its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ApiTokenId(pub String);

/// What a token may do; each scope may do what the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenScope {
    /// Every read: the GET routes, the feed, `/metrics`, the dashboard.
    Read,
    /// Changes to clients: create, update, delete, reconcile, import, promote.
    Operate,
    /// Attested actions (adopt, abandon), orphans, the queue, the
    /// inventory and the key's rotation.
    Admin,
}

impl TokenScope {
    pub const ALL: [TokenScope; 3] = [TokenScope::Read, TokenScope::Operate, TokenScope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Operate => "operate",
            TokenScope::Admin => "admin",
        }
    }

    /// A scope's name; anything else is refused with the names it may be.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("scope {s:?}: use read, operate or admin"))
    }
}

impl std::fmt::Display for TokenScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can be shown about a token: never its hash, never the token.
#[derive(Clone, Debug, Serialize)]
pub struct ApiTokenRow {
    pub id: ApiTokenId,
    pub name: String,
    pub scope: TokenScope,
    pub created_ms: i64,
    pub revoked_ms: Option<i64>,
}

/// A live token's name, scope and digest, for the server's constant-time
/// check. Deliberately not `Serialize`: it never leaves the process.
#[derive(Clone)]
pub struct ApiTokenDigest {
    pub id: ApiTokenId,
    pub name: String,
    pub scope: TokenScope,
    pub token_sha256: String,
}

fn scope_col(s: &str) -> Result<TokenScope> {
    TokenScope::parse(s).map_err(StoreError::Corrupt)
}

impl std::fmt::Debug for ApiTokenDigest {
    /// The digest stays out of logs too; it is as good as a password hash.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTokenDigest").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A live dashboard session: the token it was opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub token_id: ApiTokenId,
    pub token_name: String,
    pub scope: TokenScope,
    pub expires_ms: i64,
}

impl Store {
    /// Opens a dashboard session for `token_id` until `now_ms + ttl_ms`;
    /// expired sessions are cleared on the way.
    pub async fn session_create(&self, id_sha256: &str, token_id: &ApiTokenId, now_ms: i64, ttl_ms: i64) -> Result<()> {
        crate::named("session_create", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                sqlx::query("DELETE FROM dashboard_sessions WHERE expires_ms < $1").bind(now_ms).execute(&mut *tx).await?;
                sqlx::query(
                    "INSERT INTO dashboard_sessions (id_sha256, token_id, created_ms, expires_ms) VALUES ($1, $2, $3, $4)")
                    .bind(id_sha256).bind(&token_id.0).bind(now_ms).bind(now_ms + ttl_ms).execute(&mut *tx).await?;
                tx.commit().await?;
            });
            Ok(())
        })
        .await
    }

    /// The session, while it is unexpired, not signed out, and its token
    /// not revoked.
    pub async fn session_live(&self, id_sha256: &str, now_ms: i64) -> Result<Option<SessionRow>> {
        crate::named("session_live", async move {
            both!(self, p => {
                let row: Option<(String, String, String, i64)> = sqlx::query_as(
                    "SELECT t.id, t.name, t.scope, s.expires_ms FROM dashboard_sessions s \
                     JOIN api_tokens t ON t.id = s.token_id AND t.revoked_ms IS NULL \
                     WHERE s.id_sha256 = $1 AND s.revoked_ms IS NULL AND s.expires_ms > $2")
                    .bind(id_sha256).bind(now_ms).fetch_optional(p).await?;
                row.map(|(id, name, scope, expires_ms)| {
                    Ok(SessionRow { token_id: ApiTokenId(id), token_name: name, scope: scope_col(&scope)?, expires_ms })
                })
                .transpose()
            })
        })
        .await
    }

    /// Ends a session (sign-out); whether it was live.
    pub async fn session_revoke(&self, id_sha256: &str, now_ms: i64) -> Result<bool> {
        crate::named("session_revoke", async move {
            both!(self, p => {
                let n = sqlx::query("UPDATE dashboard_sessions SET revoked_ms = $2 WHERE id_sha256 = $1 AND revoked_ms IS NULL")
                    .bind(id_sha256).bind(now_ms).execute(p).await?.rows_affected();
                Ok(n == 1)
            })
        })
        .await
    }

    /// Stores a new token's digest under `name`. A live token with the same
    /// name is refused (`TokenExists`), so revocation by name is unambiguous.
    pub async fn api_token_create(
        &self,
        name: &str,
        token_sha256: &str,
        scope: TokenScope,
        by: &str,
        now_ms: i64,
    ) -> Result<ApiTokenRow> {
        crate::named("api_token_create", async move {
            let id = uuid::Uuid::new_v4().to_string();
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let live: i64 = sqlx::query_scalar("SELECT count(*) FROM api_tokens WHERE name = $1 AND revoked_ms IS NULL")
                    .bind(name).fetch_one(&mut *tx).await?;
                if live > 0 {
                    return Err(StoreError::TokenExists(name.to_owned()));
                }
                sqlx::query("INSERT INTO api_tokens (id, name, token_sha256, created_ms, scope) VALUES ($1, $2, $3, $4, $5)")
                    .bind(&id).bind(name).bind(token_sha256).bind(now_ms).bind(scope.as_str())
                    .execute(&mut *tx).await
                    .map_err(|e| crate::unique_to(e, || StoreError::TokenExists(name.to_owned())))?;
                event_by(&mut *tx, by, None, EventKind::ApiTokenCreated, &serde_json::json!({ "name": name, "id": id, "scope": scope }), now_ms).await?;
                tx.commit().await?;
            });
            Ok(ApiTokenRow { id: ApiTokenId(id), name: name.to_owned(), scope, created_ms: now_ms, revoked_ms: None })
        })
        .await
    }

    /// Every token ever created, revoked ones included, oldest first.
    pub async fn api_token_list(&self) -> Result<Vec<ApiTokenRow>> {
        crate::named("api_token_list", async move {
            both!(self, p => {
                let rows: Vec<(String, String, String, i64, Option<i64>)> = sqlx::query_as(
                    "SELECT id, name, scope, created_ms, revoked_ms FROM api_tokens ORDER BY created_ms, id")
                    .fetch_all(p).await?;
                rows.into_iter()
                    .map(|(id, name, scope, created_ms, revoked_ms)| {
                        Ok(ApiTokenRow { id: ApiTokenId(id), name, scope: scope_col(&scope)?, created_ms, revoked_ms })
                    })
                    .collect()
            })
        })
        .await
    }

    /// Revokes the live token named `name`; it stops working at once (the
    /// server reads live digests on every request).
    pub async fn api_token_revoke(&self, name: &str, by: &str, now_ms: i64) -> Result<ApiTokenRow> {
        crate::named("api_token_revoke", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let row: Option<(String, i64, String)> = sqlx::query_as(
                    "SELECT id, created_ms, scope FROM api_tokens WHERE name = $1 AND revoked_ms IS NULL")
                    .bind(name).fetch_optional(&mut *tx).await?;
                let Some((id, created_ms, scope)) = row else {
                    return Err(StoreError::TokenNotFound(name.to_owned()));
                };
                // Only while still live: a revocation side by side read it
                // live too (PostgreSQL, read committed) and may have written.
                let n = sqlx::query("UPDATE api_tokens SET revoked_ms = $2 WHERE id = $1 AND revoked_ms IS NULL")
                    .bind(&id).bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n == 0 {
                    return Err(StoreError::TokenNotFound(name.to_owned()));
                }
                event_by(&mut *tx, by, None, EventKind::ApiTokenRevoked, &serde_json::json!({ "name": name, "id": id }), now_ms).await?;
                tx.commit().await?;
                let scope = scope_col(&scope)?;
                Ok(ApiTokenRow { id: ApiTokenId(id), name: name.to_owned(), scope, created_ms, revoked_ms: Some(now_ms) })
            })
        })
        .await
    }

    /// The digests of every live token. The table holds a handful of rows;
    /// the server compares the presented token's digest with each of them in
    /// constant time instead of looking it up by value.
    pub async fn api_token_digests_live(&self) -> Result<Vec<ApiTokenDigest>> {
        crate::named("api_token_digests_live", async move {
            both!(self, p => {
                let rows: Vec<(String, String, String, String)> = sqlx::query_as(
                    "SELECT id, name, scope, token_sha256 FROM api_tokens WHERE revoked_ms IS NULL ORDER BY id")
                    .fetch_all(p).await?;
                rows.into_iter()
                    .map(|(id, name, scope, token_sha256)| {
                        Ok(ApiTokenDigest { id: ApiTokenId(id), name, scope: scope_col(&scope)?, token_sha256 })
                    })
                    .collect()
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn create_list_revoke(store: Store) {
        store.migrate().await.unwrap();
        // Migrating again is harmless (the tokens migration included).
        store.migrate().await.unwrap();
        let a = store.api_token_create("ci", &"a".repeat(64), TokenScope::Admin, "test", 10).await.unwrap();
        assert!(matches!(
            store.api_token_create("ci", &"b".repeat(64), TokenScope::Admin, "test", 11).await,
            Err(StoreError::TokenExists(_))
        ));
        // The same digest twice is refused by the schema as well.
        assert!(matches!(
            store.api_token_create("other", &"a".repeat(64), TokenScope::Admin, "test", 11).await,
            Err(StoreError::TokenExists(_))
        ));
        store.api_token_create("ops", &"c".repeat(64), TokenScope::Admin, "test", 12).await.unwrap();
        let live: Vec<String> = store.api_token_digests_live().await.unwrap().into_iter().map(|d| d.name).collect();
        assert_eq!(live.len(), 2);
        let revoked = store.api_token_revoke("ci", "test", 20).await.unwrap();
        assert_eq!((revoked.id.clone(), revoked.revoked_ms), (a.id.clone(), Some(20)));
        assert!(matches!(store.api_token_revoke("ci", "test", 21).await, Err(StoreError::TokenNotFound(_))));
        let live = store.api_token_digests_live().await.unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].name, "ops");
        assert!(!format!("{live:?}").contains(&"c".repeat(64)), "digests stay out of Debug output");
        // A revoked name can be reused; the revoked row stays.
        store.api_token_create("ci", &"d".repeat(64), TokenScope::Admin, "test", 30).await.unwrap();
        let all = store.api_token_list().await.unwrap();
        assert_eq!(
            all.iter().map(|r| (r.name.as_str(), r.revoked_ms.is_some())).collect::<Vec<_>>(),
            [("ci", true), ("ops", false), ("ci", false)]
        );
        let json = serde_json::to_string(&all).unwrap();
        // The whole digest: a random id may hold "aaaa".
        assert!(!json.contains(&"a".repeat(64)) && !json.contains("token_sha256"), "{json}");
        let kinds: Vec<String> = store.events_recent(10).await.unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["api_token_created", "api_token_revoked", "api_token_created", "api_token_created"]);
        // The metrics aggregates are valid SQL on this backend too.
        let stats = store.stats(100).await.unwrap();
        assert!(stats.jobs_by_state.is_empty() && stats.dispatches_by_outcome.is_empty());
        assert_eq!(stats.oldest_runnable_ms, None);
    }

    #[tokio::test]
    async fn tokens_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        create_list_revoke(Store::connect(&crate::testing::sqlite_url(dir.path()), true).await.unwrap()).await;
    }

    #[tokio::test]
    async fn tokens_postgres() {
        let url = crate::testing::fresh_pg_url().await;
        create_list_revoke(Store::connect(&url, true).await.unwrap()).await;
    }
}
