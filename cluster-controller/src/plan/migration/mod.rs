//! Moving slots from one primary to another, one command per reconcile pass.
//!
//! Both machines are stateless: `next_step` looks only at what the nodes report now, so a
//! controller killed between any two commands picks up where it stopped.
//! - [`legacy`]: Valkey before 9, one slot at a time with SETSLOT IMPORTING/MIGRATING, MIGRATE
//!   and SETSLOT NODE.
//! - [`atomic`]: Valkey 9+, `CLUSTER MIGRATESLOTS` followed through `CLUSTER GETSLOTMIGRATIONS`.

pub mod atomic;
pub mod command;
pub mod legacy;
