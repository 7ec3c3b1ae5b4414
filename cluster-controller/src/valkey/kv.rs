//! The `key:value` text replies (INFO, CLUSTER INFO), split into sections.

use super::ParseError;

/// A `key:value` reply in order: `(section, key, value)` where `section` is the lowercase name of
/// the last `# Section` header above the line (empty before the first).
pub fn parse(reply: &'static str, text: &str) -> Result<Vec<(String, String, String)>, ParseError> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_prefix('#') {
            section = name.trim().to_ascii_lowercase();
        } else if let Some((key, value)) = line.split_once(':') {
            out.push((section.clone(), key.to_owned(), value.to_owned()));
        } else {
            return Err(ParseError::Shape {
                reply,
                expected: "`key:value` or `# Section` lines",
                got: line.chars().take(80).collect(),
            });
        }
    }
    Ok(out)
}
