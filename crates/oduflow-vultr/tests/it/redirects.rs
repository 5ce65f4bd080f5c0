//! Redirects are never followed. A followed 307/308 would send a create a
//! second time; a followed 301/302/303 would turn it into a GET whose answer
//! could read as a refusal; a followed GET or DELETE could end on a 404 that
//! reads as "deleted". Each case: a front server answers with the redirect, a
//! target server would give the dangerous answer, and the target must see
//! nothing.

use crate::*;
use oduflow_model::provider::{DeleteOutcome, Outcome, Provider, ProviderError};
use oduflow_model::{Label, VultrBlockId, VultrInstanceId};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// Answers everything the way a follower would trust: 202 with an id to
/// POST, 404 to GET by id and DELETE, an empty last page to listings.
async fn target() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(202).set_body_json(json!({"instance": {"id": "dup"}, "block": {"id": "dup"}})),
        )
        .mount(&server)
        .await;
    for route in ["/v2/instances", "/v2/blocks", "/v2/account"] {
        Mock::given(method("GET"))
            .and(path(route))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "instances": [], "blocks": [], "account": {},
                "meta": {"total": 0, "links": {"next": "", "prev": ""}}
            })))
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"error": "not found", "status": 404})))
        .with_priority(10)
        .mount(&server)
        .await;
    server
}

/// Answers every request with `status` and a Location on `target`.
async fn front(status: u16, target: &MockServer) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(
            ResponseTemplate::new(status)
                .insert_header("Location", format!("{}/v2/instances/elsewhere", target.uri()))
                .set_body_string(""),
        )
        .mount(&server)
        .await;
    server
}

async fn count(server: &MockServer, m: &str) -> usize {
    server.received_requests().await.unwrap().iter().filter(|r| r.method.as_str() == m).count()
}

async fn total(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// The error a redirected read or DELETE must give: the 3xx itself, saying it
/// was not followed.
fn assert_redirect_error(status: u16, what: &str, err: &ProviderError) {
    let ProviderError::Status { status: s, message } = err else { panic!("{what} {status}: {err:?}") };
    assert_eq!(*s, status, "{what}: {message}");
    assert!(message.contains("redirect") && message.contains("never followed"), "{what} {status}: {message}");
    assert!(message.contains("/v2/instances/elsewhere"), "{what} {status}: names the Location: {message}");
}

#[tokio::test]
async fn a_redirected_create_or_attach_is_unknown_sent_once_and_never_followed() {
    for status in REDIRECTS {
        let t = target().await;
        let f = front(status, &t).await;
        let c = client(&format!("{}/v2", f.uri()));
        let outcomes = [
            format!("{:?}", c.instance_create(&instance_req("l")).await),
            format!("{:?}", c.block_create(&block_req("l")).await),
            format!("{:?}", c.block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i")).await),
            format!(
                "{:?}",
                c.dns_record_create(
                    "example.com",
                    &oduflow_vultr::DnsRecordRequest {
                        name: "a".into(),
                        record_type: "A".into(),
                        data: "192.0.2.1".into(),
                        ttl: None,
                        priority: None,
                    }
                )
                .await
            ),
        ];
        for o in &outcomes {
            assert!(o.starts_with("Unknown"), "{status}: {o}");
            assert!(o.contains(&status.to_string()), "{status}: names the status: {o}");
            assert!(o.contains("/v2/instances/elsewhere"), "{status}: names the Location: {o}");
        }
        assert_eq!(count(&f, "POST").await, 4, "{status}: each call sent exactly once");
        assert_eq!(total(&f).await, 4, "{status}: and nothing else");
        assert_eq!(total(&t).await, 0, "{status}: the redirect was not followed");
    }
}

#[tokio::test]
async fn a_redirect_without_a_location_is_unknown_too() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(307)).expect(1).mount(&server).await;
    let c = client(&format!("{}/v2", server.uri()));
    let Outcome::Unknown { reason } = c.instance_create(&instance_req("l")).await else { panic!() };
    assert!(reason.contains("307") && reason.contains("no Location"), "{reason}");
}

