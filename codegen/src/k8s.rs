//! Kubernetes types a schema may name. The generated types use k8s-openapi's, so their schema in
//! the CRD is k8s-openapi's own and never restated by hand.

use proc_macro2::TokenStream;
use quote::quote;

macro_rules! k8s_types {
    ($( $variant:ident => $($path:ident)::+ ),* $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum K8sType { $($variant),* }

        impl K8sType {
            const ALL: &'static [K8sType] = &[$(K8sType::$variant),*];

            pub fn name(self) -> &'static str {
                match self { $(K8sType::$variant => stringify!($variant)),* }
            }

            /// The fully qualified Rust path of the type.
            pub fn rust_path(self) -> TokenStream {
                match self { $(K8sType::$variant => quote!(::k8s_openapi::$($path)::+)),* }
            }

        }
    };
}

k8s_types! {
    Affinity => api::core::v1::Affinity,
    Condition => apimachinery::pkg::apis::meta::v1::Condition,
    LocalObjectReference => api::core::v1::LocalObjectReference,
    Quantity => apimachinery::pkg::api::resource::Quantity,
    ResourceRequirements => api::core::v1::ResourceRequirements,
    Toleration => api::core::v1::Toleration,
    TopologySpreadConstraint => api::core::v1::TopologySpreadConstraint,
}

impl K8sType {
    pub fn from_name(name: &str) -> Option<K8sType> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|k| k.name()).collect()
    }
}
