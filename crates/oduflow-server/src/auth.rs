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

/// The dashboard's session cookie: a random session id, never a token.
pub const SESSION_COOKIE: &str = "oduflow_session";
/// The sign-in form's anti-forgery cookie (its value is in the form too).
pub const CSRF_COOKIE: &str = "oduflow_csrf";
/// How long a dashboard session lasts.
pub const SESSION_TTL_MS: i64 = 12 * 3600 * 1000;

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

/// Two secrets compared in constant time.
pub(crate) fn same(a: &str, b: &str) -> bool {
    ct_eq(a.as_bytes(), b.as_bytes())
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
    pub token_id: oduflow_store::ApiTokenId,
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
            found = Some(Caller { token_id: live.id, token_name: live.name, scope: live.scope });
        }
    }
    Ok(found)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of the cookie `name`.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Whether the browser reached us over TLS: a proxy in front that
/// terminates it says so (`X-Forwarded-Proto: https`, or `Forwarded` with
/// `proto=https`). Cookies are then `Secure`.
pub(crate) fn over_tls(headers: &HeaderMap) -> bool {
    let says =
        |h: header::HeaderName, f: fn(&str) -> bool| headers.get_all(h).iter().filter_map(|v| v.to_str().ok()).any(f);
    says(header::HeaderName::from_static("x-forwarded-proto"), |v| {
        v.split(',').next().is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
    }) || says(header::FORWARDED, |v| v.to_ascii_lowercase().contains("proto=https"))
}

/// A cookie's `Set-Cookie` value: HttpOnly, SameSite=Strict, `Secure` over
/// TLS; `max_age_s` 0 clears it.
pub(crate) fn set_cookie(name: &str, value: &str, path: &str, max_age_s: i64, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{name}={value}; HttpOnly; SameSite=Strict; Path={path}; Max-Age={max_age_s}{secure}")
}

/// The anti-forgery value of a session's forms: derived from its id, so a
/// page elsewhere, which cannot read the cookie, cannot make it.
pub(crate) fn session_csrf(session_id: &str) -> String {
    token_sha256(&format!("csrf:{session_id}"))
}

/// A session's caller: the token it was opened with, while the session is
/// live.
async fn session_caller(state: &AppState, headers: &HeaderMap) -> Result<Option<Caller>, ApiError> {
    let Some(id) = cookie(headers, SESSION_COOKIE) else { return Ok(None) };
    let live = state.store().session_live(&token_sha256(&id), state.now_ms()).await?;
    Ok(live.map(|s| Caller { token_id: s.token_id, token_name: s.token_name, scope: s.scope }))
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
    match session_caller(&state, req.headers()).await {
        Ok(Some(c)) => {
            req.extensions_mut().insert(c);
            return next.run(req).await;
        }
        Ok(None) => {}
        Err(e) => return e.into_response(),
    }
    let query_token = axum::extract::Query::<TokenQuery>::try_from_uri(req.uri()).ok().and_then(|q| q.0.token);
    let candidates = [bearer(req.headers()).map(str::to_owned), query_token];
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
    crate::dashboard::login_page(&state, req.headers(), None)
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
        h.insert(header::COOKIE, "a=1; oduflow_session=abc".parse().unwrap());
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("abc"));
        assert!(!over_tls(&h));
        h.insert("x-forwarded-proto", "https".parse().unwrap());
        assert!(over_tls(&h));
    }
}
