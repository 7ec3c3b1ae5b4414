//! Loading: the schema files' format, read and resolved into the model. Every name a field uses
//! is resolved here (a declared type, or a Kubernetes type), so the emitters never see YAML.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::check::check;
use super::model::Checks;
use super::model::{
    Api, EnumValue, Error, Field, Kind, PrinterColumn, ReasonDef, Rule, TypeBody, TypeDef, TypeRef,
    invalid,
};
use crate::k8s::K8sType;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileDoc {
    kind: Option<String>,
    group: Option<String>,
    version: Option<String>,
    plural: Option<String>,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
    description: Option<String>,
    #[serde(default)]
    validations: Vec<Rule>,
    #[serde(default)]
    printer_columns: Vec<PrinterColumnDoc>,
    spec: Option<String>,
    status: Option<String>,
    /// A mapping, read as such so that declaration order survives.
    #[serde(default)]
    types: serde_yaml::Mapping,
    /// Words of the status vocabulary (see [`ReasonDef`]).
    #[serde(default)]
    reasons: Vec<ReasonDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReasonDoc {
    name: String,
    kinds: Vec<String>,
    state: Option<String>,
    description: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PrinterColumnDoc {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    json_path: String,
    description: Option<String>,
    priority: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TypeDoc {
    description: String,
    #[serde(rename = "enum")]
    enum_values: Option<Vec<EnumValueDoc>>,
    fields: Option<serde_yaml::Mapping>,
    #[serde(default)]
    validations: Vec<Rule>,
    /// Fragments whose fields and rules this object type takes as its own.
    #[serde(default)]
    include: Vec<String>,
    /// Fields for other types to include, not a type of its own.
    #[serde(default)]
    fragment: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnumValueDoc {
    value: String,
    description: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FieldDoc {
    #[serde(rename = "type")]
    type_: String,
    description: String,
    #[serde(default)]
    required: bool,
    default: Option<serde_yaml::Value>,
    #[serde(default)]
    immutable: bool,
    #[serde(default)]
    validations: Vec<Rule>,
    #[serde(default)]
    each: Checks,
    list_type: Option<String>,
    #[serde(default)]
    list_map_keys: Vec<String>,
    #[serde(flatten)]
    checks: Checks,
}

/// Reads every `*.yaml` file of `dir` (sorted by name) into one checked `Api`.
pub fn load_dir(dir: &Path) -> Result<Api, Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            path: dir.display().to_string(),
            source,
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut sources = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        sources.push((name, text));
    }
    load_sources(&sources)
}

/// Reads schema files given as `(file name, contents)` into one checked `Api`.
pub fn load_sources(sources: &[(String, String)]) -> Result<Api, Error> {
    let mut docs = Vec::new();
    for (name, text) in sources {
        let doc: FileDoc = serde_yaml::from_str(text).map_err(|source| Error::Yaml {
            path: name.clone(),
            source,
        })?;
        docs.push((name.clone(), doc));
    }

    // Names first, so that a field may refer to a type declared later or in another file.
    let mut declared: BTreeMap<String, String> = BTreeMap::new();
    for (file, doc) in &docs {
        for key in doc.types.keys() {
            let name = key_name(key, file)?;
            if K8sType::from_name(&name).is_some() {
                return Err(invalid(format!(
                    "{file}: type {name} shadows the Kubernetes type of that name"
                )));
            }
            if let Some(other) = declared.insert(name.clone(), file.clone()) {
                return Err(invalid(format!(
                    "type {name} is declared in both {other} and {file}"
                )));
            }
        }
    }

    let mut api = Api {
        kinds: Vec::new(),
        types: Vec::new(),
        reasons: Vec::new(),
    };
    for (file, mut doc) in docs {
        api.reasons.extend(
            std::mem::take(&mut doc.reasons)
                .into_iter()
                .map(|r| ReasonDef {
                    name: r.name,
                    kinds: r.kinds,
                    state: r.state,
                    description: r.description,
                    source: file.clone(),
                }),
        );
        for (key, value) in &doc.types {
            let name = key_name(key, &file)?;
            let type_doc: TypeDoc =
                serde_yaml::from_value(value.clone()).map_err(|source| Error::Yaml {
                    path: format!("{file}: type {name}"),
                    source,
                })?;
            api.types.push(type_def(&name, type_doc, &file, &declared)?);
        }
        if let Some(kind) = doc.kind.clone() {
            api.kinds.push(kind_def(kind, doc, &file)?);
        }
    }
    resolve_includes(&mut api)?;
    check(&api)?;
    Ok(api)
}

/// Copies each included fragment's fields and rules into the types that include it: the
/// including type's own fields come first, then each fragment's, in `include` order; its own
/// rules first, then each fragment's. A field declared twice is an error naming both places.
fn resolve_includes(api: &mut Api) -> Result<(), Error> {
    let fragments: BTreeMap<String, TypeDef> = api
        .types
        .iter()
        .filter(|t| t.fragment)
        .map(|t| (t.name.clone(), t.clone()))
        .collect();
    for t in &mut api.types {
        for name in t.includes.clone() {
            let at = format!("{}: {} includes {name}", t.source, t.name);
            let Some(fragment) = fragments.get(&name) else {
                return Err(invalid(format!(
                    "{at}, which is not a fragment declared in schema/ (a type with `fragment: true`)"
                )));
            };
            let (
                TypeBody::Object {
                    fields: shared,
                    validations: shared_rules,
                },
                TypeBody::Object {
                    fields,
                    validations,
                },
            ) = (&fragment.body, &mut t.body)
            else {
                return Err(invalid(format!(
                    "{at}: only object types include fragments"
                )));
            };
            for field in shared {
                if fields.iter().any(|f| f.name == field.name) {
                    return Err(invalid(format!(
                        "{at}: field {} is declared both in {} and in {name} ({})",
                        field.name, t.name, fragment.source
                    )));
                }
                fields.push(field.clone());
            }
            validations.extend(shared_rules.iter().cloned());
        }
    }
    Ok(())
}

fn key_name(key: &serde_yaml::Value, file: &str) -> Result<String, Error> {
    key.as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("{file}: a type or field name is not a string")))
}

fn kind_def(name: String, doc: FileDoc, file: &str) -> Result<Kind, Error> {
    let need = |v: Option<String>, what: &str| {
        v.ok_or_else(|| invalid(format!("{file}: kind {name} has no {what}")))
    };
    Ok(Kind {
        group: need(doc.group, "group")?,
        version: need(doc.version, "version")?,
        plural: need(doc.plural, "plural")?,
        description: need(doc.description, "description")?,
        spec: need(doc.spec, "spec type")?,
        status: doc.status,
        short_names: doc.short_names,
        categories: doc.categories,
        validations: doc.validations,
        printer_columns: doc
            .printer_columns
            .into_iter()
            .map(|c| PrinterColumn {
                name: c.name,
                type_: c.type_,
                json_path: c.json_path,
                description: c.description,
                priority: c.priority,
            })
            .collect(),
        source: file.to_owned(),
        name,
    })
}

fn type_def(
    name: &str,
    doc: TypeDoc,
    file: &str,
    declared: &BTreeMap<String, String>,
) -> Result<TypeDef, Error> {
    let body = match (doc.enum_values, doc.fields) {
        (Some(_), None) if doc.fragment || !doc.include.is_empty() => {
            return Err(invalid(format!(
                "{file}: enum {name} can neither be a fragment nor include one"
            )));
        }
        (_, _) if doc.fragment && !doc.include.is_empty() => {
            return Err(invalid(format!(
                "{file}: fragment {name} cannot include another fragment; include both where it is used"
            )));
        }
        (Some(values), None) => {
            if !doc.validations.is_empty() {
                return Err(invalid(format!(
                    "{file}: enum {name} cannot carry validations"
                )));
            }
            TypeBody::Enum {
                values: values
                    .into_iter()
                    .map(|v| EnumValue {
                        value: v.value,
                        description: v.description,
                    })
                    .collect(),
            }
        }
        (None, Some(fields)) => {
            let mut out = Vec::new();
            for (key, value) in &fields {
                let field_name = key_name(key, file)?;
                let at = format!("{file}: {name}.{field_name}");
                let field_doc: FieldDoc =
                    serde_yaml::from_value(value.clone()).map_err(|source| Error::Yaml {
                        path: at.clone(),
                        source,
                    })?;
                out.push(field_def(field_name, field_doc, &at, declared)?);
            }
            TypeBody::Object {
                fields: out,
                validations: doc.validations,
            }
        }
        _ => {
            return Err(invalid(format!(
                "{file}: type {name} needs exactly one of `enum` or `fields`"
            )));
        }
    };
    Ok(TypeDef {
        name: name.to_owned(),
        description: doc.description,
        body,
        source: file.to_owned(),
        fragment: doc.fragment,
        includes: doc.include,
    })
}

fn field_def(
    name: String,
    doc: FieldDoc,
    at: &str,
    declared: &BTreeMap<String, String>,
) -> Result<Field, Error> {
    let ty = parse_type(&doc.type_, declared).map_err(|e| invalid(format!("{at}: {e}")))?;
    let mut validations = Vec::new();
    if doc.immutable {
        validations.push(Rule {
            rule: "self == oldSelf".into(),
            message: Some(format!("{name} is immutable")),
            reason: None,
            field_path: None,
        });
    }
    validations.extend(doc.validations);
    let default = match doc.default {
        None => None,
        Some(v) => {
            Some(serde_json::to_value(v).map_err(|e| invalid(format!("{at}: default: {e}")))?)
        }
    };
    Ok(Field {
        name,
        description: doc.description,
        ty,
        required: doc.required,
        default,
        checks: doc.checks,
        each: doc.each,
        validations,
        list_type: doc.list_type,
        list_map_keys: doc.list_map_keys,
    })
}

/// `string`, `integer`, `int64`, `boolean`, `list<T>`, `map<T>` (string keys), a declared type,
/// or a Kubernetes type by name.
fn parse_type(text: &str, declared: &BTreeMap<String, String>) -> Result<TypeRef, String> {
    let text = text.trim();
    let inner = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix('>'))
    };
    if let Some(item) = inner("list<") {
        return Ok(TypeRef::List(Box::new(parse_type(item, declared)?)));
    }
    if let Some(value) = inner("map<") {
        return Ok(TypeRef::Map(Box::new(parse_type(value, declared)?)));
    }
    Ok(match text {
        "string" => TypeRef::String,
        "integer" => TypeRef::Integer,
        "int64" => TypeRef::Int64,
        "boolean" => TypeRef::Boolean,
        other => {
            if declared.contains_key(other) {
                TypeRef::Named(other.to_owned())
            } else if let Some(k) = K8sType::from_name(other) {
                TypeRef::K8s(k)
            } else {
                return Err(format!(
                    "unknown type `{other}` (known: string, integer, int64, boolean, list<T>, map<T>, a type declared in schema/, or {})",
                    K8sType::names().join(", ")
                ));
            }
        }
    })
}
