//! Bearer tokens: generation, hashing, the constant-time check, and the
//! middleware that guards every route but `/health`.
//!
//! A token is `odf_` followed by 64 hex digits (two UUID v4s: 244 random
//! bits), printed once by `oduflow token create` and stored only as its
//! SHA-256. A request's token is hashed and compared with every live digest
//! in constant time, so neither a timing difference nor a database dump
//! reveals a usable token.
//!
//! The JSON API accepts only `Authorization: Bearer TOKEN`. The dashboard (a
//! read-only page) also accepts the token from an `oduflow_token` cookie set
//! by its login form, or once from a `?token=` query for scripts and headless
//! browsers. Cookies are never accepted by the API, so a page elsewhere cannot
//! make a browser act on the operator's behalf (no CSRF surface).

use crate::AppState;
use crate::error::ApiError;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oduflow_store::TokenScope;
use sha2::{Digest, Sha256};

/// Marks oduflow tokens, so secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "odf_";

/// The cookie the dashboard's login form sets.
pub const COOKIE_NAME: &str = "oduflow_token";

/// Longest token name: a label for people, shown in lists and audit events.
pub const TOKEN_NAME_LEN_MAX: usize = 64;

/// Longest Authorization value we bother hashing. Real tokens are 68 bytes;
/// anything far longer is junk and is refused without work.
const PRESENTED_TOKEN_LEN_MAX: usize = 256;

/// A fresh random token.
pub fn token_generate() -> String {
    format!("{TOKEN_PREFIX}{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Lowercase hex SHA-256 of a token: the only form that is stored.
pub fn token_sha256(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Token names: 1..=64 of ASCII letters, digits, `.`, `_`, `@`, `-`.
pub fn token_name_check(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= TOKEN_NAME_LEN_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "token name {name:?} is not valid: use 1 to {TOKEN_NAME_LEN_MAX} ASCII letters, digits, '.', '_', '@' or '-'"
        ))
    }
}

/// Equality whose running time depends only on the lengths.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Who made a request: the name of the token it carried (recorded as the
/// actor of what it changes) and what that token may do.
#[derive(Clone, Debug)]
pub struct Caller {
    pub token_name: String,
    pub scope: TokenScope,
}

/// The scope a route needs, by method and route template. Every read needs
/// `read`; changes to clients need `operate`; everything else, including a
/// route added later and not named here, needs `admin`.
pub fn scope_needed(method: &Method, route: &str) -> TokenScope {
    if method == Method::GET || method == Method::HEAD {
        return TokenScope::Read;
    }
    match route {
        "/api/v1/clients"
        | "/api/v1/clients/{name}"
        | "/api/v1/clients/{name}/reconcile"
        | "/api/v1/clients/{name}/promote"
        | "/api/v1/bulk/reconcile"
        | "/api/v1/import" => TokenScope::Operate,
        _ => TokenScope::Admin,
    }
}

/// Refuses, with 403, a caller whose token's scope is below the route's.
pub(crate) async fn require_scope(req: Request, next: Next) -> Response {
    let needed = match req.extensions().get::<MatchedPath>() {
        Some(route) => scope_needed(req.method(), route.as_str()),
        None => TokenScope::Admin,
    };
    match req.extensions().get::<Caller>() {
        Some(c) if c.scope >= needed => next.run(req).await,
        Some(c) => ApiError::Forbidden(format!(
            "token {} has scope {}; this route needs {needed} (oduflow token create NAME --scope {needed})",
            c.token_name, c.scope
        ))
        .into_response(),
        None => ApiError::Unauthorized.into_response(),
    }
}

impl Caller {
    pub fn actor(&self) -> String {
        format!("api-token:{}", self.token_name)
    }
}

/// The live token matching `presented`, if any. Every live digest is
/// compared, whatever matched before, so the time taken does not say which.
pub(crate) async fn authenticate(state: &AppState, presented: &str) -> Result<Option<Caller>, ApiError> {
    if presented.is_empty() || presented.len() > PRESENTED_TOKEN_LEN_MAX {
        return Ok(None);
    }
    let digest = token_sha256(presented);
    let mut found = None;
    for live in state.store().api_token_digests_live().await? {
        if ct_eq(live.token_sha256.as_bytes(), digest.as_bytes()) {
            found = Some(Caller { token_name: live.name, scope: live.scope });
        }
    }
    Ok(found)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE_NAME)
        .map(|(_, v)| v.to_owned())
}

/// Guards the JSON API, `/openapi.json` and `/metrics`: a bearer token or 401.
pub(crate) async fn require_bearer(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let caller = match bearer(req.headers()) {
        Some(t) => authenticate(&state, t).await,
        None => Ok(None),
    };
    match caller {
        Ok(Some(c)) => {
            req.extensions_mut().insert(c);
            next.run(req).await
        }
        Ok(None) => ApiError::Unauthorized.into_response(),
        Err(e) => e.into_response(),
    }
}

/// Guards the dashboard: a bearer token, the login cookie or `?token=`;
/// otherwise the login form.
pub(crate) async fn require_browser(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    #[derive(serde::Deserialize)]
    struct TokenQuery {
        token: Option<String>,
    }
    let query_token = axum::extract::Query::<TokenQuery>::try_from_uri(req.uri()).ok().and_then(|q| q.0.token);
    let candidates = [bearer(req.headers()).map(str::to_owned), cookie_token(req.headers()), query_token];
    for t in candidates.into_iter().flatten() {
        match authenticate(&state, &t).await {
            Ok(Some(c)) => {
                req.extensions_mut().insert(c);
                return next.run(req).await;
            }
            Ok(None) => {}
            Err(e) => return e.into_response(),
        }
    }
    crate::dashboard::login_page(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_prefixed_and_hashed() {
        let a = token_generate();
        let b = token_generate();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64, "{a}");
        assert_eq!(token_sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn constant_time_equality() {
        assert!(ct_eq(b"abcd", b"abcd"));
        assert!(!ct_eq(b"abcd", b"abce"));
        assert!(!ct_eq(b"abcd", b"abc"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn names_and_headers() {
        assert!(token_name_check("ci-bot@example.com").is_ok());
        assert!(token_name_check("").is_err());
        assert!(token_name_check("a b").is_err());
        assert!(token_name_check("é").is_err());
        assert!(token_name_check(&"a".repeat(65)).is_err());
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "bearer  odf_x ".parse().unwrap());
        assert_eq!(bearer(&h), Some("odf_x"));
        h.insert(header::AUTHORIZATION, "Basic odf_x".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::COOKIE, "a=1; oduflow_token=odf_y".parse().unwrap());
        assert_eq!(cookie_token(&h).as_deref(), Some("odf_y"));
    }
}
