//! Spelling: from the API's camelCase to Rust's snake_case and PascalCase.

use proc_macro2::Ident;
use quote::format_ident;

/// `podIP` → `pod_ip`, `observedGeneration` → `observed_generation`, `ValkeyNode` → `valkey_node`.
pub fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let starts_word = prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
                || (prev.is_some_and(|p| p.is_ascii_uppercase())
                    && next.is_some_and(|n| n.is_ascii_lowercase()));
            if starts_word {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A field's Rust name; Rust keywords become raw identifiers.
pub fn rust_field_ident(json_name: &str) -> Ident {
    let snake = snake_case(json_name);
    if syn::parse_str::<Ident>(&snake).is_ok() {
        format_ident!("{snake}")
    } else {
        format_ident!("r#{snake}")
    }
}

/// An enum value's Rust variant: `primary` → `Primary`, `StatefulSet` stays.
pub fn variant_ident(value: &str) -> Ident {
    let mut chars = value.chars();
    let first = chars.next().map(|c| c.to_ascii_uppercase()).unwrap_or('_');
    format_ident!("{}{}", first, chars.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_handles_acronyms_and_words() {
        assert_eq!(snake_case("podIP"), "pod_ip");
        assert_eq!(snake_case("observedGeneration"), "observed_generation");
        assert_eq!(snake_case("ValkeyNodeSpec"), "valkey_node_spec");
        assert_eq!(snake_case("HTTPServer"), "http_server");
        assert_eq!(snake_case("shards"), "shards");
    }

    #[test]
    fn keywords_become_raw_identifiers() {
        assert_eq!(rust_field_ident("type").to_string(), "r#type");
        assert_eq!(rust_field_ident("podIP").to_string(), "pod_ip");
    }

    #[test]
    fn variants_are_pascal_case() {
        assert_eq!(variant_ident("primary").to_string(), "Primary");
        assert_eq!(variant_ident("StatefulSet").to_string(), "StatefulSet");
    }
}
