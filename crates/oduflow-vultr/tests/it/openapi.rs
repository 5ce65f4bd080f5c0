//! A small validator for the OpenAPI 3.0 subset Vultr's document uses:
//! `$ref`, `type`, `properties`, `required`, `items`, `enum`,
//! `allOf`/`oneOf`/`anyOf`, `nullable`, `additionalProperties`. Leaner than
//! a full JSON-Schema crate, and it can be strict where we want it: request
//! bodies we send may hold only documented properties.

use serde_json::{Map, Value};
use std::sync::OnceLock;
use yaml_rust2::{Yaml, YamlLoader};

/// Vultr's own document, kept in the repository (see `tests/data/README.md`).
pub const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vultr-openapi-2023-12.yaml");

pub struct OpenApi {
    doc: Value,
}

/// The document, parsed once per test process. Panics (fails the test) with
/// a clear message if it is missing: conformance must never pass silently.
pub fn doc() -> &'static OpenApi {
    static DOC: OnceLock<OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let text = std::fs::read_to_string(DOC_PATH).unwrap_or_else(|e| {
            panic!("Vultr's OpenAPI document is required for the conformance test: cannot read {DOC_PATH}: {e}")
        });
        let docs = YamlLoader::load_from_str(&text).expect("the OpenAPI document is valid YAML");
        let doc = to_json(&docs[0]);
        assert!(doc.pointer("/paths/~1instances/post").is_some(), "{DOC_PATH} does not look like Vultr's API");
        OpenApi { doc }
    })
}

fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(s) => s.parse::<f64>().map(Value::from).unwrap_or_else(|_| Value::String(s.clone())),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::Hash(h) => {
            let mut m = Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) | Yaml::Real(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => format!("{other:?}"),
                };
                m.insert(key, to_json(v));
            }
            Value::Object(m)
        }
        Yaml::Null | Yaml::BadValue | Yaml::Alias(_) => Value::Null,
    }
}

fn escape(path: &str) -> String {
    path.replace('~', "~0").replace('/', "~1")
}

impl OpenApi {
    fn operation(&self, path: &str, method: &str) -> &Value {
        let ptr = format!("/paths/{}/{}", escape(path), method.to_lowercase());
        self.doc.pointer(&ptr).unwrap_or_else(|| panic!("no operation {method} {path} in the document"))
    }

    /// The JSON request body schema of an operation.
    pub fn request_schema(&self, path: &str, method: &str) -> &Value {
        self.operation(path, method)
            .pointer("/requestBody/content/application~1json/schema")
            .unwrap_or_else(|| panic!("{method} {path} documents no JSON request body"))
    }

    /// Whether the operation documents this status at all.
    pub fn documents_status(&self, path: &str, method: &str, status: u16) -> bool {
        self.operation(path, method).pointer(&format!("/responses/{status}")).is_some()
    }

    /// The JSON response schema for a status, if the document gives one.
    pub fn response_schema(&self, path: &str, method: &str, status: u16) -> Option<&Value> {
        self.operation(path, method).pointer(&format!("/responses/{status}/content/application~1json/schema"))
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut s = schema;
        while let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let ptr = r.strip_prefix('#').unwrap_or_else(|| panic!("external $ref {r}"));
            s = self.doc.pointer(ptr).unwrap_or_else(|| panic!("dangling $ref {r}"));
        }
        s
    }

    /// Every way `value` breaks `schema`. `strict`: properties the schema
    /// does not name are errors too.
    pub fn validate(&self, schema: &Value, value: &Value, strict: bool) -> Vec<String> {
        let mut errors = Vec::new();
        self.check(schema, value, strict, "$", &mut errors);
        errors
    }

    fn check(&self, schema: &Value, v: &Value, strict: bool, at: &str, errs: &mut Vec<String>) {
        let s = self.resolve(schema);
        if v.is_null() && s.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        if let Some(all) = s.get("allOf").and_then(Value::as_array) {
            for sub in all {
                self.check(sub, v, false, at, errs);
            }
        }
        for (key, need) in [("oneOf", Some(1usize)), ("anyOf", None)] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let ok = alts.iter().filter(|a| self.validate(a, v, false).is_empty()).count();
                let fine = match need {
                    Some(n) => ok == n,
                    None => ok >= 1,
                };
                if !fine {
                    errs.push(format!("{at}: {ok} of the {key} alternatives match"));
                }
            }
        }
        if let Some(allowed) = s.get("enum").and_then(Value::as_array)
            && !allowed.contains(v)
        {
            errs.push(format!("{at}: {v} is not one of {allowed:?}"));
        }
        let Some(ty) = s.get("type").and_then(Value::as_str) else {
            return;
        };
        let type_ok = match ty {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            other => panic!("unsupported schema type {other}"),
        };
        if !type_ok {
            errs.push(format!("{at}: expected {ty}, got {v}"));
            return;
        }
        if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
            for (i, item) in arr.iter().enumerate() {
                self.check(items, item, strict, &format!("{at}[{i}]"), errs);
            }
        }
        if let Some(obj) = v.as_object() {
            let props = s.get("properties").and_then(Value::as_object);
            if let Some(req) = s.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !obj.contains_key(r) {
                        errs.push(format!("{at}: required property {r:?} missing"));
                    }
                }
            }
            for (k, val) in obj {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => self.check(ps, val, strict, &format!("{at}.{k}"), errs),
                    None => match s.get("additionalProperties") {
                        Some(Value::Bool(false)) => errs.push(format!("{at}: property {k:?} not allowed")),
                        Some(extra @ Value::Object(_)) => self.check(extra, val, strict, &format!("{at}.{k}"), errs),
                        _ if strict => errs.push(format!("{at}: property {k:?} is not in the document")),
                        _ => {}
                    },
                }
            }
        }
    }
}
