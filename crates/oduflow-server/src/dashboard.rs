//! The dashboard at `/`: one server-rendered page (no scripts, no build
//! step) with clients by status, the intervention queue (each blocked client
//! with its reason, evidence, receipts and the exact commands that resolve
//! it), every client, and recent events. Read-only: it shows commands, it
//! does not run them, so a stolen cookie can only read.
//!
//! Every value from the database is HTML-escaped through [`esc`]; the page
//! is built only from escaped values and fixed markup. The Content Security
//! Policy forbids scripts altogether, as a second line.

use crate::AppState;
use crate::auth::{CSRF_COOKIE, Caller, SESSION_COOKIE, SESSION_TTL_MS, authenticate, cookie, set_cookie};
use crate::error::{ApiError, ApiResult};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use oduflow_model::{BlockedReason, ClientStatus};
use std::collections::HashMap;
use std::fmt::Write;

/// Events shown: enough to see what just happened, short enough to scan.
const RECENT_EVENTS_SHOWN: i64 = 30;

/// Reloads the page this often, so a dashboard left open stays current.
const REFRESH_SECS: u32 = 30;

/// Escapes text for HTML element content and double-quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `2026-11-29 19:55:08 UTC` from epoch milliseconds (the calendar is
/// `oduflow_model::time`'s, shared with the CLI's RFC 3339 times).
fn utc(ms: i64) -> String {
    let c = oduflow_model::time::Civil::from_epoch_ms(ms);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}\
