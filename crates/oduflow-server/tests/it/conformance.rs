//! The OpenAPI document describes what the server answers: every read
//! route's 200 answer, for clients in several states (receipts, jobs,
//! change receipts, events), conforms to the document's schema for it,
//! with no field the document leaves out, so an integration generated from
//! the document reads every answer.

use super::*;

/// Why `v` does not conform to `schema` (resolved in `doc`), at `at`.
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return conforms(doc, &doc["components"]["schemas"][name], v, at);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = schema[key].as_array() {
            let errors: Vec<String> = alts.iter().filter_map(|s| conforms(doc, s, v, at).err()).collect();
            return if errors.len() < alts.len() { Ok(()) } else { Err(errors.join(" | ")) };
        }
    }
    if let Some(all) = schema["allOf"].as_array() {
        return all.iter().try_for_each(|s| conforms(doc, s, v, at));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let ok = |t: &str| match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    };
    if !types.is_empty() && !types.iter().any(|t| ok(t)) {
        return Err(format!("{at}: {v} is not {types:?}"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(v)
    {
        return Err(format!("{at}: {v} is not one of {values:?}"));
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            conforms(doc, items, x, &format!("{at}[{i}]"))?;
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), v.as_object()) {
        for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                return Err(format!("{at}: required {r} missing"));
            }
        }
        for (k, x) in obj {
            let Some(s) = props.get(k) else { return Err(format!("{at}: {k} is not in the document")) };
            conforms(doc, s, x, &format!("{at}.{k}"))?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_read_answers_as_the_document_says() {
    let h = H::start().await;
    h.fixture().await;
    // A change receipt: acme-ready's tags changed and the change sent.
    assert_eq!(h.call(Method::PATCH, "/api/v1/clients/acme-ready", Some(json!({ "tags": ["web"] }))).await.0, 202);
    h.drain().await;
    h.orphan_of("acme-ready").await;
    let (_, doc) = h.get("/openapi.json").await;
    let mut checked = 0;
    for (method, path) in ROUTES.iter().filter(|(m, p)| *m == "GET" && p.starts_with("/api/")) {
        for path in [path.replace("/acme", "/acme-ready"), path.replace("/acme", "/bad-plan")] {
            let (status, v) = h.get(&path).await;
            assert_eq!(status, 200, "{method} {path}: {v}");
            let template = path.replace("/acme-ready", "/{name}").replace("/bad-plan", "/{name}");
            let schema = &doc["paths"][&template]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
            assert!(!schema.is_null(), "{template}: no schema for 200");
            if let Err(e) = conforms(&doc, schema, &v, &template) {
                panic!("{method} {path} does not answer as documented: {e}");
            }
            checked += 1;
        }
    }
    let (_, detail) = h.get("/api/v1/clients/acme-ready").await;
    for key in ["receipts", "jobs", "changes"] {
        assert!(detail[key].as_array().is_some_and(|a| !a.is_empty()), "{key} checked with rows: {detail}");
    }
    assert!(checked >= 20, "{checked}");
}
