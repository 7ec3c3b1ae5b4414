//! The API reference (`docs/api.md`), rendered by the askama template `templates/docs/api.md`
//! (in this crate) from the schema's own descriptions, so the reference cannot disagree with the
//! CRDs.

use askama::Template;
use serde_json::Value;

use crate::ir::{Api, Checks, Field, Rule, TypeBody, TypeRef};
use crate::openapi;

#[derive(Template)]
#[template(path = "docs/api.md")]
struct ApiDoc {
    group_version: String,
    intro: &'static str,
    kinds: Vec<KindDoc>,
    /// The status vocabulary, kind by kind (empty: no section).
    reasons: Vec<KindReasons>,
    types: Vec<TypeDoc>,
}

/// The reasons one kind's status can carry.
struct KindReasons {
    kind: String,
    /// The field the state column names (`state`, `phase`), empty for a kind without one.
    state_field: String,
    rows: Vec<ReasonRow>,
}

struct ReasonRow {
    name: String,
    state: String,
    description: String,
}

struct KindDoc {
    name: String,
    anchor: String,
    description: String,
    api_version: String,
    plural: String,
    short_names: String,
    categories: String,
    status_subresource: &'static str,
    rules: String,
    columns: Vec<ColumnDoc>,
    wide_columns: String,
}

struct ColumnDoc {
    name: String,
    json_path: String,
    description: String,
    priority: i32,
}

struct TypeDoc {
    name: String,
    description: String,
    /// What the fragments it includes bring, in a sentence (empty without any).
    shared: String,
    rules: String,
    is_enum: bool,
    values: Vec<ValueDoc>,
    fields: Vec<FieldDoc>,
}

struct ValueDoc {
    value: String,
    description: String,
}

struct FieldDoc {
    name: String,
    required: bool,
    type_: String,
    default: String,
    description: String,
    checks: String,
}

const INTRO: &str = "Generated from `valkey-api/schema/*.yaml`, like the CRDs in \
`charts/valkey-operator/crds/` and the Rust types both controllers compile. Defaults and checks \
are applied by the API server at admission: an object that breaks a check is rejected with a \
message naming the field.";

/// Renders the reference for every kind and type of `api`.
pub fn generate(api: &Api) -> Result<String, askama::Error> {
    let group_version = api
        .kinds
        .first()
        .map(|k| format!("{}/{}", k.group, k.version))
        .unwrap_or_default();
    let doc = ApiDoc {
        group_version,
        intro: INTRO,
        kinds: api.kinds.iter().map(kind_doc).collect(),
        reasons: api
            .kinds
            .iter()
            .filter_map(|k| kind_reasons(api, k))
            .collect(),
        types: api.emitted_types().map(|t| type_doc(api, t)).collect(),
    };
    let mut text = doc.render()?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

fn kind_doc(k: &crate::ir::Kind) -> KindDoc {
    let columns: Vec<ColumnDoc> = k
        .printer_columns
        .iter()
        .map(|c| ColumnDoc {
            name: c.name.clone(),
            json_path: c.json_path.clone(),
            description: cell(c.description.as_deref().unwrap_or("Time since creation.")),
            priority: c.priority.unwrap_or(0),
        })
        .collect();
    let wide: Vec<String> = columns
        .iter()
        .filter(|c| c.priority > 0)
        .map(|c| c.name.to_uppercase())
        .collect();
    KindDoc {
        name: k.name.clone(),
        anchor: k.name.to_lowercase(),
        description: k.description.clone(),
        api_version: format!("{}/{}", k.group, k.version),
        plural: k.plural.clone(),
        short_names: code_list(&k.short_names),
        categories: code_list(&k.categories),
        status_subresource: if k.status.is_some() { "yes" } else { "no" },
        rules: rules_text(&k.validations),
        columns,
        wide_columns: wide.join(", "),
    }
}

fn kind_reasons(api: &Api, k: &crate::ir::Kind) -> Option<KindReasons> {
    let rows: Vec<ReasonRow> = api
        .reasons_of(&k.name)
        .map(|r| ReasonRow {
            name: r.name.clone(),
            state: r
                .state
                .as_deref()
                .map(|s| format!("`{s}`"))
                .unwrap_or_default(),
            description: cell(&r.description),
        })
        .collect();
    (!rows.is_empty()).then(|| KindReasons {
        kind: k.name.clone(),
        state_field: api
            .state_enum(k)
            .map(|(field, _)| field.to_owned())
            .unwrap_or_default(),
        rows,
    })
}

fn type_doc(api: &Api, t: &crate::ir::TypeDef) -> TypeDoc {
    let shared = t
        .includes
        .iter()
        .filter_map(|name| api.type_def(name))
        .map(|f| {
            format!(
                "Includes the fields of {} (`{}`): {}",
                f.name,
                f.source,
                cell(&f.description)
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    match &t.body {
        TypeBody::Enum { values } => TypeDoc {
            name: t.name.clone(),
            description: t.description.clone(),
            shared,
            rules: String::new(),
            is_enum: true,
            values: values
                .iter()
                .map(|v| ValueDoc {
                    value: v.value.clone(),
                    description: cell(&v.description),
                })
                .collect(),
            fields: Vec::new(),
        },
        TypeBody::Object {
            fields,
            validations,
        } => TypeDoc {
            name: t.name.clone(),
            description: t.description.clone(),
            shared,
            rules: rules_text(validations),
            is_enum: false,
            values: Vec::new(),
            fields: fields.iter().map(field_doc).collect(),
        },
    }
}

fn field_doc(f: &Field) -> FieldDoc {
    let mut checks = checks_text(&f.checks);
    if !f.each.is_empty() {
        checks.push(format!("each {}", checks_text(&f.each).join(", ")));
    }
    if !f.validations.is_empty() {
        checks.push(rules_text(&f.validations));
    }
    FieldDoc {
        name: f.name.clone(),
        required: f.required,
        type_: type_text(&f.ty),
        default: match &f.default {
            None => String::new(),
            Some(Value::Object(_)) => "(nested defaults)".into(),
            Some(Value::String(s)) => format!("`{s}`"),
            Some(v) => format!("`{v}`"),
        },
        description: cell(&f.description),
        checks: cell(&checks.join("; ")),
    }
}

fn type_text(ty: &TypeRef) -> String {
    match ty {
        TypeRef::Named(n) => format!("[{n}](#{})", n.to_lowercase()),
        TypeRef::List(t) => format!("list of {}", type_text(t)),
        TypeRef::Map(t) => format!("map of string to {}", type_text(t)),
        TypeRef::K8s(k) => format!("Kubernetes `{}`", k.name()),
        other => other.display(),
    }
}

fn checks_text(c: &Checks) -> Vec<String> {
    openapi_checks(c)
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k} `{s}`"),
            other => format!("{k} {other}"),
        })
        .collect()
}

fn openapi_checks(c: &Checks) -> Vec<(String, Value)> {
    let field = Field {
        name: String::new(),
        description: String::new(),
        ty: TypeRef::String,
        required: false,
        default: None,
        checks: c.clone(),
        each: Checks::default(),
        validations: Vec::new(),
        list_type: None,
        list_map_keys: Vec::new(),
    };
    openapi::field_keywords(&field)
}

fn rules_text(rules: &[Rule]) -> String {
    rules
        .iter()
        .map(|r| match &r.message {
            Some(m) => format!("{m} (`{}`)", r.rule),
            None => format!("`{}`", r.rule),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn code_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Text that stays inside one markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('\n', " ")
        .trim()
        .to_owned()
}
