//! The model: the API as the emitters see it, every name resolved.

use serde::Deserialize;
use serde_json::Value;

use crate::k8s::K8sType;

/// Everything the schema directory describes.
#[derive(Debug, Clone)]
pub struct Api {
    pub kinds: Vec<Kind>,
    /// Named types (objects and enums) in the order the files declare them.
    pub types: Vec<TypeDef>,
    /// Every reason a person can see in a kind's `status.reason` and condition reasons, in the
    /// order the files declare them: one vocabulary, so the reference lists them all and the
    /// controllers cannot write another.
    pub reasons: Vec<ReasonDef>,
}

/// One word of the status vocabulary.
#[derive(Debug, Clone)]
pub struct ReasonDef {
    /// The CamelCase word, exactly as the status carries it.
    pub name: String,
    /// The kinds whose status can carry it.
    pub kinds: Vec<String>,
    /// The value of `status.state` (or `status.phase`) it always goes with, when that is fixed.
    pub state: Option<String>,
    /// What it means and what a person should do.
    pub description: String,
    pub source: String,
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
    /// A fragment: fields (and rules over them) that object types `include`, so that several
    /// kinds share them without a copy. It has no Rust type and no section of its own in the
    /// docs; its fields appear in every type that includes it.
    pub fragment: bool,
    /// The fragments this type includes, in order (already resolved into its fields and rules).
    pub includes: Vec<String>,
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

    pub(crate) fn is_scalar(&self) -> bool {
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

pub(crate) const RULE_REASONS: &[&str] = &[
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

pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

impl Api {
    pub fn type_def(&self, name: &str) -> Option<&TypeDef> {
        self.types.iter().find(|t| t.name == name)
    }

    /// The types that become Rust types and sections of the docs: every type but fragments.
    pub fn emitted_types(&self) -> impl Iterator<Item = &TypeDef> {
        self.types.iter().filter(|t| !t.fragment)
    }

    /// Types in the order an emitter should write them: kinds' spec and status first, then the rest.
    pub fn kind_of_spec(&self, type_name: &str) -> Option<&Kind> {
        self.kinds.iter().find(|k| k.spec == type_name)
    }

    pub fn kind(&self, name: &str) -> Option<&Kind> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// The enum of a kind's one-word state (`status.state`, or `status.phase`), with the field's
    /// name: what a reason's `state` is checked against and the reference names.
    pub fn state_enum(&self, kind: &Kind) -> Option<(&'static str, &[EnumValue])> {
        let status = self.type_def(kind.status.as_deref()?)?;
        let TypeBody::Object { fields, .. } = &status.body else {
            return None;
        };
        ["state", "phase"].into_iter().find_map(|field| {
            let f = fields.iter().find(|f| f.name == field)?;
            let TypeRef::Named(name) = &f.ty else {
                return None;
            };
            match &self.type_def(name)?.body {
                TypeBody::Enum { values } => Some((field, values.as_slice())),
                TypeBody::Object { .. } => None,
            }
        })
    }

    /// The reasons a kind's status can carry, in declaration order.
    pub fn reasons_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a ReasonDef> {
        self.reasons
            .iter()
            .filter(move |r| r.kinds.iter().any(|k| k == kind))
    }
}
