//! Checks over the whole API, after loading: references, descriptions, names, defaults and CEL
//! rules, each error naming the file and the field.

use serde_json::Value;

use super::model::{Api, Error, Field, RULE_REASONS, Rule, TypeBody, TypeDef, TypeRef, invalid};
use crate::k8s::K8sType;

pub(super) fn check(api: &Api) -> Result<(), Error> {
    for kind in &api.kinds {
        for (what, name) in [("spec", Some(&kind.spec)), ("status", kind.status.as_ref())] {
            let Some(name) = name else { continue };
            match api.type_def(name) {
                Some(TypeDef {
                    body: TypeBody::Object { .. },
                    fragment: false,
                    ..
                }) => {}
                _ => {
                    return Err(invalid(format!(
                        "{}: {what} of {} must name an object type declared in schema/, not `{name}`",
                        kind.source, kind.name
                    )));
                }
            }
        }
        for rule in &kind.validations {
            check_rule(rule, &format!("{}: kind {}", kind.source, kind.name))?;
        }
    }
    for t in &api.types {
        let at = format!("{}: {}", t.source, t.name);
        if t.description.trim().is_empty() {
            return Err(invalid(format!("{at}: needs a description")));
        }
        match &t.body {
            TypeBody::Enum { values } => {
                if values.is_empty() {
                    return Err(invalid(format!("{at}: an enum needs values")));
                }
                for v in values {
                    if v.description.trim().is_empty() {
                        return Err(invalid(format!(
                            "{at}: value {} needs a description",
                            v.value
                        )));
                    }
                    if !v
                        .value
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic())
                        || !v.value.chars().all(|c| c.is_ascii_alphanumeric())
                    {
                        return Err(invalid(format!(
                            "{at}: enum value `{}` must be alphanumeric",
                            v.value
                        )));
                    }
                }
            }
            TypeBody::Object {
                fields,
                validations,
            } => {
                for rule in validations {
                    check_rule(rule, &at)?;
                }
                for f in fields {
                    check_field(api, f, &format!("{at}.{}", f.name))?;
                }
            }
        }
    }
    Ok(())
}

fn check_rule(rule: &Rule, at: &str) -> Result<(), Error> {
    if let Some(reason) = &rule.reason
        && !RULE_REASONS.contains(&reason.as_str())
    {
        return Err(invalid(format!(
            "{at}: rule reason `{reason}` is not one of {RULE_REASONS:?}"
        )));
    }
    if rule.rule.trim().is_empty() {
        return Err(invalid(format!("{at}: empty CEL rule")));
    }
    Ok(())
}

fn check_field(api: &Api, f: &Field, at: &str) -> Result<(), Error> {
    if f.description.trim().is_empty() {
        return Err(invalid(format!("{at}: needs a description")));
    }
    if !f
        .name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
        || !f.name.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(invalid(format!("{at}: field names are lowerCamelCase")));
    }
    if f.required && f.default.is_some() {
        return Err(invalid(format!(
            "{at}: a field is either required or has a default, not both"
        )));
    }
    for rule in &f.validations {
        check_rule(rule, at)?;
    }
    // In the CRD a field's rules and its type's rules would share one `x-kubernetes-validations`
    // key, and the field's would replace the type's without a word.
    if let (false, TypeRef::Named(name)) = (f.validations.is_empty(), &f.ty)
        && let Some(TypeDef {
            body: TypeBody::Object { validations, .. },
            ..
        }) = api.type_def(name)
        && !validations.is_empty()
    {
        return Err(invalid(format!(
            "{at}: has CEL rules (or `immutable`) and so does its type {name}; in the CRD the field's would replace the type's: put the field's rules on the type that holds it"
        )));
    }
    if let Some(fragment) = fragment_named(api, &f.ty) {
        return Err(invalid(format!(
            "{at}: {fragment} is a fragment: include it in a type (`include: [{fragment}]`) rather than name it as a field's type"
        )));
    }
    if !f.each.is_empty() {
        match &f.ty {
            TypeRef::List(t) | TypeRef::Map(t) if t.is_scalar() => {}
            _ => {
                return Err(invalid(format!(
                    "{at}: `each` applies to lists and maps of scalars only"
                )));
            }
        }
    }
    if (f.list_type.is_some() || !f.list_map_keys.is_empty()) && !matches!(f.ty, TypeRef::List(_)) {
        return Err(invalid(format!(
            "{at}: listType and listMapKeys apply to lists only"
        )));
    }
    if let Some(default) = &f.default {
        check_default(api, &f.ty, default).map_err(|e| invalid(format!("{at}: default: {e}")))?;
    }
    Ok(())
}

/// The fragment a type reference names, at any depth (`list<F>`, `map<F>`).
fn fragment_named<'a>(api: &'a Api, ty: &TypeRef) -> Option<&'a str> {
    match ty {
        TypeRef::List(t) | TypeRef::Map(t) => fragment_named(api, t),
        TypeRef::Named(name) => api
            .type_def(name)
            .filter(|t| t.fragment)
            .map(|t| t.name.as_str()),
        _ => None,
    }
}

/// A default must be a value of the field's type. Objects only take `{}`, which means "every
/// nested default", so that a default is never stated twice.
fn check_default(api: &Api, ty: &TypeRef, value: &Value) -> Result<(), String> {
    let ok = match (ty, value) {
        (TypeRef::String, Value::String(_)) => true,
        (TypeRef::Integer | TypeRef::Int64, Value::Number(n)) => n.is_i64(),
        (TypeRef::Boolean, Value::Bool(_)) => true,
        (TypeRef::K8s(K8sType::Quantity), Value::String(_)) => true,
        (TypeRef::Named(name), value) => match api.type_def(name).map(|t| &t.body) {
            Some(TypeBody::Enum { values }) => values
                .iter()
                .any(|v| Some(v.value.as_str()) == value.as_str()),
            Some(TypeBody::Object { fields, .. }) => {
                if value.as_object().is_some_and(|m| m.is_empty()) {
                    if let Some(f) = fields.iter().find(|f| f.required) {
                        return Err(format!(
                            "{name} has a required field {} and so no default",
                            f.name
                        ));
                    }
                    true
                } else {
                    return Err("an object default must be {} (the nested defaults apply)".into());
                }
            }
            None => false,
        },
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{value} is not a {}", ty.display()))
    }
}
