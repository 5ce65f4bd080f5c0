//! Dry runs over HTTP: `PATCH` and `DELETE /api/v1/clients/{name}` with
//! `?dry_run=true` answer what would be done, refuse what the real request
//! refuses with the same answer, and record nothing and send nothing but
//! reads.

use super::*;

/// Everything the database holds, and the simulator's mutating requests.
async fn state(h: &H) -> (String, u64) {
    let text = oduflow_store::testing::all_text(&h.store).await.unwrap();
    let ledger = h.sim.ledger();
    let writes = ledger.requests.iter().filter(|(route, _)| !route.starts_with("GET ")).map(|(_, n)| n).sum();
    (text, writes)
}

#[tokio::test]
async fn dry_runs_answer_the_plan_refuse_as_the_real_request_and_record_nothing() {
    let h = H::start().await;
    h.fixture().await;
    let before = state(&h).await;

    let (status, plan) = h
        .call(
            Method::PATCH,
            "/api/v1/clients/acme-ready?dry_run=true",
            Some(json!({ "plan": "vc2-2c-4gb", "volume_gb": 80, "tags": ["web", "eu"] })),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    let fields: Vec<&str> = plan["changes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["plan", "volume_gb", "tags"], "{plan}");
    assert_eq!(plan["changes"][0]["from"], "vc2-1c-1gb");
    assert!(plan["changes"][0]["effect"].as_str().unwrap().contains("reboots"), "{plan}");
    assert!(plan["changes"][1]["effect"].as_str().unwrap().contains("resize interval"), "{plan}");
    assert!(plan["changes"][2]["effect"].as_str().unwrap().contains("no reboot"), "{plan}");

    // Refused as the real update is, with the same answer.
    let region = json!({ "region": "sjc" });
    let dry = h.call(Method::PATCH, "/api/v1/clients/acme-ready?dry_run=true", Some(region.clone())).await;
    assert_error(&dry, 422, "invalid_input");
    assert!(dry.1["error"]["message"].as_str().unwrap().contains("another region"), "{}", dry.1);
    assert_error(
        &h.call(Method::PATCH, "/api/v1/clients/nobody?dry_run=true", Some(json!({ "plan": "x" }))).await,
        404,
        "not_found",
    );
    assert_error(&h.call(Method::DELETE, "/api/v1/clients/acme-ready?dry_run=maybe", None).await, 422, "invalid_input");

    let (status, del) = h.call(Method::DELETE, "/api/v1/clients/acme-ready?dry_run=true", None).await;
    assert_eq!(status, 200, "{del}");
    assert_eq!(del["already_absent"], false);
    let c = h.store.client_get("acme-ready").await.unwrap().unwrap();
    let said = del["deletes"].to_string();
    for id in [c.infra.vm_id.unwrap().0, c.infra.volume_id.unwrap().0] {
        assert!(said.contains(&format!("{id}, confirmed by GET 404")), "{del}");
    }
    let (_, lost) = h.call(Method::DELETE, "/api/v1/clients/lost-create?dry_run=true", None).await;
    assert!(lost["deletes"].to_string().contains("outcome is unknown: looked for under label"), "{lost}");
    assert_eq!(state(&h).await, before, "a dry run recorded or sent something");

    // The real requests then do what was shown, and refuse what was refused.
    let real = h.call(Method::PATCH, "/api/v1/clients/acme-ready", Some(region)).await;
    assert_eq!(real, dry, "the dry run and the real update refuse alike");
    assert_eq!(h.call(Method::DELETE, "/api/v1/clients/acme-ready", None).await.0, 202);
}
