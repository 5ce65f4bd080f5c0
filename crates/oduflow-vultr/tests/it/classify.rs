//! Create and attach: one POST, classified once.

use crate::*;
use oduflow_model::provider::{Outcome, Provider};
use oduflow_model::{VultrBlockId, VultrInstanceId};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn server_answering(status: u16, body: serde_json::Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&server)
        .await;
    server
}

async fn posts(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .count()
}

#[tokio::test]
async fn a_2xx_with_an_id_is_accepted() {
    let server =
        server_answering(202, json!({"instance": {"id": "i-1", "status": "pending"}})).await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_eq!(
        c.instance_create(&instance_req("l")).await,
        Outcome::Accepted(VultrInstanceId::from("i-1"))
    );
    let server = server_answering(202, json!({"block": {"id": "b-1", "status": "pending"}})).await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_eq!(
        c.block_create(&block_req("l")).await,
        Outcome::Accepted(VultrBlockId::from("b-1"))
    );
}

#[tokio::test]
async fn statuses_400_401_403_422_are_rejected_with_the_provider_message() {
    for status in [400u16, 401, 403, 422] {
        let msg = format!("refused with {status}");
        let server = server_answering(status, json!({"error": msg, "status": status})).await;
        let c = client(&format!("{}/v2", server.uri()));
        let want = Outcome::Rejected {
            status,
            message: msg.clone(),
        };
        assert_eq!(c.instance_create(&instance_req("l")).await.map_id(), want);
        assert_eq!(c.block_create(&block_req("l")).await.map_id(), want);
        assert_eq!(
            c.block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i"))
                .await,
            Outcome::Rejected {
                status,
                message: msg
            }
        );
        assert_eq!(posts(&server).await, 3, "each sent once");
    }
}

#[tokio::test]
async fn every_other_status_is_unknown_and_sent_once() {
    for status in [404u16, 409, 429, 500, 502, 503, 504] {
        let server = server_answering(status, json!({"error": "nope", "status": status})).await;
        let c = client(&format!("{}/v2", server.uri()));
        for outcome in [
            c.instance_create(&instance_req("l")).await.map_id(),
            c.block_create(&block_req("l")).await.map_id(),
            c.block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i"))
                .await
                .map_id(),
        ] {
            let Outcome::Unknown { reason } = outcome else {
                panic!("{status}: {outcome:?}")
            };
            assert!(reason.contains(&status.to_string()), "{reason}");
        }
        assert_eq!(
            posts(&server).await,
            3,
            "status {status}: one POST per call, no retry"
        );
    }
}

/// Erases the id type so cases of different kinds sit in one array.
trait MapId {
    fn map_id(self) -> Outcome<()>;
}
impl<T> MapId for Outcome<T> {
    fn map_id(self) -> Outcome<()> {
        match self {
            Outcome::Accepted(_) => Outcome::Accepted(()),
            Outcome::Rejected { status, message } => Outcome::Rejected { status, message },
            Outcome::Unknown { reason } => Outcome::Unknown { reason },
        }
    }
}

#[tokio::test]
async fn a_2xx_without_a_readable_id_is_unknown() {
    for body in [
        ResponseTemplate::new(202).set_body_json(json!({"instance": {}})),
        ResponseTemplate::new(202).set_body_json(json!({"instance": {"id": ""}})),
        ResponseTemplate::new(202).set_body_json(json!({"block": {"id": "wrong-envelope"}})),
        ResponseTemplate::new(202).set_body_string("<html>ok</html>"),
        ResponseTemplate::new(204),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(body)
            .expect(1)
            .mount(&server)
            .await;
        let c = client(&format!("{}/v2", server.uri()));
        let outcome = c.instance_create(&instance_req("l")).await;
        let Outcome::Unknown { reason } = &outcome else {
            panic!("{outcome:?}")
        };
        assert!(reason.contains("without a readable id"), "{reason}");
    }
}

#[tokio::test]
async fn attach_204_is_accepted() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/blocks/b-1/attach"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_eq!(
        c.block_attach(&VultrBlockId::from("b-1"), &VultrInstanceId::from("i-1"))
            .await,
        Outcome::Accepted(())
    );
}

#[tokio::test]
async fn a_create_that_times_out_is_unknown_and_never_sent_again() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(202)
                .set_body_json(json!({"instance": {"id": "late"}}))
                .set_delay(Duration::from_millis(1_500)),
        )
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    let Outcome::Unknown { reason } = c.instance_create(&instance_req("l")).await else {
        panic!()
    };
    assert!(reason.contains("timeout"), "{reason}");
    let Outcome::Unknown { .. } = c
        .block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i"))
        .await
    else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(posts(&server).await, 2, "one POST per call");
}

#[tokio::test]
async fn a_create_whose_connection_is_reset_is_unknown_and_never_sent_again() {
    let (base, requests) = resetting_server().await;
    let c = client(&base);
    let Outcome::Unknown { reason } = c.instance_create(&instance_req("l")).await else {
        panic!()
    };
    assert!(reason.starts_with("transport error"), "{reason}");
    let Outcome::Unknown { .. } = c.block_create(&block_req("l")).await else {
        panic!()
    };
    let Outcome::Unknown { .. } = c
        .block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i"))
        .await
    else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        requests.load(Ordering::SeqCst),
        3,
        "each POST reached the server exactly once"
    );
}

#[tokio::test]
async fn a_create_to_a_closed_port_is_unknown() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let c = client(&format!("http://{addr}/v2"));
    let Outcome::Unknown { reason } = c.instance_create(&instance_req("l")).await else {
        panic!()
    };
    assert!(reason.starts_with("transport error"), "{reason}");
}
