//! Checks over the whole API, after loading: references, descriptions, names, defaults and CEL
//! rules, each error naming the file and the field.

use serde_json::Value;

use std::collections::BTreeMap;

use super::model::{
    Api, Error, Field, RULE_REASONS, ReasonDef, Rule, TypeBody, TypeDef, TypeRef, invalid,
};
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
    check_reasons(api)
}

/// The status vocabulary: each word once, CamelCase (a condition's reason must be), said of
/// kinds that exist, and with a state that the kind's state enum has.
fn check_reasons(api: &Api) -> Result<(), Error> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for r in &api.reasons {
        let at = format!("{}: reason {}", r.source, r.name);
        if let Some(other) = seen.insert(&r.name, &r.source) {
            return Err(invalid(format!("{at} is declared twice (also in {other})")));
        }
        if !is_camel_case(&r.name) {
            return Err(invalid(format!(
                "{at}: a reason is CamelCase (an upper-case letter, then letters and digits)"
            )));
        }
        if r.description.trim().is_empty() {
            return Err(invalid(format!("{at}: needs a description")));
        }
        if r.kinds.is_empty() {
            return Err(invalid(format!(
                "{at}: name the kinds whose status carries it"
            )));
        }
        for (i, kind) in r.kinds.iter().enumerate() {
            if r.kinds[..i].contains(kind) {
                return Err(invalid(format!("{at}: kind {kind} is named twice")));
            }
            check_reason_kind(api, r, kind, &at)?;
        }
    }
    Ok(())
}

fn check_reason_kind(api: &Api, r: &ReasonDef, kind: &str, at: &str) -> Result<(), Error> {
    let Some(k) = api.kind(kind) else {
        let known: Vec<&str> = api.kinds.iter().map(|k| k.name.as_str()).collect();
        return Err(invalid(format!(
            "{at}: kind {kind} is not declared in schema/ (known: {})",
            known.join(", ")
        )));
    };
    let Some(state) = &r.state else {
        return Ok(());
    };
    match api.state_enum(k) {
        Some((_, values)) if values.iter().any(|v| &v.value == state) => Ok(()),
        Some((field, _)) => Err(invalid(format!(
            "{at}: state {state} is not a value of {kind}'s status.{field}"
        ))),
        None => Err(invalid(format!(
            "{at}: state {state} is given, but {kind} has no status.state or status.phase"
        ))),
    }
}

fn is_camel_case(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
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

#[cfg(test)]
mod tests {
    use crate::ir::load_sources;

    const KIND: &str = "kind: Thing\ngroup: g\nversion: v1\nplural: things\ndescription: d\nspec: ThingSpec\nstatus: ThingStatus\ntypes:\n  ThingSpec:\n    description: d\n    fields:\n      size:\n        type: integer\n        description: d\n  ThingStatus:\n    description: d\n    fields:\n      state:\n        type: ThingState\n        description: d\n  ThingState:\n    description: d\n    enum:\n      - value: Ready\n        description: d\n";

    fn load_reasons(reasons: &str) -> Result<crate::ir::Api, String> {
        load_sources(&[
            ("thing.yaml".into(), KIND.into()),
            ("reasons.yaml".into(), format!("reasons:\n{reasons}")),
        ])
        .map_err(|e| e.to_string())
    }

    fn reason(name: &str, kinds: &str, state: Option<&str>) -> String {
        let state = state
            .map(|s| format!("    state: {s}\n"))
            .unwrap_or_default();
        format!("  - name: {name}\n    kinds: [{kinds}]\n{state}    description: Something.\n")
    }

    #[test]
    fn a_well_formed_vocabulary_loads_in_order() {
        let api = load_reasons(&format!(
            "{}{}",
            reason("AllGood", "Thing", Some("Ready")),
            reason("TLSMissing", "Thing", None)
        ));
        let names: Vec<String> = api
            .map(|a| a.reasons.iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["AllGood", "TLSMissing"]);
    }

    #[test]
    fn a_reason_is_declared_once() {
        let twice = format!(
            "{}{}",
            reason("Same", "Thing", None),
            reason("Same", "Thing", None)
        );
        let err = load_reasons(&twice).err().unwrap_or_default();
        assert!(err.contains("reason Same is declared twice"), "{err}");
    }

    #[test]
    fn a_reason_is_camel_case() {
        for bad in ["notCamel", "Has-Dash", "Has_Underscore", "9Lives"] {
            let err = load_reasons(&reason(bad, "Thing", None))
                .err()
                .unwrap_or_default();
            assert!(err.contains("CamelCase"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_reason_names_known_kinds_and_their_states() {
        let err = load_reasons(&reason("Odd", "Gadget", None))
            .err()
            .unwrap_or_default();
        assert!(err.contains("kind Gadget is not declared"), "{err}");
        let err = load_reasons(&reason("Odd", "", None))
            .err()
            .unwrap_or_default();
        assert!(err.contains("name the kinds"), "{err}");
        let err = load_reasons(&reason("Odd", "Thing, Thing", None))
            .err()
            .unwrap_or_default();
        assert!(err.contains("named twice"), "{err}");
        let err = load_reasons(&reason("Odd", "Thing", Some("Sleeping")))
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("state Sleeping is not a value of Thing's status.state"),
            "{err}"
        );
    }

    #[test]
    fn a_reason_needs_a_description() {
        let err = load_reasons("  - name: Bare\n    kinds: [Thing]\n    description: \" \"\n")
            .err()
            .unwrap_or_default();
        assert!(err.contains("reason Bare: needs a description"), "{err}");
    }
}
