//! Who may do what inside Valkey, for every parent of ValkeyNodes (a ValkeyCluster today, a
//! ValkeyReplication next): the users each server holds and their rights ([`rights`],
//! [`users`]), password rotation without a moment of disagreement between servers
//! ([`rotation`]), and applying a change to running servers without restarting them
//! ([`sync`]). No Kubernetes here: the parent's controller keeps the users in Secrets and
//! calls these.

pub mod rights;
pub mod rotation;
pub mod sentinels;
pub mod sync;
pub mod users;

pub use sync::{AccessState, Bootstrap, SyncReport, Target};
pub use users::{AclUser, Login, OperatorPasswords, UserSet, password_hash};