.counts{display:flex;gap:.8em;flex-wrap:wrap}.count{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.5em 1em;min-width:7em}\
.count b{display:block;font-size:1.6em}.blocked b{color:#b00}\
table{border-collapse:collapse;width:100%;background:#fff}td,th{border:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top;font-size:.92em}\
.group{border:1px solid #e0b4b4;border-radius:6px;padding:.4em 1em;margin:1em 0;background:#fff5f5}.pages a,.count a{color:inherit}\
.case{background:#fff;border:1px solid #e0b4b4;border-left:5px solid #b00;border-radius:4px;padding:.6em 1em;margin:.8em 0}\
code{background:#f1f1f1;padding:.1em .3em;border-radius:3px}.cmd code{font-size:1.05em;background:#222;color:#fff;padding:.2em .5em}\
#clients td:first-child,#events td:first-child,#events td:nth-child(2){white-space:nowrap}.muted{color:#777}.status-ready{color:#070}.status-blocked{color:#b00;font-weight:bold}";

fn page(title: &str, body: &str, refresh: bool) -> String {
    let refresh =
        if refresh { format!("<meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">") } else { String::new() };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}<title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    // A `?token=` in the address must not travel to other sites.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

/// Adds a `Set-Cookie` to `r`.
fn with_cookie(mut r: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// The login form, shown (with 401) to a browser without a valid session;
/// its anti-forgery value is in a cookie and in the form, and the sign-in
/// is refused unless both agree (a page elsewhere cannot read the cookie).
pub(crate) fn login_page(s: &AppState, headers: &HeaderMap, error: Option<&str>) -> Response {
    let err = error.map(|e| format!("<p class=\"status-blocked\">{}</p>", esc(e))).unwrap_or_default();
    let csrf = crate::auth::token_generate();
    let body = format!(
        "<h1>oduflow</h1><p>Sign in with an API token (create one with <code>oduflow token create NAME</code>).</p>{err}\
         <form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <input type=\"password\" name=\"token\" size=\"70\" autocomplete=\"off\" \
         placeholder=\"odf_...\"> <button type=\"submit\">Sign in</button></form>"
    );
    let r = html(StatusCode::UNAUTHORIZED, page("oduflow: sign in", &body, false));
    with_cookie(r, &set_cookie(CSRF_COOKIE, &csrf, "/login", 3600, s.secure_cookies(headers)))
}

#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// Checks the form's anti-forgery value and the token; on success opens a
/// session (the cookie holds its random id, never the token: HttpOnly,
/// SameSite=Strict, Secure over TLS, 12 h) and sends the browser to the
/// dashboard.
pub(crate) async fn login(
    State(s): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return login_page(&s, &headers, Some("the form could not be read"));
    };
    let expected = cookie(&headers, CSRF_COOKIE).unwrap_or_default();
    if expected.is_empty() || !crate::auth::same(&expected, &f.csrf) {
        return login_page(
            &s,
            &headers,
            Some("the sign-in form expired or did not come from this page; sign in again"),
        );
    }
    match authenticate(&s, f.token.trim()).await {
        Ok(Some(c)) => {
            let id = crate::auth::token_generate();
            let sha = crate::auth::token_sha256(&id);
            if let Err(e) = s.store().session_create(&sha, &c.token_id, s.now_ms(), SESSION_TTL_MS).await {
                return ApiError::from(e).into_response();
            }
            let tls = s.secure_cookies(&headers);
            let r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
            let r = with_cookie(r, &set_cookie(SESSION_COOKIE, &id, "/", SESSION_TTL_MS / 1000, tls));
            with_cookie(r, &set_cookie(CSRF_COOKIE, "", "/login", 0, tls))
        }
        Ok(None) => login_page(&s, &headers, Some("that token is not valid")),
        Err(e) => e.into_response(),
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// Ends the browser's session (the form's anti-forgery value must be the
/// session's) and clears its cookie.
pub(crate) async fn logout(
    State(s): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let id = cookie(&headers, SESSION_COOKIE).unwrap_or_default();
    let csrf = form.map(|Form(f)| f.csrf).unwrap_or_default();
    if id.is_empty() || !crate::auth::same(&crate::auth::session_csrf(&id), &csrf) {
        return ApiError::Forbidden("sign out from the dashboard's own form".into()).into_response();
    }
    if let Err(e) = s.store().session_revoke(&crate::auth::token_sha256(&id), s.now_ms()).await {
        return ApiError::from(e).into_response();
    }
    let r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    with_cookie(r, &set_cookie(SESSION_COOKIE, "", "/", 0, s.secure_cookies(&headers)))
}

fn outcome(r: &oduflow_store::ReceiptRow) -> String {
    r.effect().to_string()
}

/// The page's query: the selection of `GET /api/v1/clients` for the
/// client table, and its page. (`token` is the sign-in's, read by the
/// middleware.)
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DashboardQuery {
    #[allow(dead_code)]
    token: Option<String>,
    status: Option<ClientStatus>,
    blocked_reason: Option<BlockedReason>,
    region: Option<String>,
    name: Option<String>,
    /// From 1.
    page: Option<usize>,
}

/// Clients a page of the client table shows.
pub const CLIENTS_PER_PAGE: usize = 100;

/// Full cards shown per group of the intervention queue (the rest are
/// named, and the client table lists them all).
pub const CASES_PER_GROUP: usize = 3;

pub(crate) async fn dashboard(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    crate::extract::ApiQuery(q): crate::extract::ApiQuery<DashboardQuery>,
) -> ApiResult<Response> {
    let store = s.store();
    let now = s.now_ms();
    let select =
        oduflow_store::ClientSelect { status: q.status, blocked_reason: q.blocked_reason, ..Default::default() }
            .with_words(q.region.as_deref(), q.name.as_deref(), None)
            .map_err(ApiError::InvalidInput)?;
    let clients = store.client_list().await?;
    let names: HashMap<&str, &str> = clients.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
    let queue = store.queue_status(now).await?;
    let restore = store.restore_pending().await?;
    let events = store.events_recent(RECENT_EVENTS_SHOWN).await?;
    let orphans = crate::api::orphans_list(&s).await?;

    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>oduflow</h1><p class=\"muted\">{} &middot; signed in as token <b>{}</b> &middot; refreshes every {REFRESH_SECS} s</p>",
        esc(&utc(now)),
        esc(&caller.token_name)
    );
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        let csrf = crate::auth::session_csrf(&id);
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/logout\" id=\"logout\"><input type=\"hidden\" name=\"csrf\" \
             value=\"{csrf}\"><button type=\"submit\">Sign out</button></form>"
        );
    }
    b.push_str("<h2>Clients by status</h2><div class=\"counts\" id=\"counts\">");
    for st in ClientStatus::ALL {
        let n = clients.iter().filter(|c| c.infra.status == *st).count();
        let class = if *st == ClientStatus::Blocked && n > 0 { "count blocked" } else { "count" };
        let _ = write!(
            b,
            "<div class=\"{class}\" data-status=\"{0}\"><a href=\"/?status={0}\"><b>{n}</b>{0}</a></div>",
            esc(st.as_str())
        );
    }
    let class = if orphans.is_empty() { "count" } else { "count blocked" };
    let _ = write!(b, "<div class=\"{class}\" data-kind=\"orphans\"><b>{}</b>orphans</div></div>", orphans.len());
    b.push_str(&queue_line(&queue, restore.as_deref()));

    interventions(&mut b, &s, &clients, now).await?;
    orphans_table(&mut b, &orphans);
    client_table(&mut b, &clients, &select, &q, now);

    b.push_str(
        "<h2>Recent events</h2><table id=\"events\"><tr><th>time</th><th>client</th><th>event</th><th>detail</th></tr>",
    );
    for e in &events {
        let client = e.client_ref.as_deref().map(|r| names.get(r).copied().unwrap_or(r)).unwrap_or("-");
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&utc(e.at_ms)),
            esc(client),
            esc(&e.kind),
            esc(&e.detail.to_string())
        );
    }
    b.push_str("</table>");
    Ok(html(StatusCode::OK, page("oduflow dashboard", &b, true)))
}

/// The selected clients, a page of them, with links to the other pages
/// (the filters kept; the sign-in token never written into the page).
fn client_table(
    b: &mut String,
    clients: &[oduflow_store::ClientRow],
    select: &oduflow_store::ClientSelect,
    q: &DashboardQuery,
    now: i64,
) {
    let selected: Vec<&oduflow_store::ClientRow> = clients.iter().filter(|c| select.matches(c, now)).collect();
    let pages = selected.len().div_ceil(CLIENTS_PER_PAGE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let mut filters = String::new();
    for (k, v) in [
        ("status", q.status.map(|s| s.as_str().to_owned())),
        ("blocked_reason", q.blocked_reason.map(|r| r.as_str().to_owned())),
        ("region", q.region.clone()),
        ("name", q.name.clone()),
    ] {
        if let Some(v) = v {
            let _ = write!(filters, "{k}={}&amp;", esc(&v));
        }
    }
    let _ = write!(
        b,
        "<h2>Clients ({} of {})</h2><form method=\"get\" action=\"/\" id=\"search\">name <input name=\"name\" value=\"{}\" placeholder=\"shop-*\"> <button>search</button> <a href=\"/\">all</a></form>",
        selected.len(),
        clients.len(),
        esc(q.name.as_deref().unwrap_or(""))
    );
    let link = |p: usize, text: &str| format!("<a href=\"/?{filters}page={p}\">{text}</a>");
    let mut nav = format!("<p class=\"pages\" id=\"pages\">page {page} of {pages}");
    if page > 1 {
        let _ = write!(nav, " &middot; {}", link(page - 1, "previous"));
    }
    if page < pages {
        let _ = write!(nav, " &middot; {}", link(page + 1, "next"));
    }
    nav.push_str("</p>");
    b.push_str(&nav);
    b.push_str("<table id=\"clients\"><tr><th>name</th><th>status</th><th>blocked reason</th><th>target</th><th>region / plan</th><th>hostname</th><th>addresses</th><th>vm</th><th>volume (mount id)</th><th>updated</th></tr>");
    for c in selected.iter().skip((page - 1) * CLIENTS_PER_PAGE).take(CLIENTS_PER_PAGE) {
        client_row(b, c);
    }
    b.push_str("</table>");
}

/// An evidence text with what differs from client to client (ids, labels,
/// numbers) left out: blocks with one cause read alike.
fn cause(evidence: &str) -> String {
    evidence
        .split_whitespace()
        .map(|w| {
            if w.chars().filter(char::is_ascii_digit).count() >= 2 || w.starts_with(oduflow_model::LABEL_PREFIX) {
                "…"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// "3 h 12 min", "45 s".
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The intervention queue, grouped by reason and cause (largest first),
/// each group with its count, the age of its oldest block and the bulk
/// command for all of them; the first [`CASES_PER_GROUP`] clients of a
/// group as full cards (evidence, receipts, the commands that resolve it).
async fn interventions(b: &mut String, s: &AppState, clients: &[oduflow_store::ClientRow], now: i64) -> ApiResult<()> {
    let mut groups: Vec<((BlockedReason, String), Vec<&oduflow_store::ClientRow>)> = vec![];
    for c in clients.iter().filter(|c| c.infra.status == ClientStatus::Blocked) {
        let Some(reason) = c.infra.blocked_reason else { continue };
        let key = (reason, cause(c.infra.blocked_detail.as_deref().unwrap_or("")));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.0.as_str().cmp(b.0.0.as_str())));
    let total: usize = groups.iter().map(|g| g.1.len()).sum();
    let _ = write!(b, "<h2>Intervention queue ({total})</h2><div id=\"interventions\">");
    if groups.is_empty() {
        b.push_str("<p class=\"muted\">Nothing is blocked.</p>");
    }
    for ((reason, cause), mut members) in groups {
        members.sort_by_key(|c| c.infra.updated_ms);
        let r = esc(reason.as_str());
        let _ = write!(
            b,
            "<div class=\"group\" data-reason=\"{r}\" data-count=\"{n}\"><h3><span class=\"reason\">{r}</span> &mdash; {n} client{plural}, the oldest blocked {age}</h3><p>Cause: {cause}</p><p class=\"cmd\">For all of them: <code>oduflow bulk reconcile --reason {r} --dry-run</code> (then without <code>--dry-run</code>, once the cause is fixed)</p>",
            n = members.len(),
            plural = if members.len() == 1 { "" } else { "s" },
            age = age(now - members[0].infra.updated_ms),
            cause = esc(&cause),
        );
        for c in members.iter().take(CASES_PER_GROUP) {
            let receipts = s.store().receipts_for_client(&c.id).await?;
            case(b, c, reason, &receipts);
        }
        if members.len() > CASES_PER_GROUP {
            let rest: Vec<String> = members[CASES_PER_GROUP..].iter().take(20).map(|c| esc(&c.name)).collect();
            let _ = write!(
                b,
                "<p>And {} more ({}{}): <a href=\"/?blocked_reason={r}\">all of them in the client table</a>.</p>",
                members.len() - CASES_PER_GROUP,
                rest.join(", "),
                if members.len() - CASES_PER_GROUP > 20 { ", …" } else { "" }
            );
        }
        b.push_str("</div>");
    }
    b.push_str("</div>");
    Ok(())
}

/// One blocked client: its evidence, receipts and the commands that
/// resolve it.
fn case(b: &mut String, c: &oduflow_store::ClientRow, reason: BlockedReason, receipts: &[oduflow_store::ReceiptRow]) {
    let _ = write!(
        b,
        "<div class=\"case\" data-client=\"{0}\"><h3>{0} &mdash; <span class=\"reason\">{1}</span></h3><p>Evidence: {2}</p>",
        esc(&c.name),
        esc(reason.as_str()),
        esc(c.infra.blocked_detail.as_deref().unwrap_or("(none recorded)"))
    );
    if !receipts.is_empty() {
        b.push_str("<table><tr><th>dispatch</th><th>label</th><th>outcome</th><th>observations</th><th>last observation</th></tr>");
        for r in receipts {
            let _ = write!(
                b,
                "<tr><td>{} #{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(r.resource_kind.as_str()),
                r.dispatch_generation,
                esc(r.label.as_str()),
                esc(&outcome(r)),
                r.observation_count(),
                esc(r.last_observation().unwrap_or("-"))
            );
        }
        b.push_str("</table>");
    }
    b.push_str("<p>Resolve with:</p><ul>");
    for res in crate::resolve::resolutions(c, receipts) {
        let _ = write!(b, "<li class=\"cmd\"><code>{}</code> &mdash; {}</li>", esc(&res.command), esc(&res.when));
    }
    b.push_str("</ul></div>");
}

/// The orphans the last inventory pass recorded, with their resolutions.
fn orphans_table(b: &mut String, orphans: &[crate::api::Orphan]) {
    let _ = write!(
        b,
        "<h2>Orphans ({})</h2><p class=\"muted\">Resources under oduflow's label prefix that no receipt accounts for, as the last <code>oduflow reconcile --all</code> found them.</p><div id=\"orphans\">",
        orphans.len()
    );
    if orphans.is_empty() {
        b.push_str("<p class=\"muted\">None recorded.</p>");
    } else {
        b.push_str(
            "<table><tr><th>kind</th><th>id</th><th>label</th><th>client</th><th>note</th><th>resolve with</th></tr>",
        );
        for o in orphans {
            let cmds: Vec<String> = o.resolve.iter().map(|c| format!("<code>{}</code>", esc(c))).collect();
            let _ = write!(
                b,
                "<tr data-orphan=\"{1}\"><td>{0}</td><td>{1}</td><td><code>{2}</code></td><td>{3}</td><td>{4}</td><td class=\"cmd\">{5}</td></tr>",
                esc(o.row.kind.as_str()),
                esc(&o.row.resource_id),
                esc(&o.row.label),
                esc(o.client.as_deref().or(o.row.client_ref.as_deref()).unwrap_or("-")),
                esc(&o.row.note),
                cmds.join("<br>"),
            );
        }
        b.push_str("</table>");
    }
    b.push_str("</div>");
}

/// Whether the queue claims jobs, and if not why and what starts it again:
/// a restore pending stops it as surely as a pause (the workers claim
/// nothing until `oduflow reconcile --all`), so it never reads "running"
/// beside it. Then the counts.
fn queue_line(queue: &oduflow_store::QueueStatus, restore: Option<&str>) -> String {
    let mut why = vec![];
    if let Some(w) = restore {
        why.push(format!(
            "restore pending ({}): it claims nothing until <code>oduflow reconcile --all</code> has run",
            esc(w)
        ));
    }
    if queue.paused {
        why.push("paused: <code>oduflow queue resume</code> starts it again".to_owned());
    }
    let state = if why.is_empty() {
        "running".to_owned()
    } else {
        format!("<b class=\"status-blocked\">stopped</b> &mdash; {}", why.join("; "))
    };
    format!(
        "<p id=\"queue\">Queue: {state} &middot; {} queued ({} runnable) &middot; {} done &middot; {} failed</p>",
        queue.queued, queue.runnable, queue.done, queue.failed
    )
}

/// One row of the clients table.
fn client_row(b: &mut String, c: &oduflow_store::ClientRow) {
    let i = &c.infra;
    let _ = write!(
        b,
        "<tr data-client=\"{0}\"><td>{0}</td><td class=\"status-{1}\">{1}</td><td>{2}</td><td>{3}</td><td>{4} / {5}</td><td>{9}</td><td>{10}</td><td>{6}</td><td>{7}{11}</td><td>{8}</td></tr>",
        esc(&c.name),
        esc(i.status.as_str()),
        esc(i.blocked_reason.map(|r| r.as_str()).unwrap_or("-")),
        esc(i.target.as_str()),
        esc(&i.spec.region),
        esc(&i.spec.plan),
        esc(i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-")),
        esc(i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-")),
        esc(&utc(i.updated_ms)),
        esc(&i.spec.server.hostname),
        esc(&[i.outputs.main_ip.as_str(), i.outputs.v6_main_ip.as_str()]
            .iter()
            .filter(|a| !a.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ")),
        if i.outputs.mount_id.is_empty() { String::new() } else { format!(" ({})", esc(&i.outputs.mount_id)) },
    );
}

/// Keeps the error type in one place for the dashboard's failures too.
impl From<std::fmt::Error> for ApiError {
    fn from(_: std::fmt::Error) -> Self {
        ApiError::BadRequest("page could not be rendered".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("<script>alert('x')</script>&\""), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_068_508_000), "2026-11-30 19:55:08 UTC");
    }
}
