//! The OpenAPI v3 vocabulary of the API: the keywords each field adds to its schema, CEL rules and
//! printer columns as JSON. Both emitters use these functions, so a keyword is spelled once.

use serde_json::{Map, Value, json};

use crate::ir::{Checks, Field, PrinterColumn, Rule, TypeRef};

/// Schema keywords a field adds beyond its type: value checks, list semantics, CEL rules, in a
/// fixed order.
pub fn field_keywords(f: &Field) -> Vec<(String, Value)> {
    let mut out = checks_json(&f.checks);
    // The loader allows `each` on lists and maps of scalars only.
    let element = match &f.ty {
        TypeRef::List(item) => Some(("items", item)),
        TypeRef::Map(value) => Some(("additionalProperties", value)),
        _ => None,
    };
    if let (Some((key, item)), false) = (element, f.each.is_empty()) {
        let mut element = scalar_schema(item);
        for (k, v) in checks_json(&f.each) {
            element.insert(k, v);
        }
        out.push((key.to_owned(), Value::Object(element)));
    }
    if let Some(list_type) = &f.list_type {
        out.push(("x-kubernetes-list-type".into(), json!(list_type)));
    }
    if !f.list_map_keys.is_empty() {
        out.push(("x-kubernetes-list-map-keys".into(), json!(f.list_map_keys)));
    }
    if !f.validations.is_empty() {
        out.push((
            "x-kubernetes-validations".into(),
            rules_json(&f.validations),
        ));
    }
    out
}

fn checks_json(c: &Checks) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.push((k.to_owned(), v));
        }
    };
    put("minimum", c.minimum.map(Value::from));
    put("maximum", c.maximum.map(Value::from));
    put("minLength", c.min_length.map(Value::from));
    put("maxLength", c.max_length.map(Value::from));
    put("pattern", c.pattern.clone().map(Value::from));
    put("minItems", c.min_items.map(Value::from));
    put("maxItems", c.max_items.map(Value::from));
    put("maxProperties", c.max_properties.map(Value::from));
    out
}

/// The schema of a scalar element, as schemars writes it for the matching Rust type.
pub fn scalar_schema(ty: &TypeRef) -> Map<String, Value> {
    let value = match ty {
        TypeRef::Integer => json!({"type": "integer", "format": "int32"}),
        TypeRef::Int64 => json!({"type": "integer", "format": "int64"}),
        TypeRef::Boolean => json!({"type": "boolean"}),
        _ => json!({"type": "string"}),
    };
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// CEL rules as `x-kubernetes-validations` entries (the key order kube's `Rule` serialises).
pub fn rules_json(rules: &[Rule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| {
                let mut m = Map::new();
                m.insert("rule".into(), json!(r.rule));
                if let Some(message) = &r.message {
                    m.insert("message".into(), json!(message));
                }
                if let Some(field_path) = &r.field_path {
                    m.insert("fieldPath".into(), json!(field_path));
                }
                if let Some(reason) = &r.reason {
                    m.insert("reason".into(), json!(reason));
                }
                Value::Object(m)
            })
            .collect(),
    )
}

/// A printer column as the CRD's `additionalPrinterColumns` entry.
pub fn printer_column_json(c: &PrinterColumn) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(c.name));
    m.insert("type".into(), json!(c.type_));
    m.insert("jsonPath".into(), json!(c.json_path));
    if let Some(d) = &c.description {
        m.insert("description".into(), json!(d));
    }
    if let Some(p) = c.priority {
        m.insert("priority".into(), json!(p));
    }
    Value::Object(m)
}
