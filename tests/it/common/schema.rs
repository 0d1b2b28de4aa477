//! A validator for the JSON Schema subset our documented schemas use (docs/report-schema.json,
//! docs/merged-report-schema.json): type, required, properties, items, enum, const, minimum
//! and `$ref` into `$defs`. A schema using any other keyword fails the test that loads it.

use serde_json::Value;

const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "title",
    "description",
    "type",
    "required",
    "properties",
    "items",
    "enum",
    "const",
    "$ref",
    "$defs",
    "minimum",
];

/// Every keyword the schema uses is one this validator implements (or an annotation).
fn check_keywords(schema: &Value, at: &str) {
    let Value::Object(m) = schema else {
        panic!("{at}: a schema must be an object");
    };
    for (k, v) in m {
        assert!(
            KEYWORDS.contains(&k.as_str()),
            "{at}: unsupported keyword {k}"
        );
        match k.as_str() {
            "properties" | "$defs" => {
                for (name, sub) in v.as_object().unwrap() {
                    check_keywords(sub, &format!("{at}/{k}/{name}"));
                }
            }
            "items" => check_keywords(v, &format!("{at}/items")),
            _ => {}
        }
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => panic!("unknown type {other}"),
    }
}

pub fn validate(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("unsupported $ref {r}"));
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "dangling $ref {r}");
        validate(root, target, v, at, errors);
    }
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_matches(t.as_str().unwrap(), v)),
            _ => panic!("bad type keyword at {at}"),
        };
        if !ok {
            errors.push(format!("{at}: expected type {t}, got {v}"));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            errors.push(format!("{at}: expected {c}, got {v}"));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(v) {
            errors.push(format!("{at}: {v} is not one of {options:?}"));
        }
    }
    if let (Some(min), Some(x)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errors.push(format!("{at}: {x} < minimum {min}"));
        }
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(req)) = schema.get("required") {
            for r in req {
                let r = r.as_str().unwrap();
                if !obj.contains_key(r) {
                    errors.push(format!("{at}: missing required property {r}"));
                }
            }
        }
        if let Some(Value::Object(props)) = schema.get("properties") {
            for (k, sub) in props {
                if let Some(x) = obj.get(k) {
                    validate(root, sub, x, &format!("{at}/{k}"), errors);
                }
            }
        }
    }
    if let (Value::Array(items), Some(sub)) = (v, schema.get("items")) {
        for (i, x) in items.iter().enumerate() {
            validate(root, sub, x, &format!("{at}/{i}"), errors);
        }
    }
}

/// Loads a schema from the repository (`rel`, e.g. `docs/report-schema.json`) and checks it uses
/// only the keywords [`validate`] implements.
pub fn load(rel: &str) -> Value {
    let path = super::repo_path(rel);
    let s: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    check_keywords(&s, "#");
    s
}

/// What is wrong with `doc` according to `schema` (empty: it validates).
pub fn errors_of(schema: &Value, doc: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate(schema, schema, doc, "#", &mut errors);
    errors
}