#[tokio::test]
async fn a_redirected_get_is_an_error_not_none_and_is_not_retried() {
    for status in REDIRECTS {
        let t = target().await;
        let f = front(status, &t).await;
        let c = client(&format!("{}/v2", f.uri()));
        let err = c.instance_get(&VultrInstanceId::from("i-1")).await.expect_err("a redirect is not a 404");
        assert_redirect_error(status, "instance_get", &err);
        let err = c.block_get(&VultrBlockId::from("b-1")).await.expect_err("a redirect is not a 404");
        assert_redirect_error(status, "block_get", &err);
        let err = c
            .dns_record_get("example.com", &oduflow_vultr::DnsRecordId("r-1".into()))
            .await
            .expect_err("a redirect is not a 404");
        assert_redirect_error(status, "dns_record_get", &err.into());
        let err = c.account_get().await.expect_err("a redirect is not an account");
        assert_redirect_error(status, "account", &err.into());
        assert_eq!(count(&f, "GET").await, 4, "{status}: one GET each, no retry");
        assert_eq!(total(&t).await, 0, "{status}: the redirect was not followed");
    }
}

#[tokio::test]
async fn a_redirected_delete_or_detach_is_an_error_not_not_found() {
    for status in REDIRECTS {
        let t = target().await;
        let f = front(status, &t).await;
        let c = client(&format!("{}/v2", f.uri()));
        let results: [(&str, Result<DeleteOutcome, ProviderError>); 4] = [
            ("instance_delete", c.instance_delete(&VultrInstanceId::from("i-1")).await),
            ("block_delete", c.block_delete(&VultrBlockId::from("b-1")).await),
            ("block_detach", c.block_detach(&VultrBlockId::from("b-1")).await),
            (
                "dns_record_delete",
                c.dns_record_delete("example.com", &oduflow_vultr::DnsRecordId("r-1".into()))
                    .await
                    .map_err(ProviderError::from),
            ),
        ];
        for (what, r) in results {
            match r {
                Err(e) => assert_redirect_error(status, what, &e),
                Ok(o) => panic!("{what} {status}: {o:?}, not an error"),
            }
        }
        assert_eq!(count(&f, "DELETE").await, 3, "{status}: one DELETE each, no retry");
        assert_eq!(count(&f, "POST").await, 1, "{status}: one detach, no retry");
        assert_eq!(total(&t).await, 0, "{status}: the redirect was not followed");
    }
}

#[tokio::test]
async fn a_redirected_listing_is_an_error() {
    for status in REDIRECTS {
        let t = target().await;
        let f = front(status, &t).await;
        let c = client(&format!("{}/v2", f.uri()));
        assert_redirect_error(status, "instance_list", &c.instance_list().await.unwrap_err());
        assert_redirect_error(
            status,
            "instance_list_by_label",
            &c.instance_list_by_label(&Label::from("l")).await.unwrap_err(),
        );
        assert_redirect_error(status, "block_list", &c.block_list().await.unwrap_err());
        assert_redirect_error(
            status,
            "block_find_by_labels",
            &c.block_find_by_labels(&[Label::from("l")]).await.unwrap_err(),
        );
        assert_redirect_error(status, "regions", &c.region_list().await.unwrap_err().into());
        assert_eq!(count(&f, "GET").await, 5, "{status}: one GET each, no retry");
        assert_eq!(total(&t).await, 0, "{status}: the redirect was not followed");
    }
}

/// A redirect on a later page (here the second) fails the whole listing: no
/// partial list is handed back as if it were complete.
#[tokio::test]
async fn a_redirect_on_a_later_page_fails_the_listing() {
    let t = target().await;
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/instances"))
        .and(wiremock::matchers::query_param("cursor", "c1"))
        .respond_with(
            ResponseTemplate::new(302).insert_header("Location", format!("{}/v2/instances/elsewhere", t.uri())),
        )
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/instances"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "instances": [],
            "meta": {"total": 1, "links": {"next": "c1", "prev": ""}}
        })))
        .with_priority(5)
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_redirect_error(302, "instance_list page 2", &c.instance_list().await.unwrap_err());
    assert_eq!(count(&server, "GET").await, 2);
    assert_eq!(total(&t).await, 0);
}
