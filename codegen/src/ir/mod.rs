//! The intermediate representation: every schema file read ([`load`]), checked ([`check`]) and
//! resolved into one [`Api`] ([`model`]).
//!
//! The emitters (Rust, docs) only ever see this representation, never the YAML, so a rule about
//! a field is interpreted in one place.

mod check;
mod load;
mod model;

pub use load::{load_dir, load_sources};
pub use model::*;
