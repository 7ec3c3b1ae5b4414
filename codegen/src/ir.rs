//! The intermediate representation: every schema file read, checked and resolved into one `Api`.
//!
//! The emitters (Rust, CRD, docs) only ever see this representation, never the YAML, so a rule
//! about a field is interpreted in one place.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

use crate::k8s::K8sType;

/// Everything the schema directory describes.
#[derive(Debug, Clone)]
pub struct Api {
    pub kinds: Vec<Kind>,
    /// Named types (objects and enums) in the order the files declare them.
    pub types: Vec<TypeDef>,
}

#[derive(Debug, Clone)]
pub struct Kind {
    pub name: String,
    pub group: String,
    pub version: String,
    pub plural: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub description: String,
    pub validations: Vec<Rule>,
    pub printer_columns: Vec<PrinterColumn>,
    pub spec: String,
    pub status: Option<String>,
    /// File the kind was declared in, relative to the schema directory (for docs and errors).
    pub source: String,
}

#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub description: Option<String>,
    pub priority: Option<i32>,
}

#[derive(Debug, Clone)]
pub struct TypeDef {
    pub name: String,
    pub description: String,
    pub body: TypeBody,
    pub source: String,
}

#[derive(Debug, Clone)]
pub enum TypeBody {
    Object {
        fields: Vec<Field>,
        validations: Vec<Rule>,
    },
    Enum {
        values: Vec<EnumValue>,
    },
}

#[derive(Debug, Clone)]
pub struct EnumValue {
    pub value: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct Field {
    /// The JSON name, as users write it.
    pub name: String,
    pub description: String,
    pub ty: TypeRef,
    pub required: bool,
    pub default: Option<Value>,
    pub checks: Checks,
    /// Checks on each list item or map value (scalars only).
    pub each: Checks,
    pub validations: Vec<Rule>,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
}

impl Field {
    /// Fields without a value of their own are optional in Rust (`Option<T>`).
    pub fn is_optional(&self) -> bool {
        !self.required && self.default.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeRef {
    String,
    Integer,
    Int64,
    Boolean,
    List(Box<TypeRef>),
    Map(Box<TypeRef>),
    /// A type declared in the schema directory.
    Named(String),
    /// A Kubernetes type expanded from k8s-openapi.
    K8s(K8sType),
}

impl TypeRef {
    /// How the type reads in the schema files and the docs.
    pub fn display(&self) -> String {
        match self {
            TypeRef::String => "string".into(),
            TypeRef::Integer => "integer".into(),
            TypeRef::Int64 => "int64".into(),
            TypeRef::Boolean => "boolean".into(),
            TypeRef::List(t) => format!("list<{}>", t.display()),
            TypeRef::Map(t) => format!("map<{}>", t.display()),
            TypeRef::Named(n) => n.clone(),
            TypeRef::K8s(k) => k.name().into(),
        }
    }

    fn is_scalar(&self) -> bool {
        matches!(
            self,
            TypeRef::String | TypeRef::Integer | TypeRef::Int64 | TypeRef::Boolean
        )
    }
}

/// OpenAPI value checks, applied by the API server at admission.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checks {
    pub minimum: Option<i64>,
    pub maximum: Option<i64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<String>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub max_properties: Option<u64>,
}

impl Checks {
    pub fn is_empty(&self) -> bool {
        *self == Checks::default()
    }
}

/// A CEL rule (`x-kubernetes-validations`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub rule: String,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
}

const RULE_REASONS: &[&str] = &[
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Yaml {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

// ---- the file format -------------------------------------------------------------------------

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

// ---- loading ---------------------------------------------------------------------------------

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
    };
    for (file, doc) in docs {
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
    check(&api)?;
    Ok(api)
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

// ---- checks over the whole API ---------------------------------------------------------------

impl Api {
    pub fn type_def(&self, name: &str) -> Option<&TypeDef> {
        self.types.iter().find(|t| t.name == name)
    }

    /// Types in the order an emitter should write them: kinds' spec and status first, then the rest.
    pub fn kind_of_spec(&self, type_name: &str) -> Option<&Kind> {
        self.kinds.iter().find(|k| k.spec == type_name)
    }
}

fn check(api: &Api) -> Result<(), Error> {
    for kind in &api.kinds {
        for (what, name) in [("spec", Some(&kind.spec)), ("status", kind.status.as_ref())] {
            let Some(name) = name else { continue };
            match api.type_def(name) {
                Some(TypeDef {
                    body: TypeBody::Object { .. },
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
